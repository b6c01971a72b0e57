"""`data check` / `data download` / `--stats`: checksums, golden statistics, downloads against a loopback server."""

from __future__ import annotations

import hashlib
import http.client
import http.server
import json
import threading
from pathlib import Path

import pytest

from memrepro.cli.data import _stats_loaders
from memrepro.cli.data import main as data_main
from memrepro.datasets.catalogue import DOWNLOADS, DataFile, catalogue
from memrepro.datasets.download import ChecksumMismatch, OfflineError, check, download
from memrepro.datasets.stats import benchmark_stats, personamem_question_stats
from memrepro.types import Benchmark

GOLDEN = Path(__file__).parent / "golden" / "stats"


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.files.get(self.path.lstrip("/"))
        if body is None:
            self.send_error(404)
            return
        truncated = self.path.startswith("/broken/")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body) + (1000 if truncated else 0)))
        self.end_headers()
        self.wfile.write(body)
        if truncated:
            self.wfile.flush()
            self.close_connection = True

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def entry(path: str, body: bytes, url: str, pinned: bool = True) -> DataFile:
    return DataFile("locomo", path, url, hashlib.sha256(body).hexdigest() if pinned else None)


def test_download_verifies_checksum_and_skips_present_files(server: str, tmp_path: Path) -> None:
    body = b'[{"sample_id": "x"}]'
    _Handler.files = {"locomo/locomo10.json": body}
    pinned = entry("locomo/locomo10.json", body, server + "/locomo/locomo10.json")
    result = download([pinned], tmp_path, progress=lambda _: None)
    assert result[0].state == "downloaded" and (tmp_path / pinned.path).read_bytes() == body
    assert download([pinned], tmp_path, progress=lambda _: None)[0].state == "present"
    assert check([pinned], tmp_path)[0].state == "ok"


def test_download_refuses_a_mismatch_and_leaves_nothing(server: str, tmp_path: Path) -> None:
    _Handler.files = {"a.json": b"tampered"}
    wrong = DataFile("locomo", "a.json", server + "/a.json", "0" * 64)
    with pytest.raises(ChecksumMismatch, match="does not match the pinned"):
        download([wrong], tmp_path, progress=lambda _: None)
    assert list(tmp_path.iterdir()) == []
    kept = download([wrong], tmp_path, allow_mismatch=True, progress=lambda _: None)
    assert kept[0].state == "kept-mismatch" and (tmp_path / "a.json").exists()


def test_interrupted_transfer_leaves_no_partial_file(server: str, tmp_path: Path) -> None:
    _Handler.files = {"broken/b.json": b"x" * 5000}
    broken = DataFile("locomo", "b.json", server + "/broken/b.json", None)
    with pytest.raises((ConnectionError, http.client.IncompleteRead)):
        download([broken], tmp_path, progress=lambda _: None)
    assert list(tmp_path.iterdir()) == []


def test_offline_is_one_line_naming_the_data_dir(tmp_path: Path, capsys) -> None:
    with pytest.raises(OfflineError):
        download([DataFile("locomo", "x.json", "http://127.0.0.1:9/x.json", None)], tmp_path,
                 progress=lambda _: None)
    code = data_main(["download", "--benchmark", "locomo", "--data-dir", str(tmp_path), "--mirror",
                      "http://127.0.0.1:9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and err[0].startswith("offline:") and "MEMREPRO_DATA_DIR" in err[0]


def test_cli_download_through_a_mirror(server: str, tmp_path: Path) -> None:
    real = [e for e in DOWNLOADS if e.benchmark == "locomo"]
    # a mirror serving bytes that do not match the pinned LoCoMo hash is refused
    _Handler.files = {e.path: b"not locomo" for e in real}
    assert data_main(["download", "--benchmark", "locomo", "--data-dir", str(tmp_path / "d"), "--mirror",
                      server]) == 1
    assert not (tmp_path / "d" / "locomo" / "locomo10.json").exists()


def test_check_reports_missing_ok_and_mismatch(tmp_path: Path, capsys) -> None:
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo10.json").write_text("[]")
    assert data_main(["check", "--benchmark", "locomo", "--data-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "mismatch  locomo/locomo10.json" in out and "missing   locomo/corrected/locomo10.json" in out


def test_catalogue_paths_are_unique_and_relative() -> None:
    paths = [e.path for e in catalogue()]
    assert len(paths) == len(set(paths)) and not any(p.startswith("/") for p in paths)
    assert sum(e.benchmark == "personabench" for e in catalogue()) == 108


@pytest.mark.real_data
def test_real_data_checks_out(real_data_dir: Path) -> None:
    statuses = check(catalogue(), real_data_dir)
    assert not [s.entry.path for s in statuses if s.state == "mismatch"]
    assert sum(s.state == "ok" for s in statuses) == 613  # every local file the spec lists, all pinned


@pytest.mark.real_data
@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_statistics_match_golden(name: str, real_data_dir: Path) -> None:
    loaded = _stats_loaders(real_data_dir)[name]()
    stats = benchmark_stats(loaded) if isinstance(loaded, Benchmark) else personamem_question_stats(loaded)
    assert json.loads(json.dumps(stats)) == json.loads((GOLDEN / f"{name}.json").read_text())


def test_golden_statistics_agree_with_the_spec() -> None:
    """The golden files themselves are checked against the spec's counts (datasets.md, protocols.md)."""
    golden = {p.stem: json.loads(p.read_text()) for p in GOLDEN.glob("*.json")}
    assert (golden["locomo"]["queries"], golden["locomo"]["memories"]) == (1977, 5882)
    assert golden["locomo"]["scored_by_category"] == {"1": 281, "2": 320, "3": 89, "4": 841, "5": 446}
    assert (golden["longmemeval_oracle"]["queries"], golden["longmemeval_oracle"]["scored_queries"]) == (500, 419)
    assert golden["longmemeval_oracle"]["memories"] == 948
    assert (golden["longmemeval_s"]["queries"], golden["longmemeval_s"]["scored_queries"]) == (498, 418)
    assert golden["longmemeval_s"]["memories"] == 23744
    assert golden["longmemeval_s"]["memories_per_episode"] == {"min": 38, "mean": 47.6787, "max": 58}
    assert (golden["personabench"]["queries"], golden["personabench"]["scored_queries"]) == (263, 230)
    assert golden["personabench"]["memories"] == 527
    assert golden["personabench"]["scored_by_category"] == {"Basic_information_easy": 110, "Preference_easy": 26,
                                                            "Preference_hard": 41, "Social_easy": 53}
    assert golden["personamem_questions_32k"]["queries"] == 589
    assert golden["personamem_questions_32k"]["options_format"] == {"json": 286, "repr": 303}
