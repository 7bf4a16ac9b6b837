"""The tune_search action (plugins/action/tune_search.py): each step maps its options onto the
search's rules (plugin_utils/_tune.py, _tunereport.py; tested in detail in
tests/unit/plugins/plugin_utils/test_tune.py) and a run of the steps in the role's order chooses
as the rules do. Throughputs: the seed's MTP + HiCache curve (tests/fixtures/seed-benchmarks.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmops.sglang.plugins.action import tune_search
from ansible_collections.llmops.sglang.plugins.plugin_utils import _tune, _tunereport

from ..plugin_utils.test_tune import LEVELS, SEED_MTP_HICACHE, _pt, _sweep

H200 = {"gpus": [{"name": "NVIDIA H200", "memory_total_mib": 143771}] * 2}
RTX = {"gpus": [{"name": "NVIDIA RTX PRO 6000", "memory_total_mib": 97887}]}
HOSTVARS = {"a": {"ansible_facts": {"sglang_host": H200}}, "b": {"ansible_facts": {"sglang_host": H200}},
            "c": {"ansible_facts": {"sglang_host": RTX}}}
GROUPS = {"all": ["a", "b", "c"], "sglang_servers": ["a", "b", "c"]}


def _step(args: dict[str, Any], host: str = "a") -> dict[str, Any]:
    task = mock.MagicMock(args=args, async_val=0, check_mode=False)
    action = tune_search.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                      shared_loader_obj=None)
    return action.run(task_vars={"inventory_hostname": host, "hostvars": HOSTVARS, "groups": GROUPS})


def test_plan_gives_the_objective_candidates_with_their_variables_and_this_hosts_class() -> None:
    slo = {"ttft_p99_ms": 0, "itl_p50_ms": 0, "concurrency": 0, "score": "throughput", "target_rps": 0}
    got = _step({"step": "plan", "slo": slo,
                 "space": {"profiles": ["mtp_hicache"], "speculative": [{"steps": 2, "draft_tokens": 3}]},
                 "extra_args": {"--chunked-prefill-size": 4096}, "hosts": ["a", "b", "c"], "class_groups": []}, host="c")
    assert got["slo"] == _tune.slo() and not got.get("failed")
    (cand,) = got["candidates"]
    assert cand["vars"] == _tune.candidate_vars(cand, {"--chunked-prefill-size": 4096})
    assert cand["vars"]["sglang_extra_args"]["--speculative-num-steps"] == 2
    assert sorted(got["classes"]) == ["nvidia_h200_x2_143771mib", "nvidia_rtx_pro_6000_x1_97887mib"]
    assert got["class"] == {"name": "nvidia_rtx_pro_6000_x1_97887mib",
                            "value": got["classes"]["nvidia_rtx_pro_6000_x1_97887mib"]}


def test_a_bad_input_fails_naming_the_step_and_the_variable() -> None:
    got = _step({"step": "plan", "slo": {"itl_p50_ms": "fast"}, "space": {"profiles": ["mtp"]}, "hosts": ["a"]})
    assert got["failed"] and got["msg"].startswith("tune plan: sglang_tune_slo_itl_p50_ms: 'fast'")
    with pytest.raises(AnsibleActionFail, match="step 'guess' is not one of plan, decide"):
        _step({"step": "guess"})


def test_hosts_set_to_prefill_and_decode_are_refused_without_the_spaces_pd() -> None:
    """A host with sglang_pd roles deployed as it is would be tuned by what its roles happen to be
    (a host of one side cannot even be swept as a pair on its own): without the space's pd the plan
    step refuses, naming the hosts and the two ways out; sglang_pd: {} (unified) is tuned."""
    pd_vars = {**HOSTVARS, "b": {**HOSTVARS["b"], "sglang_pd": {"role": ["prefill", "decode"]}},
               "c": {**HOSTVARS["c"], "sglang_pd": {}}}
    task = mock.MagicMock(args={"step": "plan", "slo": {}, "space": {"profiles": ["mtp"]}, "hosts": ["a", "b", "c"]},
                          async_val=0, check_mode=False)
    action = tune_search.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                      shared_loader_obj=None)
    got = action.run(task_vars={"inventory_hostname": "a", "hostvars": pd_vars, "groups": GROUPS})
    assert got["failed"] and "sglang_pd sets prefill/decode roles on b, and sglang_tune_space has no pd" in got["msg"]
    assert '"pd": [{}, {"prefill": 1, "decode": 1}]' in got["msg"] and '{"sglang_pd": {}}' in got["msg"]
    assert not _step({"step": "plan", "slo": {}, "space": {"profiles": ["mtp"]}, "hosts": ["a", "c"]}).get("failed")
    task.args = {**task.args, "space": {"profiles": ["mtp"], "pd": [{}, {"prefill": 1, "decode": 1}]}}
    assert not action.run(task_vars={"inventory_hostname": "a", "hostvars": pd_vars, "groups": GROUPS}).get("failed")


def test_unified_against_a_split_on_the_same_gpus_scored_per_instance() -> None:
    """The space's pd: each candidate deploys the host unified or split (the host's backend and
    bootstrap port kept); a split's pair is swept as one (bench.yml) at each level x its instances,
    and decided and recorded per instance, so that it is scored against a unified instance on the
    same terms. Here the 1P:1D pair carries 2.4x one unified instance at 2x the load: 1.2x per instance."""
    host_pd = {"transfer_backend": "mooncake_tcp", "bootstrap_port": 9100, "role": "prefill"}
    got = _step({"step": "plan", "slo": {}, "hosts": ["a"], "pd": host_pd, "levels": [4, 1, 8],
                 "space": {"profiles": ["baseline"], "pd": [{}, {"prefill": 1, "decode": 1}]}})
    unified, split = got["candidates"]
    assert (unified["label"], split["label"]) == ("baseline unified", "baseline pd=1P:1D")
    assert unified["vars"]["sglang_pd"] == {"transfer_backend": "mooncake_tcp", "bootstrap_port": 9100}
    assert split["vars"]["sglang_pd"] == {
        "transfer_backend": "mooncake_tcp", "bootstrap_port": 9100, "role": ["prefill", "decode"]}
    assert (unified["instances"], unified["probe_levels"], split["instances"], split["probe_levels"]) == (1, [1], 2, [2])

    results: list[dict[str, Any]] = []
    for cand, curve in ((unified, [(1, 60.0), (4, 200.0), (8, 300.0)]), (split, [(2, 144.0), (8, 480.0), (16, 720.0)])):
        probe = _sweep([_pt(*curve[0])], 32)
        decision = _step({"step": "decide", "probe": probe, "results": results, "levels": [1, 4, 8],
                          "slo": _tune.slo(), "candidate": cand})["decision"]
        assert decision["action"] == "sweep" and decision["rest_levels"] == [c * cand["instances"] for c in (4, 8)]
        rest = _sweep([_pt(*c) for c in curve[1:]], 32)
        results.append(_step({"step": "record", "candidate": cand, "slo": _tune.slo(), "plateau_gain": 0.05,
                              "probe": probe, "rest": rest, "decision": decision})["record"])
    points = results[1]["sweep"]["points"]
    assert [(p["concurrency"], p["concurrency_swept"], p["output_tok_s"]) for p in points] == [
        (1, 2, 72.0), (4, 8, 240.0), (8, 16, 360.0)]
    assert results[1]["sweep"]["per_instance_of"] == 2 and results[1]["score"]["value"] == 360.0
    choice = _tune.choose(results, _tune.slo())
    assert choice["winner"]["candidate"]["label"] == "baseline pd=1P:1D"
    assert choice["why"]["baseline unified"].startswith("lower peak tok/s: 300.0 at C=8 vs 360.0 (-16.7%)")
    assert _tunereport.path_lines(results)[1].startswith(
        "2. baseline pd=1P:1D: deployed (per instance: its 2 instances swept together as one pair at C x 2, their "
        "figures divided by 2); C=1 -> bound")
    # written back: the split that won, as deployed; the fact says what it is
    fact = _tune.tuned_fact(choice, "h200", "a", "tune-1", _tune.slo())
    assert (fact["pd"], fact["instances"]) == ({"prefill": 1, "decode": 1}, 2)
    text = _tune.vars_file(fact, choice["winner"]["candidate"], None, ["a"], "2026-12-06T00:00:00Z", "r/tune.md")
    assert "sglang_pd:\n  transfer_backend: mooncake_tcp\n  bootstrap_port: 9100\n  role:\n  - prefill\n  - decode\n" \
        in text
    with pytest.raises(_tune.TuneError, match=r"sglang_tune_space.pd: \{'prefill': 0, 'decode': 1\} must be \{\}"):
        _tune.candidates({"profiles": ["baseline"], "pd": [{"prefill": 0, "decode": 1}]})


def test_the_steps_in_the_roles_order_choose_and_report(tmp_path: Path) -> None:
    (cand,) = _step({"step": "plan", "slo": {}, "space": {"profiles": ["mtp_hicache"]}, "hosts": ["a"]})["candidates"]
    probe = _sweep([_pt(*SEED_MTP_HICACHE[0])], 9)
    decision = _step({"step": "decide", "probe": probe, "results": [], "levels": LEVELS, "slo": _tune.slo()})["decision"]
    assert decision["action"] == "sweep" and decision["rest_levels"] == LEVELS[1:]
    rest = _sweep([_pt(c, x) for c, x in SEED_MTP_HICACHE[1:]], 9)
    record = _step({"step": "record", "candidate": cand, "slo": _tune.slo(), "plateau_gain": 0.05, "probe": probe,
                    "rest": rest, "decision": decision})["record"]
    failed = _step({"step": "record", "candidate": cand, "slo": _tune.slo(), "error": "it did not start"})["record"]
    assert record["status"] == "swept" and failed["status"] == "failed"
    (tmp_path / "host_vars" / "a").mkdir(parents=True)
    (tmp_path / "host_vars" / "a" / "tuned.yml").write_text("# an earlier run\nsglang_tuned: {}\n")
    info = {"class": "h200", "representative": "a", "hosts": ["a"], "run_id": "r1", "levels": LEVELS,
            "vars_files": ["host_vars/a/tuned.yml"], "vars_dir": str(tmp_path), "write": True}
    outcome = _step({"step": "outcome", "results": [record, failed], "slo": _tune.slo(), "info": info,
                     "generated": "2026-12-02T00:00:00Z"})["outcome"]
    assert outcome["fact"]["score_tok_s"] == 409.0 and outcome["fact"]["at_concurrency"] == 48
    assert "replaces" in outcome["markdown"] or "replaced" in outcome["markdown"]  # the earlier file was read
    files = _step({"step": "report", "outcomes": [outcome]})["files"]
    assert sorted(files) == ["tune.csv", "tune.json", "tune.md"]


def test_the_plateau_gain_default_is_the_sweeps_owner_and_documented_so() -> None:
    import yaml

    from ansible_collections.llmops.sglang.plugins.module_utils._sweep.spec import ARGUMENT_SPEC
    from ansible_collections.llmops.sglang.plugins.modules import tune_search as doc

    documented = yaml.safe_load(doc.DOCUMENTATION)["options"]["plateau_gain"]["default"]
    assert documented == ARGUMENT_SPEC["plateau_gain"]["default"]
    cand = {"label": "c", "profile": "baseline"}
    probe = _sweep([_pt(1, 100.0)], 4)
    rest = _sweep([_pt(c, x) for c, x in [(4, 300.0), (8, 310.0)]], 4)  # +3%: a plateau at the default gain
    decision = {"action": "sweep", "rest_levels": [4, 8]}
    implicit = _step({"step": "record", "candidate": cand, "slo": _tune.slo(), "probe": probe, "rest": rest,
                      "decision": decision})["record"]
    explicit = _step({"step": "record", "candidate": cand, "slo": _tune.slo(), "probe": probe, "rest": rest,
                      "decision": decision, "plateau_gain": ARGUMENT_SPEC["plateau_gain"]["default"]})["record"]
    assert implicit == explicit
