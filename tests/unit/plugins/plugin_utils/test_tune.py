"""The auto-tuner's search (plugin_utils/_tune.py): classes, candidates, bound, SLO, winner, report.

Throughputs are the seed's measured ones (tests/fixtures/seed-benchmarks.md): MTP capped at 4
running requests (234 tok/s at C=4), MTP + HiCache 61.2 ... 409.0 tok/s at C = 1 ... 48.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils._engine import perfmodel as pm
from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.curve import plateau_reached
from ansible_collections.llmops.sglang.plugins.plugin_utils import _tune, _tunereport
from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_default
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import GB, instance_plan

ROOT = Path(__file__).resolve().parents[4]

SEED_MTP_HICACHE = [(1, 61.2), (4, 207.2), (8, 369.7), (16, 384.5), (32, 392.7), (48, 409.0)]
LEVELS = [1, 4, 8, 16, 32, 48]
NO_SLO = _tune.slo()


def _pt(c: int, tok_s: float, **extra) -> dict:
    return {"concurrency": c, "output_tok_s": tok_s, "ok": max(2 * c, 8), "requests": max(2 * c, 8),
            "status": "ok", "errors": {"total": 0}, "client_limited": False, **extra}


def _sweep(points: list[dict], running: int | None) -> dict:
    return {"points": points, "server": {"max_running_requests": running}, "records": [], "warnings": []}


def _run(candidates: list[dict], curves: dict[str, tuple[list[tuple[int, float]], int]], objective=NO_SLO) -> list:
    """The role's loop in Python: probe the lowest level, decide, sweep the rest, record."""
    results: list[dict] = []
    for cand in candidates:
        curve, running = curves[cand["label"]]
        probe = _sweep([_pt(*curve[0])], running)
        decision = _tune.decide(probe, LEVELS, objective, _tune.best_so_far(results))
        rest = None
        if decision["action"] == "sweep":
            wanted = _tune.rest_levels(LEVELS, objective)
            rest = _sweep([_pt(c, x) for c, x in curve[1:] if c in wanted], running)
        results.append(_tune.result(cand, objective, 0.05, probe, rest, decision))
    return results


# ---- classes ----

def test_hosts_with_equal_gpus_form_one_class_and_its_group_gets_the_vars() -> None:
    h200 = {"gpus": [{"name": "NVIDIA H200", "memory_total_mib": 143771}] * 2}
    rtx = {"gpus": [{"name": "NVIDIA RTX PRO 6000", "memory_total_mib": 97887}]}
    groups = {"all": ["a", "b", "c"], "sglang_servers": ["a", "b", "c"], "big": ["a", "b"]}
    got = _tune.classes(["a", "b", "c"], {"a": h200, "b": h200, "c": rtx}, groups)
    assert sorted(got) == ["nvidia_h200_x2_143771mib", "nvidia_rtx_pro_6000_x1_97887mib"]
    big = got["nvidia_h200_x2_143771mib"]
    assert big["hosts"] == ["a", "b"] and big["representative"] == "a"
    assert big["vars_files"] == ["group_vars/big/tuned.yml"]
    # no group holds exactly c: its own host_vars
    assert got["nvidia_rtx_pro_6000_x1_97887mib"]["vars_files"] == ["host_vars/c/tuned.yml"]


def test_a_group_vars_file_is_never_hidden_by_a_folder(tmp_path) -> None:
    # inventories/seed: group_vars/sglang_servers.yml is a file; a folder of that name would
    # make Ansible read the folder only, so the host's own host_vars folder gets the file
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "sglang_servers.yml").write_text("sglang_engine: sim\n")
    groups = {"all": ["localhost"], "sglang_servers": ["localhost"]}
    got = _tune.classes(["localhost"], {}, groups, vars_dir=str(tmp_path))
    assert got["nogpu"]["vars_files"] == ["host_vars/localhost/tuned.yml"]
    # issue 16 #10: a host whose vars are a file (inventories/gpu) is tuned too: the file moves,
    # unchanged, into the folder that then holds it and tuned.yml (Ansible reads a host's file or
    # its folder, never both: DataLoader.find_vars_files stops at the first it finds)
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "localhost.yml").write_text("x: 1\n")
    got = _tune.classes(["localhost"], {}, groups, vars_dir=str(tmp_path))["nogpu"]
    assert got["vars_files"] == ["host_vars/localhost/tuned.yml"]
    assert got["vars_moves"] == [{"src": "host_vars/localhost.yml", "dest": "host_vars/localhost/main.yml"}]
    # a folder already there is what Ansible reads (the file beside it is ignored): no move
    (tmp_path / "host_vars" / "localhost").mkdir()
    assert _tune.classes(["localhost"], {}, groups, vars_dir=str(tmp_path))["nogpu"]["vars_moves"] == []
    (tmp_path / "host_vars" / "localhost").rmdir()
    # a folder is fine: tuned.yml goes beside what is in it
    (tmp_path / "group_vars" / "sglang_servers.yml").unlink()
    (tmp_path / "group_vars" / "sglang_servers").mkdir()
    assert _tune.classes(["localhost"], {}, groups, vars_dir=str(tmp_path))["nogpu"]["vars_files"] == [
        "group_vars/sglang_servers/tuned.yml"]


def test_host_vars_files_that_cannot_move_are_refused_before_anything_changes(tmp_path) -> None:
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "a").write_text("x: 1\n")  # no extension: cannot become the folder a/
    (tmp_path / "elsewhere.yml").write_text("x: 1\n")
    (tmp_path / "host_vars" / "b.json").symlink_to(tmp_path / "elsewhere.yml")
    groups = {"all": ["a", "b"]}
    with pytest.raises(_tune.TuneError, match=r"host_vars/a is a vars file without an extension.*Rename it to "
                                              r"host_vars/a.yml, or set sglang_tune_write_vars: false"):
        _tune.classes(["a"], {}, groups, vars_dir=str(tmp_path))
    with pytest.raises(_tune.TuneError, match=r"host_vars/b.json is a symbolic link"):
        _tune.classes(["b"], {}, groups, vars_dir=str(tmp_path))
    (tmp_path / "host_vars" / "b.json").unlink()
    (tmp_path / "host_vars" / "b.json").write_text("{}")
    assert _tune.classes(["b"], {}, groups, vars_dir=str(tmp_path))["nogpu"]["vars_moves"] == [
        {"src": "host_vars/b.json", "dest": "host_vars/b/main.json"}]


def test_class_groups_given_and_a_host_in_none_is_refused() -> None:
    groups = {"g1": ["a"], "g2": ["b"]}
    assert _tune.classes(["a", "b"], {}, groups, ["g1", "g2"])["g2"]["vars_files"] == ["group_vars/g2/tuned.yml"]
    with pytest.raises(_tune.TuneError, match="host c is in 0 of the groups g1, g2"):
        _tune.classes(["a", "c"], {}, groups, ["g1", "g2"])


# ---- candidates ----

def test_candidates_vary_hicache_and_spec_only_where_the_profile_has_them() -> None:
    space = {"profiles": ["mtp_hicache", "baseline"], "max_running_requests": [0, 32],
             "hicache_size_gb": [0, 64], "speculative": [{}, {"steps": 2, "draft_tokens": 3}]}
    labels = [c["label"] for c in _tune.candidates(space)]
    assert len(labels) == 2 * 2 * 2 + 2
    assert labels[:3] == ["mtp_hicache", "mtp_hicache spec=2/3", "mtp_hicache hicache=64GB"]
    assert labels[-2:] == ["baseline", "baseline mrr=32"]


def test_bad_space_names_value_rule_and_fix() -> None:
    with pytest.raises(_tune.TuneError, match=r"profiles: \['turbo'\] must name profiles \(valid: baseline"):
        _tune.candidates({"profiles": ["turbo"]})
    with pytest.raises(_tune.TuneError, match=r"max_running_requests: -1 is not a whole number >= 0"):
        _tune.candidates({"profiles": ["mtp"], "max_running_requests": [-1]})
    with pytest.raises(_tune.TuneError, match="unknown key"):
        _tune.candidates({"profiles": ["mtp"], "mrr": [4]})
    with pytest.raises(_tune.TuneError, match="sglang_tune_slo_itl_p50_ms: 'fast'"):
        _tune.slo(itl_p50_ms="fast")


def test_user_profiles_are_candidates_and_spec_goes_through_extra_args() -> None:
    cands = _tune.candidates({"profiles": ["mine"], "speculative": [{"steps": 2, "draft_tokens": 3}]},
                             {"mine": {"extends": "mtp"}})
    assert [c["label"] for c in cands] == ["mine spec=2/3"]
    deploy = _tune.candidate_vars(cands[0], {"--chunked-prefill-size": 4096})
    assert deploy == {"sglang_profile": "mine", "sglang_max_running_requests": 0, "sglang_hicache_size_gb": 0,
                      "sglang_hicache_storage": {}, "sglang_hicache_storage_clear": False,
                      "sglang_extra_args": {"--chunked-prefill-size": 4096, "--speculative-num-steps": 2,
                                            "--speculative-num-draft-tokens": 3}, "sglang_pd": {}}
    assert _tune.candidate_vars(cands[0], ["--foo", "1"])["sglang_extra_args"][-2:] == [
        "--speculative-num-draft-tokens", "3"]


def test_storage_candidates_for_hicache_profiles_each_from_an_empty_tier_its_write_policy_through_extra_args() -> None:
    space = {"profiles": ["mtp_hicache", "mtp"],
             "hicache_storage": [{}, {"backend": "file"}, {"backend": "file", "write_policy": "write_back"}]}
    cands = _tune.candidates(space)
    assert [c["label"] for c in cands] == ["mtp_hicache", "mtp_hicache storage=file",
                                           "mtp_hicache storage=file/write_back", "mtp"]  # mtp has no HiCache
    plain, on, back = (_tune.candidate_vars(c, ["--foo", "1"]) for c in cands[:3])
    assert plain["sglang_hicache_storage"] == {} and plain["sglang_hicache_storage_clear"] is False
    assert on["sglang_hicache_storage"] == {"backend": "file"} and on["sglang_hicache_storage_clear"] is True
    assert on["sglang_extra_args"] == ["--foo", "1"]
    assert back["sglang_hicache_storage"] == {"backend": "file"}  # the policy is a flag, not a key of the tier
    assert back["sglang_extra_args"] == ["--foo", "1", "--hicache-write-policy", "write_back"]
    # the plan renders both (_plan/test_storage_plan.py); the winner's vars file deploys the same
    results = _run(cands[2:3], {"mtp_hicache storage=file/write_back": (SEED_MTP_HICACHE, 9)})
    info = {"class": "h200", "representative": "n1", "hosts": ["n1"], "run_id": "r1", "report": "reports/r1/tune.md",
            "levels": LEVELS, "vars_files": ["group_vars/h200/tuned.yml"]}
    out = _tunereport.outcome(results, NO_SLO, info, None, "2026-12-05T00:00:00Z")
    body = yaml.safe_load(out["vars_text"])
    assert body["sglang_hicache_storage"] == {"backend": "file"}
    assert body["sglang_extra_args"] == ["--hicache-write-policy", "write_back"]
    assert body["sglang_tuned"]["hicache_storage"] == {"backend": "file", "write_policy": "write_back"}
    rows = list(csv.DictReader(io.StringIO(_tunereport.render_csv(results, out["choice"], "h200"))))
    assert {row["hicache_storage"] for row in rows} == {"file/write_back"}


def test_a_bad_storage_candidate_names_the_value_and_the_fix() -> None:
    for bad in ({"path": "/data"}, {"backend": "file", "colour": "red"}, "file"):
        with pytest.raises(_tune.TuneError, match=r"hicache_storage: .* must be \{\} \(no storage tier\) or a "
                                                  r"sglang_hicache_storage with a backend"):
            _tune.candidates({"profiles": ["mtp_hicache"], "hicache_storage": [bad]})


# ---- bound and pruning ----

def test_bound_is_rate_per_request_times_running_cap() -> None:
    b = _tune.bound(_sweep([_pt(1, 61.2)], 9), LEVELS, NO_SLO)
    assert b["tok_s"] == pytest.approx(61.2 * 9) and b["cap"] == 9
    # a server that runs more than the highest level: capped by the level
    assert _tune.bound(_sweep([_pt(1, 10.0)], 200), LEVELS, NO_SLO)["tok_s"] == pytest.approx(480.0)
    # at a fixed SLO concurrency only that level counts
    assert _tune.bound(_sweep([_pt(1, 10.0)], 200), LEVELS, _tune.slo(1, 0, 8))["tok_s"] == pytest.approx(80.0)


def test_seed_story_mtp_is_pruned_once_mtp_hicache_is_known() -> None:
    cands = _tune.candidates({"profiles": ["mtp_hicache", "mtp"]})
    curves = {"mtp_hicache": (SEED_MTP_HICACHE, 9), "mtp": ([(1, 68.0), (4, 234.0), (8, 235.0)], 4)}
    results = _run(cands, curves)
    assert [r["status"] for r in results] == ["swept", "pruned"]
    assert results[1]["reason"] == "pruned by bound: at most 272.0 tok/s <= best so far 409.0 tok/s (mtp_hicache)"
    assert results[1]["bound"]["reason"] == "68.0 tok/s per request (C=1) x 4 (min(running 4, C<=48))"
    choice = _tune.choose(results, NO_SLO)
    assert choice["winner"]["candidate"]["label"] == "mtp_hicache"
    assert choice["why"]["mtp"].startswith("pruned by bound")


def test_the_other_order_sweeps_both_and_says_the_loser_was_capped() -> None:
    cands = _tune.candidates({"profiles": ["mtp", "mtp_hicache"]})
    curves = {"mtp_hicache": (SEED_MTP_HICACHE, 9), "mtp": ([(1, 68.0), (4, 234.0), (8, 235.0)], 4)}
    results = _run(cands, curves)
    assert [r["status"] for r in results] == ["swept", "swept"]
    why = _tune.choose(results, NO_SLO)["why"]["mtp"]
    assert why.startswith("lower peak tok/s: 235.0 at C=8 vs 409.0 (-42.5%)")
    assert "running requests capped at 4" in why


def test_a_tie_goes_to_the_earlier_candidate_and_failures_are_reported() -> None:
    cands = _tune.candidates({"profiles": ["baseline", "hicache", "mtp"]})
    results = _run(cands[:2], {"baseline": ([(1, 20.0), (4, 80.0)], 4), "hicache": ([(1, 20.0), (4, 80.0)], 19)})
    results.append(_tune.result(cands[2], NO_SLO, 0.05, error="instance gpu0 did not become ready"))
    choice = _tune.choose(results, NO_SLO)
    assert choice["winner"]["candidate"]["label"] == "baseline"
    assert choice["why"]["mtp"] == "failed: instance gpu0 did not become ready"


# ---- inventories/seed on the engine's model, on its virtual clock ----

def _seed_host(gpu: dict, memory: int) -> dict:
    """The seed inventory's host as host_facts would give it: its declared GPU, ``memory`` free."""
    mib = gpu["memory_mib"]
    return {"schema_version": 1, "gpu_source": "declared", "gpu_count": 1, "cpu_count": 32, "numa_nodes": 1,
            "service_manager": "process", "hostname": "seed",
            "gpus": [{"index": 0, "uuid": "GPU-0", "name": gpu["name"], "memory_total_mib": mib, "memory_used_mib": 0,
                      "memory_free_mib": mib, "processes": [], "busy": False}],
            "memory": {"total_bytes": memory, "available_bytes": memory, "effective_available_bytes": memory,
                       "limited_by": "meminfo", "cgroup": {}}}


def _model_level(plan: pm.EnginePlan, c: int, max_tokens: int) -> dict:
    """One closed-loop level of the bench role's shape (max(2C, 8) requests) on the model's
    virtual clock: the figures the engine's own model gives, which no load on the machine moves."""
    got = pm.simulate_level(plan, c, max(2 * c, 8), max_tokens)
    return _pt(c, round(got["output_tok_s"], 1), avg_output_tokens=max_tokens)


def test_the_seed_inventory_on_the_engine_model_tunes_to_mtp_hicache() -> None:
    """What tests/integration/test_tune.py's end-to-end run on inventories/seed measures through
    wall clocks (which a loaded machine moves), here on the model's own clock: each candidate's
    flags as the plan renders them for the seed's host, the engine's plan of them, its levels
    simulated, and tune's loop (probe, bound, sweep to the plateau, choose) over them."""
    seed = yaml.safe_load((ROOT / "inventories" / "seed" / "group_vars" / "sglang_servers.yml").read_text())
    release, (gpu,) = seed["sglang_version"], seed["sglang_declared_gpus"]
    host = _seed_host(gpu, 200 * GB)  # the seed's ~200 GB free (reference: seed-benchmarks.md)
    config = pm.load_model_config(str(ROOT / "data" / "models" / "qwen3.6-27b"))
    levels = role_default("bench", "sglang_bench_concurrency")
    max_tokens = role_default("bench", "sglang_bench_max_tokens")
    plateau = role_default("tune", "sglang_tune_plateau_gain")
    parser = _flags.build_parser(release)
    results: list[dict] = []
    running_of: dict[str, int] = {}
    for cand in _tune.candidates(seed["sglang_tune_space"], seed["sglang_profiles"]):
        chosen = _tune.candidate_vars(cand)
        plan = instance_plan(host, profile=chosen["sglang_profile"], user_profiles=seed["sglang_profiles"],
                             release=release, model_path="/m", model_config=config,
                             max_running_requests=chosen["sglang_max_running_requests"])
        args = vars(parser.parse_args(plan["instances"][0]["argv"]))
        engine = pm.plan_engine(args, config, pm.find_gpu(gpu["name"]), release, 200 * GB)
        running = running_of[cand["label"]] = engine.max_running_requests
        probe = _sweep([_model_level(engine, levels[0], max_tokens)], running)
        decision = _tune.decide(probe, levels, NO_SLO, _tune.best_so_far(results))
        rest = None
        if decision["action"] == "sweep":
            points: list[dict] = []
            for c in _tune.rest_levels(levels, NO_SLO):
                points.append(_model_level(engine, c, max_tokens))
                if plateau_reached([*probe["points"], *points], plateau):
                    break
            rest = _sweep(points, running)
        results.append(_tune.result(cand, NO_SLO, plateau, probe, rest, decision))

    assert [r["candidate"]["label"] for r in results] == ["mtp_hicache", "mtp", "hicache", "baseline"]
    # the seed's story: MTP alone is capped at 4 running requests, HiCache lifts that to 9
    assert running_of["mtp"] == 4 and running_of["mtp_hicache"] == 9
    by_label = {r["candidate"]["label"]: r for r in results}
    assert by_label["mtp"]["status"] == "pruned" and by_label["mtp"]["reason"].startswith("pruned by bound")
    choice = _tune.choose(results, NO_SLO)
    assert choice["winner"]["candidate"]["label"] == "mtp_hicache"
    for loser in ("hicache", "baseline"):
        assert choice["why"][loser].startswith("lower peak tok/s"), choice["why"][loser]


# ---- SLO ----

def test_slo_picks_the_best_level_that_meets_it_client_or_server_bucket() -> None:
    fast = [_pt(1, 60.0, itl_ms={"p50": 15.0}), _pt(4, 200.0, itl_ms={"p50": 18.0}),
            _pt(8, 360.0, itl_ms={"p50": 21.0})]
    objective = _tune.slo(itl_p50_ms=20)
    assert _tune.score(fast, objective) == {"value": 200.0, "unit": "tok/s", "tok_s": 200.0, "req_s": None,
                                            "concurrency": 4, "reason": ""}
    # not measurable by the client: the upper bound of the server's bucket decides
    hidden = _pt(8, 360.0, itl_ms={"p50": 5.0}, latency_unmeasurable={"itl_ms": ["p50"]},
                 server={"itl_ms_range": {"p50": [15.0, 20.0]}})
    assert _tune.latency(hidden, "itl_ms", "p50") == (20.0, "server bucket")
    assert _tune.score([hidden], objective)["tok_s"] == 360.0
    violated = _tune.score([_pt(1, 60.0, itl_ms={"p50": 25.0})], objective)
    assert violated["tok_s"] is None and "C=1 ITL p50 25 ms (client) > 20 ms" in violated["reason"]


def test_slo_prunes_a_candidate_that_violates_it_alone() -> None:
    probe = _sweep([_pt(1, 60.0, ttft_ms={"p99": 900.0})], 9)
    decision = _tune.decide(probe, LEVELS, _tune.slo(ttft_p99_ms=500), None)
    assert decision["action"] == "prune" and "SLO violated already at its lowest level" in decision["reason"]
    assert _tune.rest_levels(LEVELS, _tune.slo(500, 0, 8)) == [8]


def test_a_probe_only_the_client_limited_is_swept_on_and_a_failed_one_pruned() -> None:
    # every request served, the client the limit (a loaded machine): no bound, so nothing to prune on
    limited = _sweep([_pt(1, 20.0, client_limited=True)], 9)
    decision = _tune.decide(limited, LEVELS, _tune.slo(ttft_p99_ms=500), {"value": 999.0, "tok_s": 999.0, "label": "x"})
    assert decision["action"] == "sweep" and decision["reason"] == ""
    assert decision["bound"]["tok_s"] is None and "the client was the limit" in decision["bound"]["reason"]
    # the rest scores the candidate, the limited level left out
    record = _tune.result({"label": "b", "index": 0}, NO_SLO, 0.05, limited, _sweep([_pt(2, 38.0)], 9), decision)
    assert record["status"] == "swept" and record["score"]["tok_s"] == 38.0
    # a failed request at the lowest level is the server's: pruned
    failed = _sweep([_pt(1, 20.0, status="errors", errors={"total": 1})], 9)
    assert _tune.decide(failed, LEVELS, NO_SLO, None) == {
        "action": "prune", "bound": _tune.bound(failed, LEVELS, NO_SLO), "reason": "pruned: the lowest level did not run cleanly"}


def test_with_slo_a_lower_peak_can_win() -> None:
    cands = _tune.candidates({"profiles": ["mtp_hicache", "baseline"]})
    objective = _tune.slo(itl_p50_ms=20)
    curves = {"mtp_hicache": ([(1, 61.0), (4, 207.0), (8, 370.0)], 9),
              "baseline": ([(1, 27.0), (4, 105.0), (8, 196.0)], 19)}
    results = []
    for cand in cands:
        curve, running = curves[cand["label"]]
        itl = 25.0 if cand["label"] == "mtp_hicache" else 12.0  # MTP verifies 4 tokens a step: slower steps
        pts = [_pt(c, x, itl_ms={"p50": itl if c > 1 else 10.0}) for c, x in curve]
        probe = _sweep(pts[:1], running)
        decision = _tune.decide(probe, LEVELS, objective, _tune.best_so_far(results))
        results.append(_tune.result(cand, objective, 0.05, probe, _sweep(pts[1:], running), decision))
    choice = _tune.choose(results, objective)
    assert choice["winner"]["candidate"]["label"] == "baseline"
    assert choice["why"]["mtp_hicache"].startswith("lower tok/s within the SLO: 61.0 at C=1 vs 196.0")


# ---- write-back and report ----

def test_vars_file_has_a_header_and_the_variables_deploy_reads() -> None:
    cands = _tune.candidates({"profiles": ["mtp_hicache"], "speculative": [{"steps": 2, "draft_tokens": 3}]})
    results = _run(cands, {"mtp_hicache spec=2/3": (SEED_MTP_HICACHE, 9)})
    info = {"class": "rtx", "representative": "n1", "hosts": ["n1", "n2"], "run_id": "r1", "report": "reports/r1/tune.md",
            "levels": LEVELS, "vars_files": ["group_vars/rtx/tuned.yml"]}
    out = _tunereport.outcome(results, NO_SLO, info, {"--chunked-prefill-size": 4096}, "2026-12-01T00:00:00Z")
    assert out["failure"] == "" and out["writeback"]["written"] == ["group_vars/rtx/tuned.yml"]
    assert "Written: `group_vars/rtx/tuned.yml` (new); review and commit it" in out["markdown"]
    text = out["vars_text"]
    assert text.startswith("# Generated by playbooks/tune.yml (llmops.sglang) at 2026-12-01T00:00:00Z, run r1.")
    body = yaml.safe_load(text)
    assert body["profile"] == "mtp_hicache" and body["sglang_max_running_requests"] == 0
    assert body["sglang_extra_args"] == {"--chunked-prefill-size": 4096, "--speculative-num-steps": 2,
                                         "--speculative-num-draft-tokens": 3}
    assert body["sglang_tuned"]["score_tok_s"] == 409.0 and body["sglang_tuned"]["at_concurrency"] == 48
    assert out["fact"] == body["sglang_tuned"]


def test_report_has_every_candidate_the_path_and_the_reasons() -> None:
    cands = _tune.candidates({"profiles": ["mtp_hicache", "mtp"]})
    mtp_points = [(1, 68.0), (4, 234.0)]
    results = _run(cands, {"mtp_hicache": (SEED_MTP_HICACHE, 9), "mtp": (mtp_points, 4)})
    info = {"class": "rtx", "representative": "n1", "hosts": ["n1"], "run_id": "r1", "levels": LEVELS,
            "vars_files": ["group_vars/rtx/tuned.yml"]}
    files = _tunereport.report_files([_tunereport.outcome(results, NO_SLO, info)])
    md = files["tune.md"]
    assert "| 1 | **mtp_hicache** | swept | 9 | 61.2 | 550.8 | 409.0 @C=48 | C=8 | 409.0 | +0.0% | winner |" in md
    assert "| 2 | mtp | pruned | 4 | 68.0 | 272.0 | - | - | - | - | pruned by bound: at most 272.0 tok/s" in md
    assert "2. mtp: deployed; C=1 -> bound 272.0 tok/s" in md and "Winner: mtp_hicache: 409.0 peak tok/s at C=48." in md
    rows = list(csv.DictReader(io.StringIO(files["tune.csv"])))
    assert [(r["candidate"], r["concurrency"], r["status"]) for r in rows][-2:] == [("mtp_hicache", "48", "swept"),
                                                                                    ("mtp", "1", "pruned")]
    data = json.loads(files["tune.json"])
    assert data["rtx"]["fact"]["candidate"] == "mtp_hicache" and "records" not in data["rtx"]["results"][0]["sweep"]


def test_why_reads_the_servers_per_level_metrics_when_points_carry_them() -> None:
    cands = _tune.candidates({"profiles": ["mtp_hicache", "baseline"]})
    metrics = {"running_max": 19, "queued_max": 13, "retracted_max": 0, "spec_accept_length": None}
    results = _run(cands, {"mtp_hicache": (SEED_MTP_HICACHE, 9), "baseline": ([(1, 27.7), (4, 105.0), (8, 196.0)], 19)})
    results[1]["sweep"]["points"][-1]["server_metrics"] = metrics  # C=8, its peak
    why = _tune.choose(results, NO_SLO)["why"]["baseline"]
    assert why.endswith("running requests capped at 19, max running 19 at C=8, max queued 13 at C=8")


# ---- what happens to the vars files (issue 16 #4) ----

OLD = "# Generated by playbooks/tune.yml (llmops.sglang) at X, run old.\n---\nsglang_tuned: {run_id: old, candidate: mtp}\n"
MOVE = {"src": "host_vars/h.yml", "dest": "host_vars/h/main.yml"}


def test_writeback_with_a_winner_moves_then_writes_and_says_what_it_replaced() -> None:
    plan = _tune.writeback_plan(["host_vars/h/tuned.yml"], [MOVE], True, read={"host_vars/h/tuned.yml": OLD}.get)
    assert plan["moves"] == [MOVE] and plan["written"] == ["host_vars/h/tuned.yml"]
    assert plan["lines"][0].startswith("Moved `host_vars/h.yml` unchanged to `host_vars/h/main.yml`")
    assert plan["lines"][1] == ("Written: `host_vars/h/tuned.yml` (replaced the file of run old (candidate mtp)); "
                                "review and commit it, deploy.yml reads it.")


def test_without_a_winner_nothing_is_written_an_earlier_file_is_kept_loudly_or_removed() -> None:
    files = ["host_vars/h/tuned.yml", "host_vars/g/tuned.yml", "host_vars/u/tuned.yml"]
    there = {"host_vars/h/tuned.yml": OLD, "host_vars/u/tuned.yml": "profile: mtp\n"}  # g: none; u: the user's own
    kept = _tune.writeback_plan(files, [MOVE], False, read=there.get)
    assert kept["moves"] == [] and kept["written"] == []  # no winner: the layout is not touched either
    assert [a["action"] for a in kept["actions"]] == ["keep", "none", "keep"]
    assert kept["lines"][0] == ("Not written: `host_vars/h/tuned.yml` (no winner). KEPT: the earlier file (run old "
                                "(candidate mtp)) is still there and deploy.yml still deploys it; "
                                "-e sglang_tune_without_winner=remove removes it.")
    assert "there is no earlier file" in kept["lines"][1]
    removed = _tune.writeback_plan(files, [], False, without_winner="remove", read=there.get)
    assert [a["action"] for a in removed["actions"]] == ["remove", "none", "keep"]  # never a file of yours
    assert removed["lines"][0].startswith("Removed: `host_vars/h/tuned.yml` (run old (candidate mtp)")
    with pytest.raises(_tune.TuneError, match="sglang_tune_without_winner: 'delete' must be one of keep, remove"):
        _tune.writeback_plan(files, [], False, without_winner="delete")


def test_no_winner_outcome_has_the_failure_message_and_tune_md_never_claims_a_write() -> None:
    cands = _tune.candidates({"profiles": ["mtp_hicache", "mtp"]})
    objective = _tune.slo(ttft_p99_ms=0.001)
    results = _run(cands, {"mtp_hicache": (SEED_MTP_HICACHE, 9), "mtp": ([(1, 68.0)], 4)}, objective)
    for r in results:  # the probes' TTFT, as the client measured it
        r["sweep"]["points"][0]["ttft_ms"] = {"p99": 80.0}
    results = [_tune.result(r["candidate"], objective, 0.05, {**r["sweep"], "points": r["sweep"]["points"][:1]}, None,
                            _tune.decide(r["sweep"], LEVELS, objective, None)) for r in results]
    info = {"class": "rtx", "representative": "n1", "hosts": ["n1"], "run_id": "r2", "levels": LEVELS,
            "vars_files": ["host_vars/n1/tuned.yml"], "vars_moves": [MOVE]}
    out = _tunereport.outcome(results, objective, info, read={"host_vars/n1/tuned.yml": OLD}.get)
    assert out["fact"] is None and out["vars_text"] is None
    assert out["failure"].startswith("tune.yml found no winner for class rtx on n1: no candidate met the SLO. "
                                     "mtp_hicache: pruned: SLO violated already at its lowest level (C=1 TTFT p99 80 ms")
    assert "KEPT: the earlier file (run old (candidate mtp))" in out["failure"]
    assert "Winner: none: no candidate met the SLO." in out["markdown"] and "Written" not in out["markdown"]
    assert "The fact `sglang_tuned` is null (no winner)." in out["markdown"]


def test_an_earlier_result_in_another_layouts_place_is_removed_with_a_winner_and_kept_without() -> None:
    # the group's folder is the target now; an earlier run wrote the host's (it would beat the group's)
    groups = {"all": ["h"], "sglang_servers": ["h"]}
    got = _tune.classes(["h"], {}, groups)["nogpu"]
    assert got["vars_files"] == ["group_vars/sglang_servers/tuned.yml"]
    assert got["vars_others"] == ["host_vars/h/tuned.yml"]
    there = {"host_vars/h/tuned.yml": OLD}
    won = _tune.writeback_plan(got["vars_files"], [], True, read=there.get, others=got["vars_others"])
    assert [(a["file"], a["action"]) for a in won["actions"]] == [
        ("group_vars/sglang_servers/tuned.yml", "write"), ("host_vars/h/tuned.yml", "remove")]
    assert "an earlier result in another place, which would otherwise override or shadow the new one" in won["lines"][1]
    lost = _tune.writeback_plan(got["vars_files"], [], False, read=there.get, others=got["vars_others"])
    assert [a["action"] for a in lost["actions"]] == ["none", "keep"]
    assert "KEPT: the earlier file (run old (candidate mtp))" in lost["lines"][1]
    mine = _tune.writeback_plan(got["vars_files"], [], True, read={"host_vars/h/tuned.yml": "profile: x\n"}.get,
                                others=got["vars_others"])
    assert mine["actions"][1]["action"] == "keep" and "it may override the new file" in mine["lines"][1]


# ---- scoring by capacity: requests/s per instance within the SLO ----

def _rpt(c: int, tok_s: float, req_s: float, ttft_p99: float) -> dict:
    return _pt(c, tok_s, req_s=req_s, ttft_ms={"p99": ttft_p99})


def test_capacity_score_needs_an_slo_and_a_known_name() -> None:
    with pytest.raises(_tune.TuneError, match="no SLO is set.*sglang_tune_slo_ttft_p99_ms"):
        _tune.slo(score="capacity")
    with pytest.raises(_tune.TuneError, match="sglang_tune_score: 'latency' must be one of throughput, capacity"):
        _tune.slo(ttft_p99_ms=500, score="latency")
    with pytest.raises(_tune.TuneError, match="sglang_tune_capacity_target_rps: 'x'"):
        _tune.slo(ttft_p99_ms=500, score="capacity", target_rps="x")
    assert _tune.slo(ttft_p99_ms=500, score="capacity", target_rps=40)["target_rps"] == 40.0
    assert _tune.slo()["score"] == "throughput" and _tune.slo()["target_rps"] is None


def test_capacity_scores_the_highest_request_rate_within_the_slo_not_the_most_tokens() -> None:
    objective = _tune.slo(ttft_p99_ms=500, score="capacity")
    # long answers: the most tok/s at C=16 but fewer requests/s than C=8 of short ones
    points = [_rpt(1, 100.0, 0.5, 120.0), _rpt(8, 700.0, 3.5, 300.0), _rpt(16, 900.0, 3.0, 450.0),
              _rpt(32, 1000.0, 4.0, 900.0)]
    sc = _tune.score(points, objective)
    assert (sc["value"], sc["unit"], sc["concurrency"], sc["tok_s"]) == (3.5, "req/s", 8, 700.0)
    assert _tune.score(points, _tune.slo(ttft_p99_ms=500))["value"] == 900.0  # by throughput: C=16


def test_capacity_bound_prunes_in_requests_per_second() -> None:
    objective = _tune.slo(ttft_p99_ms=500, score="capacity")
    probe = _sweep([_rpt(1, 100.0, 0.25, 100.0)], running=8)
    best = {"value": 3.0, "tok_s": 999.0, "label": "mtp"}
    decision = _tune.decide(probe, [1, 8], objective, best)
    # at most 0.25 req/s per request x 8 = 2.0 req/s <= 3.0: pruned (by tok/s it would be 800 < 999 too,
    # so check one where the two disagree)
    assert decision["action"] == "prune" and "2.0 req/s <= best so far 3.0 req/s (mtp)" in decision["reason"]
    best_tok = {"value": 1.0, "tok_s": 5000.0, "label": "mtp"}
    assert _tune.decide(probe, [1, 8], objective, best_tok)["action"] == "sweep"


def test_capacity_winner_fact_and_report_say_requests_per_second_and_instances_needed() -> None:
    objective = _tune.slo(ttft_p99_ms=500, score="capacity", target_rps=10)
    cands = _tune.candidates({"profiles": ["baseline", "mtp"]})
    a = _tune.result(cands[0], objective, 0.05, _sweep([_rpt(1, 100.0, 0.5, 100.0), _rpt(8, 800.0, 2.5, 400.0)], 8))
    b = _tune.result(cands[1], objective, 0.05, _sweep([_rpt(1, 150.0, 0.6, 100.0), _rpt(8, 1100.0, 2.0, 450.0)], 8))
    choice = _tune.choose([a, b], objective)
    assert choice["winner"]["candidate"]["label"] == cands[0]["label"]
    assert choice["message"].endswith("2.50 req/s per instance within the SLO at C=8; 4 instance(s) carry 10 req/s")
    assert "lower req/s per instance within the SLO: 2.00 at C=8 vs 2.50 (-20.0%)" in choice["why"][cands[1]["label"]]
    fact = _tune.tuned_fact(choice, "h200", "host1", "run1", objective)
    assert (fact["score"], fact["score_unit"], fact["score_tok_s"], fact["instances_needed"], fact["scored_by"]) == \
        (2.5, "req/s", 800.0, 4, "capacity")
    md = _tunereport.render_markdown([a, b], choice, {"class": "h200", "slo": objective})
    assert "Score: req/s per instance within the SLO." in md and "| score req/s |" in md and "| 2.50 |" in md
