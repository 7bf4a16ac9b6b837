"""A PD host swept on its own as the pair it is (the ``pd`` option, _sweep/pair.py): each request
goes to a prefill and a decode with the same bootstrap room, as sglang-router 0.3.2 sends it; the
decode's stream is measured; a prefill that fails fails the request at once. Against two embedded
engine processes (a prefill and a decode, loopback, bounded)."""
from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.pair import Pairs, normalized

from .....ports import free_port
from .helpers import PD_ENGINE_ARGV, engine_process

PREFILL = {"url": "http://10.0.0.5:30000/", "bootstrap_port": 8998}


def test_the_option_is_checked_and_normalized() -> None:
    assert normalized(None, "http://d:1") is None
    pd = normalized({"prefill": [PREFILL, {"url": "http://10.0.0.6:30000/v1", "bootstrap_port": "8999"}]},
                    "http://10.0.0.7:30001")
    assert pd == {"prefill": [{"url": "http://10.0.0.5:30000", "bootstrap_port": 8998},
                              {"url": "http://10.0.0.6:30000", "bootstrap_port": 8999}],
                  "decode": ["http://10.0.0.7:30001"]}
    for bad, why in (({"prefill": []}, "needs prefill"),
                     ({"prefill": [{"url": "http://p:1", "bootstrap_port": 0}]}, "1-65535"),
                     ({"prefill": [{"url": "p:1", "bootstrap_port": 8998}]}, "not an http"),
                     ({"prefill": [PREFILL], "decode": ["http://other:2"]}, "does not list url")):
        with pytest.raises(sw.SweepError, match=why):
            normalized(bad, "http://d:1")
    with pytest.raises(sw.SweepError, match="pd.decode"):  # through the options' own check
        sw.SweepOptions(url="http://d:1", concurrency=[1], pd={"prefill": [PREFILL], "decode": ["http://x:2"]}).normalized()


def test_requests_go_round_robin_with_the_prefills_bootstrap_and_a_fresh_room() -> None:
    pairs = Pairs({"prefill": [{"url": "http://10.0.0.5:30000", "bootstrap_port": 8998},
                               {"url": "http://10.0.0.5:30001", "bootstrap_port": 8999}],
                   "decode": ["http://10.0.0.6:30000"]})
    seen = [pairs.next() for _ in range(4)]
    assert [p.prefill for p in seen] == ["http://10.0.0.5:30000", "http://10.0.0.5:30001"] * 2
    assert {p.decode for p in seen} == {"http://10.0.0.6:30000"}
    assert [(p.fields["bootstrap_host"], p.fields["bootstrap_port"]) for p in seen[:2]] == [
        ("10.0.0.5", 8998), ("10.0.0.5", 8999)]
    assert len({p.fields["bootstrap_room"] for p in seen}) == 4
    assert pairs.urls == ["http://10.0.0.5:30000", "http://10.0.0.5:30001", "http://10.0.0.6:30000"]


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("sglang:") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = out.get(name.split("{")[0], 0.0) + float(value)
    return out


def test_a_prefill_and_a_decode_swept_as_a_pair(tmp_path: Path) -> None:
    boot = free_port()
    pd_args = ["--disaggregation-transfer-backend", "mooncake_tcp", "--disaggregation-bootstrap-port", str(boot)]
    with engine_process(tmp_path / "prefill.log", "--disaggregation-mode", "prefill", *pd_args, scale=0.01,
                        argv=PD_ENGINE_ARGV) as prefill, \
            engine_process(tmp_path / "decode.log", "--disaggregation-mode", "decode", *pd_args, scale=0.01,
                           argv=PD_ENGINE_ARGV) as decode:
        quick = {"concurrency": [2], "requests": 6, "max_tokens": 16, "warmup": 1, "level_warmup": False}
        facts = sw.run_sweep(sw.SweepOptions(
            url=decode, pd={"prefill": [{"url": prefill, "bootstrap_port": boot}]}, flush_cache=True,
            worker_metrics=[{"name": "p", "url": prefill, "side": "prefill"},
                            {"name": "d", "url": decode, "side": "decode"}], **quick))
        point = facts["points"][0]
        assert point["ok"] == point["requests"] == 6 and point["output_tok_s"] > 0, point
        assert point["cache_state"]["flush"]["ok"] is True  # both instances flushed
        # every request's KV went from the prefill to the decode (and the warm-up's): the pair, not
        # two servers each running alone
        prefill_metrics, decode_metrics = _metrics(prefill), _metrics(decode)
        assert prefill_metrics["sglang:kv_transfer_latency_ms_count"] == 7
        assert decode_metrics["sglang:num_bootstrap_failed_reqs_total"] == 0
        assert point["sides"]["prefill"]["pd_kv_transfers"] == 6
        assert json.dumps(facts["options"]["pd"]["prefill"]) == json.dumps([{"url": prefill, "bootstrap_port": boot}])

        # a prefill that does not answer fails the request at once, naming it: the decode is not
        # waited for (it would wait for a KV that never comes)
        dead = f"http://127.0.0.1:{free_port()}"
        start = time.monotonic()
        facts = sw.run_sweep(sw.SweepOptions(url=decode, pd={"prefill": [{"url": dead, "bootstrap_port": boot}]},
                                             timeout=60, **dict(quick, requests=2, warmup=0)))
        point = facts["points"][0]
        assert point["ok"] == 0 and point["errors"]["connection"] == 2, point
        assert f"prefill {dead}: " in json.dumps(point)
        assert time.monotonic() - start < 50  # not the 60 s request timeout
