# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What ``--check`` and ``--tags plan`` print for a host (issue 28 item 12): a few lines saying
what the deploy would do to each instance and why, instead of the whole plan.

Per host: the release, profile, engine and service backend, the HiCache size when there is one;
per instance: start (new, or not running), restart (the flags whose values change, the
environment, the release or the model's revision), or stays, with its GPUs, port and command
line; then the instances of deployment.json the plan no longer has (stopped). The comparison is
with deployment.json as the plan read it: at deploy time the instance's files decide (a new
collection version may rewrite a launch script the manifest cannot tell about).
The whole plan stays the registered result (``-v`` prints it).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import flag_values


def argv_changes(old: Sequence[Any], new: Sequence[Any]) -> list[str]:
    """The flags that differ between two command lines, in the new one's order, then the ones
    dropped: ``--flag a -> b``, ``+ --flag b`` (added), ``- --flag a`` (removed)."""
    before, after = flag_values(old), flag_values(new)

    def shown(flag: str, value: str | None) -> str:
        return flag if value is None else f"{flag} {value}"

    changes = []
    for flag, value in after.items():
        if flag not in before:
            changes.append("+ " + shown(flag, value))
        elif before[flag] != value:
            changes.append(f"{flag} {before[flag] if before[flag] is not None else '(set)'} -> "
                           f"{value if value is not None else '(set)'}")
    changes += ["- " + shown(flag, value) for flag, value in before.items() if flag not in after]
    return changes


def instance_change(inst: Mapping[str, Any], old: Mapping[str, Any] | None, manifest: Mapping[str, Any],
                    plan: Mapping[str, Any], running: bool) -> tuple[str, list[str]]:
    """(what the deploy does to the instance, why) against its record in deployment.json."""
    if old is None:
        return "start", ["new: not in deployment.json"]
    served = _manifest.served_config(old, manifest)
    reasons = argv_changes(served["argv"], inst.get("argv") or [])
    digest = _manifest.env_digest(inst.get("env"))
    if served.get("env_digest") and digest and served["env_digest"] != digest:
        reasons.append("environment changed")
    if served.get("release") and plan.get("release") and str(served["release"]) != str(plan["release"]):
        reasons.append(f"release {served['release']} -> {plan['release']}")
    revision = (plan.get("model") or {}).get("revision")
    if served.get("model_revision") and revision and served["model_revision"] != revision:
        reasons.append(f"model revision {served['model_revision']} -> {revision}")
    if not running:
        return "start", ["not running", *reasons]
    return ("restart", reasons) if reasons else ("stays", [])


def plan_summary(plan: Mapping[str, Any]) -> list[str]:
    """The lines ``--check`` / ``--tags plan`` print for one host's plan (``server_plan``'s)."""
    manifest = plan.get("previous") or {}
    recorded = {str(i.get("name")): i for i in manifest.get("instances") or [] if isinstance(i, Mapping)}
    running = {str(name) for name in plan.get("running") or []}
    instances = list(plan.get("instances") or [])
    lines = [f"{plan.get('host')}: {len(instances)} instance(s), SGLang {plan.get('release')} "
             f"({plan.get('engine', 'sglang')} engine, {plan.get('backend', 'process')} services), "
             f"profile {plan.get('profile')}; compared with {'deployment.json' if manifest else 'nothing deployed'}"]
    hicache = plan.get("hicache") or {}
    if hicache.get("size_gb"):
        lines.append(f"  HiCache: {hicache['size_gb']} GB host pool per rank ({hicache.get('limited_by', '?')} "
                     f"limits the host: {(hicache.get('reasoning') or [''])[-1]})")
    storage = plan.get("hicache_storage") or {}
    if storage and storage.get("master"):  # mooncake: a store of host RAM shared through its master
        master = storage["master"]
        lines.append(f"  HiCache storage: {storage.get('backend')} store, master {master.get('address')} "
                     f"({'run on this host' if master.get('local') else 'run elsewhere'}): "
                     f"{(storage.get('reasoning') or [''])[-1]}")
    elif storage:
        fs = storage.get("filesystem") or {}
        caps = sorted({int(item.get("cap_bytes") or 0) for item in (storage.get("instances") or {}).values()})
        each = " / ".join(f"{cap / 1e9:.2f} GB" for cap in caps)
        lines.append(f"  HiCache storage: {storage.get('backend')} in {storage.get('root')}/<instance>, {each} per "
                     f"instance ({fs.get('fstype')} at {fs.get('mount_point')}: {(storage.get('reasoning') or [''])[-1]})")
    pd = plan.get("pd") or {}
    if pd:
        sides = ", ".join(f"{n} {role}" for role, n in (pd.get("counts") or {}).items() if n)
        lines.append(f"  PD: {sides} over {pd.get('transfer_backend')} (the router pairs them)")
    counts: dict[str, int] = {}
    for inst in instances:
        name = str(inst.get("name"))
        what, why = instance_change(inst, recorded.get(name), manifest, plan, name in running)
        counts[what] = counts.get(what, 0) + 1
        gpus = inst.get("cuda_visible_devices")
        lines.append(f"  {name}: {what}" + (f" ({'; '.join(why)})" if why else "")
                     + f" - GPU {gpus}, port {inst.get('port')}")
        lines.append("      " + " ".join(str(word) for word in inst.get("argv") or []))
    planned = {str(i.get("name")) for i in instances}
    for name in recorded:
        if name not in planned:
            counts["stop"] = counts.get("stop", 0) + 1
            lines.append(f"  {name}: stop (no longer planned)")
    lines.append("  in all: " + ", ".join(f"{n} {what}" for what, n in counts.items()) if counts else "  in all: nothing")
    return lines
