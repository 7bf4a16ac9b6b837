"""The previous configuration kept per instance in the deployment manifest and the rollback
targets (module_utils/_server/manifest.py: with_previous, rollback_targets)."""
from __future__ import annotations

import copy

from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as m

ENV = {"CUDA_VISIBLE_DEVICES": "0", "SGLANG_X": "1"}


def manifest(release: str, instances: list[tuple[str, list[str], str | None]], revision: str | None = "abc",
             env: dict | None = None) -> dict:
    return {"schema_version": 2, "release": release, "model_revision": revision, "base_dir": "/opt/sglang",
            "instances": [{"name": n, "argv": argv, "env": dict(env or ENV), "ready_at": ready}
                          for n, argv, ready in instances]}


OLD = manifest("0.5.17", [("gpu0", ["--tp", "1"], "2026-12-01T10:00:00Z"), ("gpu1", ["--tp", "1"], "t1")])


def test_env_digest_is_stable_and_order_free() -> None:
    assert m.env_digest({"B": "2", "A": "1"}) == m.env_digest({"A": "1", "B": "2"})
    assert m.env_digest({"A": "1"}) != m.env_digest({"A": "2"})
    assert m.env_digest(None) is None


def test_changed_instance_keeps_what_served_unchanged_keeps_its_previous() -> None:
    new = manifest("0.5.17", [("gpu0", ["--tp", "1", "--flag"], None), ("gpu1", ["--tp", "1"], "t1")])
    before = copy.deepcopy(new)
    out = m.with_previous(new, OLD)
    assert new == before  # pure
    prev = out["instances"][0]["previous"]
    assert prev["argv"] == ["--tp", "1"] and prev["release"] == "0.5.17" and prev["model_revision"] == "abc"
    assert prev["env_digest"] == m.env_digest(ENV) and prev["ready_at"] == "2026-12-01T10:00:00Z"
    assert out["instances"][1]["previous"] is None  # same configuration, nothing before it
    # a later no-change run keeps gpu0's previous
    again = m.with_previous(copy.deepcopy(new), out)
    assert again["instances"][0]["previous"] == prev


def test_release_revision_and_env_changes_count() -> None:
    for new in (manifest("0.5.23", [("gpu0", ["--tp", "1"], None)]),
                manifest("0.5.17", [("gpu0", ["--tp", "1"], None)], revision="def"),
                manifest("0.5.17", [("gpu0", ["--tp", "1"], None)], env={"CUDA_VISIBLE_DEVICES": "1"})):
        assert m.with_previous(new, OLD)["instances"][0]["previous"]["argv"] == ["--tp", "1"]


def test_old_manifest_without_digest_or_revision_is_read() -> None:
    """A manifest of an older collection: no env, no env_digest, no model_revision, no previous."""
    old = {"schema_version": 2, "release": "0.5.17",
           "instances": [{"name": "gpu0", "argv": ["--tp", "1"], "ready_at": "t0"}]}
    normalized = m.normalize(old, "/opt/sglang")
    assert normalized["instances"][0]["previous"] is None
    same = m.with_previous(manifest("0.5.17", [("gpu0", ["--tp", "1"], None)]), normalized)
    assert same["instances"][0]["previous"] is None  # only argv and release known: the same
    changed = m.with_previous(manifest("0.5.17", [("gpu0", ["--tp", "2"], None)]), normalized)
    assert changed["instances"][0]["previous"]["argv"] == ["--tp", "1"]


def test_a_configuration_that_never_served_is_not_a_previous() -> None:
    never = manifest("0.5.17", [("gpu0", ["--bad"], None)])
    out = m.with_previous(manifest("0.5.17", [("gpu0", ["--good"], None)]), never)
    assert out["instances"][0]["previous"] is None


def test_rollback_targets() -> None:
    new = m.with_previous(manifest("0.5.23", [("gpu0", ["--tp", "1"], "t2"), ("gpu2", ["--tp", "1"], "t2")]), OLD)
    targets = {t["name"]: t for t in m.rollback_targets(OLD, new)}
    assert targets["gpu0"]["can_roll_back"] and targets["gpu0"]["to"]["release"] == "0.5.17"
    assert not targets["gpu2"]["can_roll_back"] and targets["gpu2"]["reason"] == "new instance"
    assert targets["gpu1"]["can_roll_back"] and "removed" in targets["gpu1"]["reason"]
    # without the old manifest (rollback.yml later, on demand): from each record's previous
    alone = {t["name"]: t for t in m.rollback_targets(None, new)}
    assert alone["gpu0"]["can_roll_back"] and alone["gpu0"]["to"]["argv"] == ["--tp", "1"]
    assert not alone["gpu2"]["can_roll_back"]
    # nothing changed: nothing to go back to
    assert not any(t["can_roll_back"] for t in m.rollback_targets(OLD, m.with_previous(OLD, OLD)))


def test_restore_puts_the_old_records_back_with_this_runs_pids() -> None:
    new = manifest("0.5.23", [("gpu0", ["--tp", "1", "--flag"], "t9"), ("gpu1", ["--tp", "1", "--flag"], None)])
    new["instances"][0]["pid"] = 42
    out = m.restore(m.with_previous(new, OLD), OLD, ["gpu0", "gpu1"])
    gpu0, gpu1 = out["instances"]
    assert gpu0["argv"] == ["--tp", "1"] and gpu0["pid"] == 42 and gpu0["ready_at"] == "t9"
    assert gpu0["rolled_back"]["argv"] == ["--tp", "1", "--flag"] and gpu0["rolled_back"]["release"] == "0.5.23"
    assert gpu1["argv"] == ["--tp", "1"] and gpu1["ready_at"] == "t1"  # kept running: its old ready time
    assert out["release"] == "0.5.17"  # every instance went back
    partial = m.restore(new, OLD, ["gpu0"])
    assert partial["release"] == "0.5.23" and partial["instances"][1]["argv"] == ["--tp", "1", "--flag"]
    assert m.restore(new, None, ["gpu0"])["instances"][0]["argv"] == ["--tp", "1", "--flag"]  # nothing to go back to
