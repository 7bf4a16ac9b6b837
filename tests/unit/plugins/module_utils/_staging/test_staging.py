"""Model staging (plugins/module_utils/_staging) against tests/hubserver.py, a local stand-in for
the Hub's file endpoints, with the real, pinned huggingface_hub client."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._staging import disk, hub, stage
from ansible_collections.llmops.sglang.plugins.module_utils._staging.credentials import read_token
from ansible_collections.llmops.sglang.plugins.module_utils._staging.errors import StageError
from ansible_collections.llmops.sglang.plugins.module_utils._staging.layout import (
    Layout,
    is_commit,
    safe_relpath,
)
from ansible_collections.llmops.sglang.plugins.module_utils._staging.listing import (
    Listing,
    RepoFile,
    read_marker,
)
from ansible_collections.llmops.sglang.plugins.module_utils._staging.verify import problem

from .....hubserver import HubServer, demo_repo, git_blob_sha1
from .....ports import free_port

ROOT = Path(__file__).resolve().parents[5]
TOKEN = "hf_TestTokenNeverLeaks0123456789"
W2 = "model-00002-of-00003.safetensors"


@pytest.fixture
def repo():
    return demo_repo(weight_mb=2.5)


@pytest.fixture
def server(repo):
    with HubServer([repo], token=TOKEN) as srv:
        yield srv


def _req(server: HubServer, repo, cache: Path, **kw) -> stage.Request:
    return stage.Request(repo=repo.name, commit=repo.commit, cache_dir=str(cache), endpoint=server.endpoint,
                         token=TOKEN, **kw)


def _lay(repo, cache: Path) -> Layout:
    return Layout(str(cache), repo.name, repo.commit)


def test_fresh_download_verified_marker_and_snapshot(server, repo, tmp_path):
    progress = tmp_path / "progress.jsonl"
    res = stage.stage(_req(server, repo, tmp_path / "cache", progress_file=str(progress), labels={"host": "h1"}))
    lay = _lay(repo, tmp_path / "cache")
    assert res.changed and res.path == lay.snapshot and res.requests == "listing"
    assert sorted(res.downloaded_files) == sorted(repo.files) and res.refetched == []
    for path, data in repo.files.items():
        assert (Path(lay.snapshot) / path).read_bytes() == data
    assert json.loads((Path(lay.snapshot) / "config.json").read_text())["model_type"]
    marker = read_marker(lay.marker, repo.name, repo.commit)
    assert marker is not None and len(marker[0].files) == len(repo.files)
    assert not Path(lay.partial).exists()
    lines = [json.loads(x) for x in progress.read_text().splitlines()]
    assert lines[0]["state"] == "started" and lines[-1]["state"] == "complete"
    assert lines[-1]["bytes_done"] == lines[-1]["bytes_total"] == sum(len(d) for d in repo.files.values())
    assert lines[-1]["files_done"] == len(repo.files) and lines[-1]["host"] == "h1"
    # the LFS files came from the CDN origin, which never saw the token; the hub always did
    assert len(server.requests("cdn")) == 3
    for r in server.requests("cdn"):
        assert "authorization" not in {k.lower() for k in r.headers}
    for r in server.requests("hub"):
        assert {k.lower(): v for k, v in r.headers.items()}["authorization"] == f"Bearer {TOKEN}"


def test_rerun_same_commit_no_request_nothing_written(server, repo, tmp_path):
    stage.stage(_req(server, repo, tmp_path))
    lay = _lay(repo, tmp_path)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    n = len(server.log)
    res = stage.stage(_req(server, repo, tmp_path))
    assert not res.changed and res.requests == "none" and res.downloaded_files == []
    assert len(server.log) == n  # no request at all (the commit is pinned, the marker complete)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before
    # offline with a complete marker: the same, and the same path
    off = stage.stage(_req(server, repo, tmp_path, offline=True))
    assert off.path == lay.snapshot and not off.changed and len(server.log) == n


def test_offline_without_complete_snapshot_fails_without_request(server, repo, tmp_path):
    with pytest.raises(StageError, match="offline .* not completely staged"):
        stage.stage(_req(server, repo, tmp_path, offline=True))
    assert server.log == []


def test_flipped_byte_on_disk_is_found_and_fetched_again(server, repo, tmp_path):
    stage.stage(_req(server, repo, tmp_path))
    lay = _lay(repo, tmp_path)
    target = Path(lay.file(W2))
    data = bytearray(target.read_bytes())
    data[1000] ^= 0xFF
    target.write_bytes(bytes(data))  # a new mtime: quick verification hashes it
    res = stage.stage(_req(server, repo, tmp_path))
    assert res.changed and res.downloaded_files == [W2]
    assert res.refetched[0]["path"] == W2 and "sha256" in res.refetched[0]["problem"]
    assert target.read_bytes() == repo.files[W2]
    assert read_marker(lay.marker, repo.name, repo.commit) is not None


def test_flipped_byte_with_mtime_kept_needs_full_verify(server, repo, tmp_path):
    stage.stage(_req(server, repo, tmp_path))
    target = Path(_lay(repo, tmp_path).file(W2))
    st = target.stat()
    data = bytearray(target.read_bytes())
    data[7] ^= 0x01
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not stage.stage(_req(server, repo, tmp_path)).changed  # quick: size and mtime as recorded
    res = stage.stage(_req(server, repo, tmp_path, verify="full"))
    assert res.changed and res.downloaded_files == [W2] and target.read_bytes() == repo.files[W2]


def test_wrong_sha256_from_the_server_is_refused_and_no_marker(server, repo, tmp_path):
    bad = bytearray(repo.files[W2])
    bad[123] ^= 0x55
    server.serve[W2] = bytes(bad)  # same size, other content than the listing's sha256
    with pytest.raises(StageError, match=f"{W2} .* does not match the revision after 2 downloads .*sha256") as err:
        stage.stage(_req(server, repo, tmp_path))
    assert err.value.details["path"] == W2
    lay = _lay(repo, tmp_path)
    assert not Path(lay.marker).exists() and not Path(lay.file(W2)).exists()
    assert not Path(lay.part(W2)).exists()
    assert len([r for r in server.requests("cdn") if W2 in r.path]) == 2  # fetched once more, then refused
    # the server fixed: the next run fetches only what is missing
    del server.serve[W2]
    res = stage.stage(_req(server, repo, tmp_path))
    assert res.downloaded_files == [W2, "model-00003-of-00003.safetensors", "tokenizer.json"]
    assert Path(lay.marker).exists()


def test_disk_too_small_refused_before_any_download(server, repo, tmp_path, monkeypatch):
    monkeypatch.setenv(disk.FREE_BYTES_ENV, str(1024 * 1024))
    with pytest.raises(StageError, match=r"not enough disk space at .*: need \d+ bytes") as err:
        stage.stage(_req(server, repo, tmp_path / "cache", reserve_bytes=0))
    total = sum(len(d) for d in repo.files.values())
    assert err.value.details["need_bytes"] == total and err.value.details["free_bytes"] == 1024 * 1024
    assert err.value.details["where"] == str(tmp_path)  # the nearest folder that exists
    assert [r.method for r in server.log] == ["GET"] and "/tree/" in server.log[0].path  # the listing only
    assert not (tmp_path / "cache").exists()


def test_room_counts_only_missing_bytes(server, repo, tmp_path, monkeypatch):
    stage.stage(_req(server, repo, tmp_path))
    lay = _lay(repo, tmp_path)
    os.unlink(lay.marker)
    os.unlink(lay.file(W2))
    monkeypatch.setenv(disk.FREE_BYTES_ENV, str(len(repo.files[W2]) + 10))
    res = stage.stage(_req(server, repo, tmp_path))
    assert res.need_bytes == len(repo.files[W2]) and res.downloaded_files == [W2]


def test_check_mode_writes_nothing(server, repo, tmp_path):
    res = stage.stage(_req(server, repo, tmp_path / "c", check_mode=True))
    assert res.changed and sorted(res.downloaded_files) == sorted(repo.files)
    assert not (tmp_path / "c").exists()
    assert not server.requests("cdn")


_KILLED = """
import sys
sys.path[:0] = [{root!r}, {collections!r}]
from ansible_collections.llmops.sglang.plugins.module_utils._staging import stage
stage.stage(stage.Request(repo={repo!r}, commit={commit!r}, cache_dir={cache!r}, endpoint={endpoint!r}, token={token!r}))
"""


def test_download_killed_mid_file_resumes_where_it_stopped(server, repo, tmp_path):
    size = len(repo.files[W2])
    server.stall_after[W2] = size // 2 + 300_000  # past the first 1 MiB chunk, then the connection hangs
    lay = _lay(repo, tmp_path)
    code = _KILLED.format(root=str(ROOT), collections=str(ROOT / "collections"), repo=repo.name,
                          commit=repo.commit, cache=str(tmp_path), endpoint=server.endpoint, token=TOKEN)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    part = Path(lay.part(W2))
    try:
        for _ in range(600):  # the bytes land on disk: polled, no timing assumed
            if part.exists() and part.stat().st_size >= hub.CHUNK_BYTES:
                break
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
        else:
            pytest.fail("the partial file never reached one chunk")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        server.release()
    kept = part.stat().st_size
    assert 0 < kept < size and not Path(lay.marker).exists()
    del server.stall_after[W2]
    n = len(server.requests("cdn"))
    res = stage.stage(_req(server, repo, tmp_path))
    resumed = [r for r in server.requests("cdn")[n:] if W2 in r.path]
    assert [r.headers.get("Range") for r in resumed] == [f"bytes={kept}-"]
    assert W2 in res.downloaded_files and "model-00001-of-00003.safetensors" not in res.downloaded_files
    assert Path(lay.file(W2)).read_bytes() == repo.files[W2]
    assert Path(lay.marker).exists() and not part.exists()


def test_token_never_in_results_files_or_messages(repo, tmp_path):
    with HubServer([repo], token=TOKEN) as srv:
        res = stage.stage(_req(srv, repo, tmp_path, progress_file=str(tmp_path / "p.jsonl")))
        assert TOKEN not in json.dumps(res.to_json())
        srv.serve[W2] = b"x" * len(repo.files[W2])
        os.unlink(Path(_lay(repo, tmp_path).file(W2)))
        with pytest.raises(StageError) as err:
            stage.stage(_req(srv, repo, tmp_path))
        assert TOKEN not in str(err.value) and TOKEN not in json.dumps(err.value.details)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_wrong_token_fails_with_the_hub_error_and_no_token_echo(server, repo, tmp_path):
    req = _req(server, repo, tmp_path)
    req.token = "hf_wrong_" + TOKEN
    with pytest.raises(StageError, match="could not list the files") as err:
        stage.stage(req)
    assert req.token not in str(err.value)


def test_resolve_branch_to_commit(server, repo):
    assert hub.resolve(server.endpoint, repo.name, "main", TOKEN) == repo.commit
    with pytest.raises(StageError, match="could not resolve") as err:
        hub.resolve(server.endpoint, repo.name, "no-such-branch", TOKEN)
    assert err.value.details == {"unreachable": False}  # the Hub answered: the revision is not there


def test_a_hub_that_does_not_answer_is_told_apart_from_an_answer(repo):
    """Issue 28 item 9: a deploy may go on with what is staged when the Hub did not answer
    (refused here), never when it answered that the revision is not there (above)."""
    closed = free_port()  # a port nothing listens on: connection refused
    with pytest.raises(StageError, match="could not resolve") as err:
        hub.resolve(f"http://127.0.0.1:{closed}", repo.name, "main", None)
    assert err.value.details == {"unreachable": True}


def test_request_refuses_a_branch_name(tmp_path):
    with pytest.raises(StageError, match="not a commit"):
        stage.stage(stage.Request(repo="a/b", commit="main", cache_dir=str(tmp_path)))


def test_listing_refuses_paths_leaving_the_snapshot_and_repos_without_config():
    assert safe_relpath("a/b.json") and not safe_relpath("../x") and not safe_relpath("/etc/passwd")
    assert not safe_relpath("a//b") and not safe_relpath("a/./b")
    with pytest.raises(StageError, match="would leave the snapshot"):
        Listing("a/b", "0" * 40, [RepoFile("config.json", 2), RepoFile("x/../../y", 1)]).check()
    with pytest.raises(StageError, match="no config.json"):
        Listing("a/b", "0" * 40, [RepoFile("model.safetensors", 2)]).check()
    assert is_commit("0123456789abcdef0123456789abcdef01234567") and not is_commit("main")


def test_verify_git_blob_and_sha256(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"hello")
    assert problem(str(f), RepoFile("f", 5, blob_id=git_blob_sha1(b"hello"))) is None
    assert "git-sha1" in (problem(str(f), RepoFile("f", 5, blob_id="0" * 40)) or "")
    assert "size 5" in (problem(str(f), RepoFile("f", 6, blob_id="0" * 40)) or "")
    assert problem(str(tmp_path / "nope"), RepoFile("nope", 1)) == "missing"


def test_marker_unreadable_or_other_commit_is_no_marker(tmp_path):
    m = tmp_path / "m.json"
    m.write_text("{not json")
    assert read_marker(str(m), "a/b", "0" * 40) is None
    m.write_text(json.dumps({"version": 1, "repo": "a/b", "commit": "1" * 40, "files": []}))
    assert read_marker(str(m), "a/b", "0" * 40) is None


def test_token_sources(tmp_path):
    f = tmp_path / "tok"
    f.write_text(TOKEN + "\n")
    f.chmod(0o644)
    with pytest.raises(StageError, match="chmod 0600"):
        read_token(None, str(f), {})
    f.chmod(0o600)
    assert read_token(None, str(f), {}) == TOKEN
    assert read_token(None, None, {"HF_TOKEN": "hf_env"}) == "hf_env"
    assert read_token("hf_opt", str(f), {"HF_TOKEN": "hf_env"}) == "hf_opt"
    assert read_token(None, None, {}) is None
    with pytest.raises(StageError, match="cannot be read"):
        read_token(None, str(tmp_path / "missing"), {})


def _fake_revision(cache: Path, repo: str, commit: str, complete: bool, when: float) -> None:
    lay = Layout(str(cache), repo, commit)
    Path(lay.snapshot).mkdir(parents=True)
    (Path(lay.snapshot) / "config.json").write_text("{}")
    if complete:
        Path(lay.marker).parent.mkdir(parents=True, exist_ok=True)
        Path(lay.marker).write_text("{}")
        os.utime(lay.marker, (when, when))


def test_prune_keeps_the_staged_the_serving_and_the_newest_up_to_keep(tmp_path):
    from ansible_collections.llmops.sglang.plugins.module_utils._staging import prune

    repo = "org/m"
    c = {n: f"{n:040x}" for n in range(1, 6)}
    for n in (1, 2, 3, 4):
        _fake_revision(tmp_path, repo, c[n], complete=True, when=1000.0 + n)
    _fake_revision(tmp_path, repo, c[5], complete=False, when=0)  # a staging that never completed
    manifest = json.dumps({"instances": [{"argv": ["--model-path", Layout(str(tmp_path), repo, c[1]).snapshot]}]})
    # staging c4 while c1 serves: keep 2 = the staged one and the serving one
    assert prune.plan(str(tmp_path), repo, 2, c[4], [manifest]) == [c[2], c[3], c[5]]
    # keep 3: and the newest other complete one
    assert prune.plan(str(tmp_path), repo, 3, c[4], [manifest]) == [c[2], c[5]]
    assert prune.plan(str(tmp_path), repo, 0, c[4], [manifest]) == []
    # nothing serves: the staged one and the newest
    assert prune.plan(str(tmp_path), repo, 2, c[1], []) == [c[2], c[3], c[5]]
    for commit in prune.plan(str(tmp_path), repo, 2, c[4], [manifest]):
        prune.remove(str(tmp_path), repo, commit)
    assert prune.candidates(str(tmp_path), repo) == sorted([c[1], c[4]])
    assert Path(Layout(str(tmp_path), repo, c[1]).marker).exists()


def test_a_second_stager_waits_for_the_first_and_adopts_its_staging(server, repo, tmp_path):
    """Issue 28 item 10: after a Ctrl-C of stage.yml its async job kept downloading and the
    re-run's stager raced it into the same partial file (2,121,842 bytes for 1,060,921 listed,
    with a completion marker). Now one stager writes a repository at a time: the second waits on
    the first (stalled mid-file here), then finds its marker and fetches nothing."""
    import threading

    size = len(repo.files[W2])
    server.stall_after[W2] = size // 2 + 300_000
    lay = _lay(repo, tmp_path)
    results: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            results[name] = stage.stage(_req(server, repo, tmp_path))
        except Exception as exc:  # noqa: BLE001 - the assertion below shows it
            results[name] = exc

    first = threading.Thread(target=run, args=("first",))
    first.start()
    part = Path(lay.part(W2))
    for _ in range(600):  # the first one is inside its download, holding the lock
        if part.exists() and part.stat().st_size >= hub.CHUNK_BYTES:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the first stager never reached its download")
    second = threading.Thread(target=run, args=("second",))
    second.start()
    for _ in range(600):  # the second one has listed and is waiting (its listing request)
        if len([r for r in server.log if "/tree/" in r.path]) >= 2:
            break
        time.sleep(0.1)
    second.join(timeout=1.0)
    assert second.is_alive()  # waiting on the lock, not downloading
    assert len([r for r in server.requests("cdn") if W2 in r.path]) == 1
    server.release()  # the first one finishes
    del server.stall_after[W2]
    first.join(timeout=120)
    second.join(timeout=120)
    one, two = results["first"], results["second"]
    assert isinstance(one, stage.Result) and isinstance(two, stage.Result), results
    assert one.changed and W2 in one.downloaded_files
    assert not two.changed and two.downloaded_files == [] and two.waited_for is not None, two.to_json()
    # the first one's own resume after the stalled connection closed (a Range request), nothing more
    resumes = [r.headers.get("Range") or "" for r in server.requests("cdn") if W2 in r.path][1:]
    assert len(resumes) == 1 and resumes[0].startswith("bytes="), resumes
    assert Path(lay.file(W2)).read_bytes() == repo.files[W2] and Path(lay.marker).exists()
    assert read_marker(lay.marker, repo.name, repo.commit) is not None
