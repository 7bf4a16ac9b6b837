"""What a deploy does to a host's instances (plugin_utils/_deployment.py: diff, service records,
manifest) and the plan's wait, idle and ready-time rules (plugin_utils/_plan) over
module_utils/_server/deploy: controller-side, apart from the host-side tests in
tests/unit/plugins/module_utils/_server/test_deploy.py."""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._server import deploy as _deploy
from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest
from ansible_collections.llmops.sglang.plugins.plugin_utils import _deployment
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import server as server_plan

from ..module_utils._server.test_deploy import PLAN, _plan_instance


def test_ready_timeout_grows_with_hicache_and_scales_for_sim() -> None:
    from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import pin_seconds

    none = _deploy.ready_timeout(engine="sglang", pin_seconds=0)
    # 150 GB pinned: the plan's estimate (10 s + 150 GB / 1.2 GB/s = 135 s), with a 1.5x margin
    assert pin_seconds(150e9) == 135
    big = _deploy.ready_timeout(engine="sglang", pin_seconds=pin_seconds(150e9))
    assert none == 600
    assert big == 600 + int(1.5 * 135)
    assert _deploy.ready_timeout(engine="sglang", pin_seconds=135, explicit_s=42) == 42
    assert _deploy.ready_timeout(engine="sim", pin_seconds=0, time_scale=0.01) == int(600 * 0.01 + 30)


def test_service_records_and_wait_and_idle_specs() -> None:
    services = {"results": [
        {"item": {"name": "gpu0"}, "changed": False, "pid": 77},
        {"item": {"name": "gpu1"}, "changed": True, "pid": 88},
        {"item": {"name": "gpu2"}, "changed": False, "status": {"MainPID": "99"}},  # systemd_service
        {"item": {"name": "gpu3"}, "skipped": True},
    ]}
    rec = _deployment.service_records(services, ["gpu0"])
    assert rec["gpu0"] == {"pid": 77, "started": True}
    assert rec["gpu1"] == {"pid": 88, "started": True}
    assert rec["gpu2"] == {"pid": 99, "started": False}
    assert "gpu3" not in rec
    # systemd: a unit just started reports MainPID 0 in its start result; the query after it has the pid
    started = {"results": [{"item": {"name": "gpu0"}, "changed": True, "status": {"MainPID": "0"}}]}
    queried = {"results": [{"item": {"name": "gpu0"}, "changed": False, "status": {"MainPID": "4242"}}]}
    assert _deployment.service_records(started, [], queried)["gpu0"] == {"pid": 4242, "started": True}
    # the process backend's batch in one detached_service run (services): named by service
    batch = {"changed": True, "services": [{"name": "sglang-gpu0", "changed": False, "pid": 77},
                                           {"name": "sglang-gpu1", "changed": True, "pid": 88}]}
    assert _deployment.service_records(batch, []) == {"gpu0": {"pid": 77, "started": False},
                                                      "gpu1": {"pid": 88, "started": True}}
    spec = server_plan.wait_spec(PLAN["instances"][1], PLAN, {"engine": "sglang"}, "process")
    assert spec["url"] == "http://127.0.0.1:30001"
    assert spec["pid_file"] == "/b/gpu1/server.pid" and spec["log_file"] == "/b/gpu1/server.log"
    assert spec["timeout"] == int(600 + 1.5 * 30)
    wild = _plan_instance("gpu0", 0, 30000, bind="0.0.0.0")
    assert server_plan.wait_spec(wild, PLAN, {}, "process")["url"] == "http://127.0.0.1:30000"
    unit = server_plan.wait_spec(PLAN["instances"][0], PLAN, {}, "systemd")
    assert unit["unit"] == "sglang@gpu0.service" and "pid_file" not in unit and "prime" not in unit
    # with a storage tier, its prime (the tier's first prefill) is part of the readiness gate
    tiered = {**PLAN, "hicache_storage": {"prime": {"path": "/generate", "body": {"text": "t"}, "timeout": 900}}}
    assert server_plan.wait_spec(PLAN["instances"][0], tiered, {}, "process")["prime"]["timeout"] == 900
    # a PD prefill is ready once its bootstrap server answers too (where decodes fetch its KV); a decode has none
    prefill = {**PLAN["instances"][0], "pd_role": "prefill", "bootstrap_port": 8998}
    assert server_plan.wait_spec(prefill, {**PLAN, "host_address": "0.0.0.0"}, {}, "process")["bootstrap"] == \
        "http://127.0.0.1:8998/health"
    assert "bootstrap" not in server_plan.wait_spec({**prefill, "pd_role": "decode", "bootstrap_port": None}, PLAN,
                                                    {}, "process")
    assert server_plan.idle_spec(PLAN["instances"][1]) == {"name": "gpu1", "url": PLAN["instances"][1]["connect_url"]}


def test_deployment_diff_says_what_to_restart_and_remove() -> None:
    previous = {"instances": [{"name": "gpu0"}, {"name": "gpu1"}, {"name": "gpu2", "unit": None}]}
    diff = _deployment.diff(PLAN, previous, ["gpu1", "gpu1", "gpu9"])
    assert diff == {"restart": ["gpu1"], "remove": [{"name": "gpu2", "unit": None}], "keep": ["gpu0"], "new": []}
    everything = _deployment.diff(PLAN, previous, [], engine_changed=True)
    assert everything == {"restart": ["gpu0", "gpu1"], "remove": [{"name": "gpu2", "unit": None}], "keep": [],
                          "new": []}


def test_an_instance_the_previous_deployment_does_not_have_is_new_never_restarted() -> None:
    """Issue 27: on a first deploy (no manifest, no instance folder: ``previous`` None) the
    engine's unpack and the new files "change" every instance; none of them can be running (a
    server is found by its folder), so none is stopped or drained first: they are started."""
    first = _deployment.diff(PLAN, {}, ["gpu0", "gpu1"], engine_changed=True)
    assert first == {"restart": [], "remove": [], "keep": [], "new": ["gpu0", "gpu1"]}
    # previous not known (a rollback's batches): every changed instance restarts, as before
    assert _deployment.diff(PLAN, None, [], engine_changed=True)["restart"] == ["gpu0", "gpu1"]
    # gpu1 added to a deployment of gpu0: gpu0 restarts for the engine, gpu1 is started
    grown = _deployment.diff(PLAN, {"instances": [{"name": "gpu0"}]}, ["gpu1"], engine_changed=True)
    assert grown["restart"] == ["gpu0"] and grown["new"] == ["gpu1"]
    # a folder rebuilt into the manifest (deployment.json lost) or live and unlisted is not new
    rebuilt = _deployment.diff(PLAN, {"instances": [{"name": "gpu0"}, {"name": "gpu1", "in_manifest": False}]}, [])
    assert rebuilt["restart"] == ["gpu1"] and rebuilt["new"] == []


def test_a_live_instance_left_out_of_the_manifest_is_replaced_or_removed() -> None:
    """Left by an interrupted deploy (in_manifest false): what it runs is not known, so a planned
    one restarts even though its script did not change, and an unplanned one is removed."""
    previous = {"instances": [{"name": "gpu0"}, {"name": "gpu1", "in_manifest": False},
                              {"name": "gpu2", "in_manifest": False}]}
    diff = _deployment.diff(PLAN, previous, [])
    assert diff["restart"] == ["gpu1"] and diff["keep"] == ["gpu0"]
    assert [i["name"] for i in diff["remove"]] == ["gpu2"]


def test_the_manifest_is_written_only_when_it_is_not_the_intact_one_read_when_planning() -> None:
    services = {"gpu0": {"pid": 11, "started": True}, "gpu1": {"pid": 12, "started": True}}
    ready = {"gpu0": {"ready_at": "2026-12-02T00:00:00Z", "waited_s": 3.0}}
    plan = {**PLAN, "engine": "sim", "backend": "process", "python": "/v/bin/python", "previous": {}}
    built = _deployment.manifest(plan, host="h1", services=services, ready=ready)
    assert [i["name"] for i in built["instances"]] == ["gpu0", "gpu1"] and built["host"] == "h1"
    assert built["instances"][0]["pid"] == 11 and built["engine"] == "sim" and built["service_manager"] == "process"
    assert _deployment.must_write(plan, built)
    # a no-change re-run: the same records, the manifest read when planning intact and equal
    again = {**plan, "previous": built, "previous_intact": True}
    same = _deployment.manifest(again, host="h1", services={k: {**v, "started": False} for k, v in services.items()},
                                ready={})
    assert same == built and not _deployment.must_write(again, same)
    assert _deployment.must_write({**again, "previous_intact": False}, same)


def test_while_the_guard_watches_the_manifest_says_what_runs_and_an_interrupt_leaves_it_rollable() -> None:
    """Issue 28 item 7: Ctrl-C during the canary window left gpu0 serving the new configuration,
    deployment.json saying the old one, status showing no drift, and rollback.yml saying "no
    previous configuration recorded". The candidate manifest, written before the watch: gpu0 on
    its new record, marked candidate, with the old one as its previous; gpu1 (not reached yet) as
    it was; status names the candidate; rollback puts it back; the next deploy replaces it."""
    from ansible_collections.llmops.sglang.plugins.module_utils._server import deploy as deploy_utils
    from ansible_collections.llmops.sglang.plugins.plugin_utils import _rollback

    old = _deployment.manifest({**PLAN, "previous": None}, host="h", services={
        "gpu0": {"pid": 10, "started": True}, "gpu1": {"pid": 11, "started": True}},
        ready={"gpu0": {"ready_at": "T0", "waited_s": 1.0}, "gpu1": {"ready_at": "T0", "waited_s": 1.0}})
    new_argv = ["--model-path", "/m", "--enable-hierarchical-cache"]
    plan = {**PLAN, "instances": [{**i, "argv": new_argv} for i in PLAN["instances"]], "previous": old}
    watched = _deployment.candidate_manifest(plan, host="h", services={"gpu0": {"pid": 20, "started": True}},
                                             ready={"gpu0": {"ready_at": "T1", "waited_s": 2.0}}, candidates=["gpu0"])
    gpu0, gpu1 = watched["instances"]
    assert gpu0["name"] == "gpu0" and gpu0["argv"] == new_argv and gpu0["pid"] == 20 and gpu0["candidate"] is True
    assert gpu0["previous"]["argv"] == ["--model-path", "/m"] and gpu0["previous"]["ready_at"] == "T0"
    assert gpu1 == old["instances"][1]  # not reached: as it was, not candidate
    assert watched["rollout"] == {"candidates": ["gpu0"], "state": "watching"}
    # status shows it
    line = deploy_utils.status_line({"name": "gpu0", "up": True, "url": "u", "process": "running", "candidate": True})
    assert "CANDIDATE, NOT JUDGED" in line and "rollback.yml" in line
    # rollback.yml puts it back on what served, and nothing is a candidate any more
    targets = _manifest.rollback_targets(None, watched)
    assert [t["name"] for t in targets if t["can_roll_back"]] == ["gpu0"]
    back = _rollback.rolled_back(watched, ["gpu0"], {"gpu0": {"pid": 30}}, {"gpu0": {"ready_at": "T2", "waited_s": 1}})
    assert back["instances"][0]["argv"] == ["--model-path", "/m"] and "candidate" not in back["instances"][0]
    assert "rollout" not in back
    # the next deploy of the same change replaces the candidate (to judge it), keeps gpu1's decision to its files
    diff = _deployment.diff(plan, watched, [])
    assert diff["restart"] == ["gpu0"] and diff["keep"] == ["gpu1"]
