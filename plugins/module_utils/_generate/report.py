# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What people read of a generation job (pure): the one-line progress the play prints while it
waits, and the summary (Markdown) written beside ``summary.json`` on the controller."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def duration(seconds: Any) -> str:
    """``4h12m``, ``3m05s``, ``42s``; ``?`` for None."""
    if seconds is None:
        return "?"
    s = int(round(float(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def line(progress: Mapping[str, Any]) -> str:
    """``job prompts: 12,345/902,087 (1.4%) done, 3 failed, 40 in flight, 21.3 lines/s, in 9,800 /
    out 4,120 tok/s (last 60 s), ETA 4h12m; gpu-1/gpu0 50% gpu-2/gpu0 50% (down: ...)``."""
    total = int(progress.get("total") or 0)
    done = int(progress.get("done") or 0)
    pct = 100.0 * done / total if total else 0.0
    recent = progress.get("recent") or {}
    parts = [f"{done:,}/{total:,} ({pct:.1f}%) done", f"{int(progress.get('errors') or 0):,} failed",
             f"{int(progress.get('in_flight') or 0)} in flight"]
    if progress.get("retries"):
        parts.append(f"{progress['retries']} retries")
    parts.append(f"{float(recent.get('lines_s') or 0):.1f} lines/s, in {float(recent.get('input_tok_s') or 0):,.0f} / "
                 f"out {float(recent.get('output_tok_s') or 0):,.0f} tok/s (last {float(recent.get('window_s') or 0):.0f} s)")
    if progress.get("state") == "running":
        parts.append(f"ETA {duration(progress.get('eta_s'))}")
    # through a router: the instances' shares from their own counters, where the job has them
    targets = progress.get("instances") or progress.get("targets") or {}
    shares = " ".join(f"{name} {100 * float(t.get('share') or 0):.0f}%" for name, t in targets.items())
    down = [name for name, t in targets.items() if not t.get("up", True)]
    tail = f"; {shares}" + (f" (down: {', '.join(down)})" if down else "")
    name = (progress.get("labels") or {}).get("job")
    return f"job {name}: " * bool(name) + ", ".join(parts) + tail


def markdown(progress: Mapping[str, Any], where: Mapping[str, Any] | None = None) -> str:
    """The summary: what was done, at what rate, by which target, and where the files are."""
    run = progress.get("this_run") or {}
    labels = progress.get("labels") or {}
    out = [f"# Generation job {labels.get('job', '')}".rstrip(), "",
           f"State: **{progress.get('state')}**" + (f" ({progress['message']})" if progress.get("message") else ""), "",
           "| | |", "|---|---|",
           f"| requests | {int(progress.get('total') or 0):,} |",
           f"| done | {int(progress.get('done') or 0):,} ({int(progress.get('ok') or 0):,} results, "
           f"{int(progress.get('errors') or 0):,} in errors.jsonl) |",
           f"| left | {int(progress.get('pending') or 0):,} |",
           f"| tokens in / out (every run) | {int(progress.get('prompt_tokens') or 0):,} / "
           f"{int(progress.get('completion_tokens') or 0):,} |",
           f"| this run | {int(run.get('lines') or 0):,} lines in {duration(run.get('wall_s'))}: "
           f"{float(run.get('lines_s') or 0):.2f} lines/s, in {float(run.get('input_tok_s') or 0):,.0f} / "
           f"out {float(run.get('output_tok_s') or 0):,.0f} tok/s |",
           f"| retries (this run) | {int(progress.get('retries') or 0):,} |", ""]
    targets = progress.get("targets") or {}
    behind = progress.get("instances") or {}
    if behind:
        out += ["Behind the router (each instance's own counters, other clients' requests included):", "",
                "| instance | tokens in | tokens out | share | up | restarts |", "|---|---:|---:|---:|---|---:|"]
        out += [f"| {name} | {int(i.get('prompt_tokens') or 0):,} | {int(i.get('completion_tokens') or 0):,} | "
                f"{100 * float(i.get('share') or 0):.1f}% | {'yes' if i.get('up') else 'no'} | {i.get('restarts', 0)} |"
                for name, i in behind.items()]
        out.append("")
    if targets:
        out += ["| target | concurrency | lines | share | failed | retries | tokens out | times down |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name, t in targets.items():
            out.append(f"| {name} | {t.get('concurrency')} | {int(t.get('lines') or 0):,} | "
                       f"{100 * float(t.get('share') or 0):.1f}% | {t.get('errors', 0)} | {t.get('retries', 0)} | "
                       f"{int(t.get('completion_tokens') or 0):,} | {t.get('times_down', 0)} |")
        out.append("")
    if progress.get("recovery"):
        out += [f"Recovered at start: {progress['recovery']}.", ""]
    files = progress.get("files") or {}
    if where:
        out.append(f"Files on {where.get('host')} in `{where.get('folder')}`: "
                   + ", ".join(f"`{n}`" for n in [*(files.get("results") or []), *(files.get("errors") or [])])
                   + ", `journal.jsonl`, `job.log`, `progress.json`, `runs.jsonl`.")
        out.append("")
    return "\n".join(out)
