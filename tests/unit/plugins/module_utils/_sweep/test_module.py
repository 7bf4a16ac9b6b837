"""The throughput_sweep module (module_utils/_sweep/module.py) through ``ansible`` and
``ansible-doc``, against tests/unit/knownrate_server.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from .helpers import (
    ROOT,
    _ansible,
    configure,
)

# ------------------------------------------------------------------------------------------------
# The module through ansible
# ------------------------------------------------------------------------------------------------


def test_module_through_ansible(server: str) -> None:
    configure(server, rate=2000.0, prefill_s=0.01, slots=4)
    tree = tempfile.mkdtemp(prefix="sweep-tree-")
    try:
        args = {"url": server + "/v1", "concurrency": [2, 1], "requests": 4, "max_tokens": 30,
                "api_key": "s3cret"}
        proc = _ansible(["-a", json.dumps(args)], tree)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        result = json.loads((Path(tree) / "localhost").read_text())
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    assert result["changed"] is False
    facts = result["ansible_facts"]["sglang_sweep"]
    assert facts["schema_version"] == 1 and facts["url"] == server and facts["api"] == "openai"
    assert facts["model"] == "/models/knownrate"
    assert facts["server"]["version"] == "0.5.17" and facts["server"]["server_info_path"] == "/server_info"
    assert facts["options"]["concurrency"] == [1, 2] and facts["options"]["api_key_set"] is True
    assert "s3cret" not in json.dumps(result)
    assert [p["concurrency"] for p in facts["points"]] == [1, 2]
    for point in facts["points"]:
        assert point["ok"] == 4 and point["output_tokens"] == 120 and point["avg_output_tokens"] == 30
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s"):
            assert set(point[key]) == {"mean", "p50", "p90", "p99"} and point[key]["p50"] > 0
        assert set(point["client"]) == {"loop_lag_ms_p99", "loop_lag_own_ms_p99", "cpu_util"}
        assert point["server_after"]["max_running_requests"] == 4
    assert facts["peak"]["concurrency"] in (1, 2) and facts["knee"] is not None
    assert len(facts["records"]) == 8
    assert set(facts["records"][0]) == {
        "level", "concurrency", "index", "ok", "error_kind", "http_status", "output_tokens",
        "finish_reason", "cached_tokens", "ttft_ms", "e2e_s", "itl_ms_mean", "start_s", "end_s",
    }
    assert facts["started"].endswith("Z") and facts["finished"] >= facts["started"]


def test_module_check_mode_and_missing_aiohttp(server: str) -> None:
    configure(server)
    before = json.loads(urllib.request.urlopen(server + "/_stats", timeout=5).read())["received"]
    proc = _ansible(["--check", "-a", f"url={server}"])
    assert proc.returncode == 0 and "SKIPPED" in proc.stdout, proc.stdout + proc.stderr
    after = json.loads(urllib.request.urlopen(server + "/_stats", timeout=5).read())["received"]
    assert after == before  # nothing sent
    bare = next(
        (p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
         if os.path.exists(p) and subprocess.run([p, "-c", "import aiohttp"], capture_output=True).returncode),
        None,
    )
    if bare is None:
        pytest.skip("no Python without aiohttp on this machine")
    proc = _ansible(["-a", f"url={server}", "-e", f"ansible_python_interpreter={bare}"])
    assert proc.returncode != 0
    assert "cannot import aiohttp" in proc.stdout and bare in proc.stdout


def test_ansible_doc() -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "--json", "llmops.sglang.throughput_sweep"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["llmops.sglang.throughput_sweep"]
    options = doc["doc"]["options"]
    assert {"url", "api", "concurrency", "requests", "duration", "stop_on_plateau", "api_key"} <= set(options)
    assert options["api_key"].get("no_log", True)
    assert "sglang_sweep" in json.dumps(doc["return"])


def test_rate_mode_speaks_of_the_offered_rate() -> None:
    """Issue 28 item 3: in rate mode every level has the same C (its in-flight cap, 4096 on the
    H200), so peak, knee and failed levels are named by their offered rate."""
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep.curve import error_warning
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep.module import failed_levels, summary

    ok = {"concurrency": 4096, "offered_rate": 2.0, "output_tok_s": 100.0, "status": "ok", "errors": {"total": 0},
          "requests": 10, "ok": 10}
    top = {**ok, "offered_rate": 4.0, "output_tok_s": 180.0}
    bad = {**ok, "offered_rate": 8.0, "output_tok_s": 90.0, "status": "errors", "ok": 6, "requests": 10,
           "errors": {"total": 4, "http_5xx": 4}, "error_rate": 0.4}
    facts = {"mode": "rate", "points": [ok, top, bad], "peak": top, "knee": top, "levels_with_errors": [4096]}
    text = summary(facts)
    assert "peak 180.0 tok/s at 4 req/s" in text and "knee 4 req/s" in text, text
    assert "requests failed at 8 req/s" in text and "C=4096" not in text, text
    assert failed_levels(facts).startswith("8 req/s: 4 of 10 requests failed")
    warning = error_warning(facts["points"])
    assert warning is not None and warning.startswith("requests failed at 8 req/s: ") and "C=" not in warning
