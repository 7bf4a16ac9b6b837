# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The rollout guard's sides and verdict (controller side; action llmops.sglang.rollout_guard).

A batch of replaced instances (the canary, or a guarded batch) is compared with instances
still on the old configuration, over the same window: the running rank-0 instances of every
server host that this run has not (re)started, as the router reaches them. When none is
left (the last batch of a rollout that replaced everything), the baseline is the instances
replaced by earlier batches (each passed its own guard), and the verdict says so.

The measuring is module llmops.sglang.rollout_window (on the router's host); the judging is
``_guard.decide``; this file picks the sides, turns the window into the guard's input and the
verdict into what the role does (``rollback``) and what the operator reads (``lines``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils import _guard
from ansible_collections.llmops.sglang.plugins.plugin_utils._routing import worker_url

ON_INCONCLUSIVE = ("proceed", "rollback")


PROBE_MARGIN = 1.2  # auto: each instance alone reaches min_requests with this margin


def probe_rate(value: Any, thresholds: Mapping[str, Any] | None, seconds: float) -> float:
    """``sglang_rollout_guard_probe_rate`` as req/s to each watched instance: ``auto`` is enough
    for each instance alone to reach the guard's ``min_requests`` in the window (issue 28 item 1:
    behind sglang-router's cache_aware policy a re-added canary got 1 request in 300 s); a number
    is itself; 0 is none."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        if seconds <= 0:
            return 0.0
        return round(PROBE_MARGIN * _guard.thresholds(thresholds)["min_requests"] / seconds, 3)
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise _guard.GuardError(f"sglang_rollout_guard_probe_rate={value!r}: it takes auto, a number of requests per "
                                "second >= 0, or 0 for none") from None
    if rate < 0:
        raise _guard.GuardError(f"sglang_rollout_guard_probe_rate={value!r}: it takes auto, or a number >= 0")
    return rate


def check_on_inconclusive(value: Any) -> str:
    """``sglang_rollout_guard_on_inconclusive`` checked: proceed or rollback."""
    if value not in ON_INCONCLUSIVE:
        raise _guard.GuardError(f"sglang_rollout_guard_on_inconclusive={value!r}: it takes "
                                f"{' or '.join(ON_INCONCLUSIVE)}")
    return str(value)


def sides(hostvars: Mapping[str, Mapping[str, Any]], servers: Sequence[str], host: str, canary: Sequence[str],
          router_host: str) -> dict[str, Any]:
    """``{canary: [urls], baseline: [urls], baseline_kind, excluded: [urls]}`` for the batch
    ``canary`` (instance names of ``host``). A host without a plan in this run (left out by
    --limit, unreachable) is not used: what it runs is not known here."""
    old: list[str] = []
    replaced: list[str] = []
    mine: list[str] = []
    for name in servers:
        facts = hostvars.get(name) or {}
        plan = facts.get("__sglang_plan")
        if not isinstance(plan, Mapping):
            continue
        running = set(plan.get("running") or [])
        started = {n for n, rec in (facts.get("__sglang_services") or {}).items()
                   if isinstance(rec, Mapping) and rec.get("started")}
        for inst in plan.get("instances") or []:
            if not inst.get("rank0", True):
                continue
            url = worker_url(inst, name, router_host)
            if not url:
                continue
            if name == host and inst.get("name") in canary:
                mine.append(url)
            elif inst.get("name") in started:
                replaced.append(url)
            elif inst.get("name") in running:
                old.append(url)
    if not mine:
        raise _guard.GuardError(f"none of {', '.join(canary) or 'no instance'} of {host} is a rank-0 instance "
                                "the router reaches: nothing to watch")
    if old:
        return {"canary": mine, "baseline": old, "baseline_kind": "old configuration", "excluded": replaced}
    return {"canary": mine, "baseline": replaced, "excluded": [],
            "baseline_kind": "replaced by earlier batches (no instance left on the old configuration)"}


def judge(window: Mapping[str, Any], picked: Mapping[str, Any], overrides: Mapping[str, Any] | None,
          on_inconclusive: str = "rollback") -> dict[str, Any]:
    """The guard's verdict on one window (the rollout_window module's result), with
    ``rollback`` (what the role does) and ``lines`` (what the operator reads)."""
    on_inconclusive = check_on_inconclusive(on_inconclusive)
    seconds = float(window.get("seconds") or 0.0)
    scraped = window.get("instances") or {}
    problems = []

    def windows(urls: Sequence[str]) -> list[dict[str, Any]]:
        out = []
        for url in urls:
            got = scraped.get(url) or {}
            if not got.get("end"):
                problems.append(f"{url}: {got.get('error') or 'not read'}")
                continue
            out.append(_guard.instance_window(got.get("start"), got["end"], seconds,
                                              running_mean=got.get("running_mean")))
        return out

    can, base = windows(picked["canary"]), windows(picked["baseline"])
    router = None
    rwin = window.get("router") or {}
    if rwin.get("end"):
        router = _guard.router_outcomes(rwin.get("start"), rwin["end"], picked["canary"], picked["baseline"])
    if not can:  # a canary that does not answer /metrics at all is a failed canary
        verdict = {"decision": _guard.FAIL, "reason": "no canary instance answered /metrics: " + "; ".join(problems),
                   "checks": [], "canary": None, "baseline": None, "router": router}
    elif not base:
        verdict = {"decision": _guard.INCONCLUSIVE, "checks": [], "canary": None, "baseline": None, "router": router,
                   "reason": "no baseline instance to compare with" + (": " + "; ".join(problems) if problems else "")}
    else:
        verdict = _guard.decide(can, base, overrides, router=router)
    rollback = verdict["decision"] == _guard.FAIL or (
        verdict["decision"] == _guard.INCONCLUSIVE and on_inconclusive == "rollback")
    verdict.update({"rollback": rollback, "seconds": seconds, "sides": dict(picked), "scrape_problems": problems,
                    "on_inconclusive": on_inconclusive, "probe": window.get("probe")})
    verdict["lines"] = lines(verdict)
    return verdict


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def lines(verdict: Mapping[str, Any]) -> list[str]:
    """What was measured and why the guard decided as it did."""
    picked = verdict["sides"]
    out = [f"guard: {verdict['decision'].upper()} over {verdict['seconds']:.0f} s: {verdict['reason']}",
           f"  canary: {', '.join(picked['canary'])}",
           f"  baseline ({picked['baseline_kind']}): {', '.join(picked['baseline']) or 'none'}"]
    for side in ("canary", "baseline"):
        values = verdict.get(side)
        if values:
            out.append(f"  {side}: {values['requests']:.0f} requests, {values['errors']:.0f} errors, "
                       f"TTFT mean {_fmt(values['ttft']['mean'])} s, ITL mean {_fmt(values['itl']['mean'])} s, "
                       f"tokens per request-second {_fmt(values['throughput_per_running'])}")
    for check in verdict.get("checks") or []:
        out.append(f"  {check['verdict']:>12}  {check['check']}: canary {_fmt(check['canary'])}, baseline "
                   f"{_fmt(check['baseline'])} ({check['limit'] or 'no limit'})")
    probe = verdict.get("probe")
    if probe:
        sent = sum(r["sent"] for r in probe["instances"].values())
        failed = sum(r["failed"] for r in probe["instances"].values())
        out.append(f"  probe load: {probe['rate']:g} req/s to each instance, {sent} sent, {failed} failed "
                   "(counted in the servers' /metrics with the routers' traffic)")
    out += [f"  not read: {p}" for p in verdict.get("scrape_problems") or []]
    if verdict["decision"] == _guard.INCONCLUSIVE:
        out.append(f"  inconclusive -> {verdict['on_inconclusive']} (sglang_rollout_guard_on_inconclusive)")
    return out


def stop_lines(verdict: Mapping[str, Any], host: str, batch: Sequence[str]) -> list[str]:
    """Why the rollout stops, before ``lines``: the batch rolled back and the reason, and the
    instances whose files go back too without a restart (changed by this run, not yet replaced);
    for a window that could not decide, the settings that would let it."""
    out = [f"The rollout guard rolled back {', '.join(batch)} of {host} ({verdict['decision']}): {verdict['reason']}"]
    if verdict.get("decision") == _guard.INCONCLUSIVE:
        probe = verdict.get("probe") or {}
        out.append(
            f"the window ({verdict.get('seconds', 0):g} s, probe {probe.get('rate', 0):g} req/s to each instance) could "
            "not decide, and a canary asked for is not rolled out unjudged: give it more traffic or time "
            "(sglang_rollout_guard_probe_rate, sglang_rollout_canary_seconds / sglang_rollout_guard_seconds), "
            "ask for fewer requests (sglang_rollout_guard: {min_requests: N}), keep an instance on the old "
            "configuration as the baseline, or let an undecided window proceed (sglang_rollout_guard_on_inconclusive: proceed)")
    others = [n for n in verdict.get("restore") or [] if n not in batch]
    if others:
        out.append(f"files put back for {', '.join(others)} (still running the previous configuration)")
    return out


def to_restore(changed: Sequence[str], services: Mapping[str, Any] | None, batch: Sequence[str]) -> list[str]:
    """The instances of the host whose files a rollback puts back: those this run changed
    (``changed``), except those an earlier batch restarted and its guard passed (they run the
    new configuration, and their files must say so); the failed batch itself goes back."""
    earlier = {n for n, rec in (services or {}).items() if isinstance(rec, Mapping) and rec.get("started")}
    return [n for n in changed if n in batch or n not in earlier]
