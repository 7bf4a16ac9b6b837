# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The auto-tuner's report (controller side, pure): a class's outcome (the choice, the fact,
the vars file and what happens to the vars files) and the files tune.md, tune.json and
tune.csv. The search itself is ``_tune``; tests/unit/plugins/plugin_utils/test_tune.py covers both.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._tune import (
    choose,
    latency,
    score_value,
    score_words,
    tuned_fact,
    vars_file,
    writeback_plan,
)

# ---- the report ----


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def _levels(sweep: Mapping[str, Any] | None) -> str:
    return ", ".join(str(p["concurrency"]) for p in (sweep or {}).get("points") or []) or "-"


def path_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The path the search took, one line per candidate in the order it was tried."""
    lines = []
    for n, r in enumerate(results, 1):
        label, sweep, b = r["candidate"]["label"], r.get("sweep"), r.get("bound") or {}
        if r["status"] == "failed":
            lines.append(f"{n}. {label}: {r['reason']}")
            continue
        pair = (f" (per instance: its {sweep['per_instance_of']} instances swept together as one pair at C x "
                f"{sweep['per_instance_of']}, their figures divided by {sweep['per_instance_of']})"
                if (sweep or {}).get("per_instance_of") else "")
        head = f"{n}. {label}: deployed{pair}; C={_levels(sweep).split(',')[0]}"
        head += f" -> bound {_f(b.get('tok_s'))} tok/s" + (f" / {_f(b.get('req_s'), 2)} req/s" if b.get("req_s") else "") \
            + f" ({b.get('reason', '')})" if b else ""
        if r["status"] == "pruned":
            lines.append(f"{head}; {r['reason'].replace('pruned by bound: at most', 'pruned:')}")
            continue
        plateau = " (stopped on plateau)" if (sweep or {}).get("stopped_on_plateau") else ""
        sc = r.get("score") or {}
        got = (f"{_f(score_value(r), 2 if sc.get('unit') == 'req/s' else 1)} {sc.get('unit', 'tok/s')} at C={sc.get('concurrency')}"
               if score_value(r) is not None else r["reason"])
        lines.append(f"{head}; swept C={_levels(sweep)}{plateau}: {got}")
    return lines


def _row(r: Mapping[str, Any], choice: Mapping[str, Any], top: float | None) -> str:
    sweep = r.get("sweep") or {}
    label = r["candidate"]["label"]
    first = (sweep.get("points") or [{}])[0]
    swept = r["status"] == "swept"
    peak, knee = (sweep.get("peak") or {}, sweep.get("knee") or {}) if swept else ({}, {})
    sc = r.get("score") or {}
    win = choice.get("winner") is not None and choice["winner"]["candidate"]["label"] == label
    value = score_value(r)
    rel = f"{(value / top - 1) * 100:+.1f}%" if value is not None and top else "-"
    cells = [str(r["candidate"]["index"] + 1), f"**{label}**" if win else label, r["status"],
             _f((sweep.get("server") or {}).get("max_running_requests")), _f(first.get("output_tok_s")),
             _f((r.get("bound") or {}).get("tok_s")),
             f"{_f(peak.get('output_tok_s'))} @C={peak.get('concurrency')}" if peak else "-",
             f"C={knee['concurrency']}" if knee else "-", _f(value, 2 if sc.get("unit") == "req/s" else 1), rel,
             "winner" if win else choice["why"].get(label, "")]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def render_markdown(results: Sequence[Mapping[str, Any]], choice: Mapping[str, Any], info: Mapping[str, Any]) -> str:
    """tune.md: the setting, one comparison table of every candidate, the path, the winner."""
    objective = info.get("slo") or {}
    limits = [f"{name} <= {_f(objective.get(key))} ms" for key, name in (("ttft_p99_ms", "TTFT p99"), ("itl_p50_ms", "ITL p50"))
              if objective.get(key)]
    slo_text = ("none: peak throughput wins" if not objective.get("active") else
                f"{', '.join(limits)} "
                f"at {('C=' + str(objective['concurrency'])) if objective.get('concurrency') else 'the best level'}")
    top = score_value(choice["winner"]) if choice.get("winner") else None
    unit = "req/s" if objective.get("score") == "capacity" else "tok/s"
    lines = [f"# Tune: class {info.get('class')}", "",
             f"Run {info.get('run_id')}; representative host {info.get('representative')} of "
             f"{', '.join(info.get('hosts') or [])}; levels {', '.join(map(str, info.get('levels') or []))}; "
             f"SLO: {slo_text}. Score: {score_words(objective)}. Throughputs are output tok/s (modelled GPU time on "
             "the embedded engine).", "",
             f"| # | candidate | status | server max running | C=1 tok/s | bound tok/s | peak tok/s | knee | score {unit} "
             "| vs winner | why |", "|" + " --- |" * 11]
    lines += [_row(r, choice, top) for r in results]
    winner = choice.get("message") if choice.get("winner") else f"none: {choice.get('message')}"
    lines += ["", "## Path", "", *path_lines(results), "", "## Result", "", f"Winner: {winner}."]
    lines += list((info.get("writeback") or {}).get("lines") or [])
    lines.append("The fact `sglang_tuned` " + ("holds the winner." if choice.get("winner") else "is null (no winner)."))
    lines += ["", "Bound: a candidate's lowest level gives its per-request rate; times the requests it can run at "
              "once (the server's effective max_running_requests, at most the highest level) it is the most the "
              "candidate could reach. A candidate whose bound is not above the best score so far is not swept further."]
    return "\n".join(lines) + "\n"


def render_csv(results: Sequence[Mapping[str, Any]], choice: Mapping[str, Any], class_name: str = "",
               header: bool = True) -> str:
    """tune.csv: one row per class x candidate x level (a pruned candidate: its probe level)."""
    import csv
    import io

    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    if header:
        out.writerow(["class", "index", "candidate", "profile", "max_running_requests", "hicache_size_gb", "spec_steps",
                      "spec_draft_tokens", "hicache_storage", "status", "server_max_running", "concurrency", "output_tok_s",
                      "ttft_p99_ms", "itl_p50_ms", "bound_tok_s", "score_tok_s", "score", "score_unit", "winner", "why"])
    win = ((choice.get("winner") or {}).get("candidate") or {}).get("label")
    for r in results:
        c, sweep = r["candidate"], r.get("sweep") or {}
        spec = c.get("speculative") or {}
        head = [class_name, c["index"] + 1, c["label"], c["profile"], c["max_running_requests"], c["hicache_size_gb"],
                spec.get("steps", ""), spec.get("draft_tokens", ""), storage_text(c.get("hicache_storage")), r["status"],
                (sweep.get("server") or {}).get("max_running_requests", "")]
        sc = r.get("score") or {}
        tail = [(r.get("bound") or {}).get("tok_s", ""), "" if sc.get("tok_s") is None else sc["tok_s"],
                "" if score_value(r) is None else score_value(r), sc.get("unit", "tok/s"),
                str(c["label"] == win).lower(), "" if c["label"] == win else choice["why"].get(c["label"], "")]
        for p in sweep.get("points") or [{}]:
            out.writerow([*head, p.get("concurrency", ""), p.get("output_tok_s", ""),
                          latency(p, "ttft_ms", "p99")[0] if p else "", latency(p, "itl_ms", "p50")[0] if p else "",
                          *tail])
    return buf.getvalue()


def storage_text(storage: Mapping[str, Any] | None) -> str:
    """A candidate's storage tier in a cell: its backend, then its write policy; empty without one."""
    if not storage:
        return ""
    return "/".join(str(v) for v in (storage.get("backend"), storage.get("write_policy")) if v)


def outcome(results: Sequence[Mapping[str, Any]], objective: Mapping[str, Any], info: Mapping[str, Any],
            extra_args: Any = None, generated: str = "",
            read: Callable[[str], str | None] = lambda _: None) -> dict[str, Any]:
    """Everything a class's search produced: the choice, the fact, the vars file's text, what
    happens to the vars files (``writeback``: info's vars_files, vars_moves, write and
    without_winner; ``read`` gives an existing file's text), the report's Markdown section and
    CSV rows, the report items for sweep_report (plots) and, without a winner, ``failure``: the
    message that fails the play (each candidate's reason, what became of the vars files)."""
    choice = choose(results, objective)
    plan = writeback_plan(info.get("vars_files") or [], info.get("vars_moves") or [], choice.get("winner") is not None,
                          bool(info.get("write", True)), str(info.get("without_winner") or "keep"), read,
                          info.get("vars_others") or [])
    info = dict(info, writeback=plan)
    fact = tuned_fact(choice, str(info.get("class")), str(info.get("representative")), str(info.get("run_id")), objective)
    win = choice.get("winner")
    text = (vars_file(fact, win["candidate"], extra_args, info.get("hosts") or [], generated, str(info.get("report") or ""))
            if fact and win else None)
    items = [{"meta": {"host": info.get("representative"), "instance": info.get("instance") or "tune",
                       "profile": r["candidate"]["label"], "release": info.get("release"), "engine": info.get("engine")},
              "sweep": r["sweep"]} for r in results if r.get("sweep")]
    slim = [{k: v for k, v in r.items() if k != "sweep"} | {"sweep": _slim(r.get("sweep"))} for r in results]
    failure = "" if win else (
        f"tune.yml found no winner for class {info.get('class')} on {info.get('representative')}: {choice['message']}. "
        + " ".join(f"{label}: {why}." for label, why in choice["why"].items()) + " "
        + " ".join((info.get("writeback") or {}).get("lines") or []))
    return {"choice": {"message": choice["message"], "why": choice["why"],
                       "winner": (win or {}).get("candidate")}, "failure": failure.strip(),
            "fact": fact, "vars_text": text, "writeback": plan, "markdown": render_markdown(results, choice, dict(info, slo=objective)),
            "csv": render_csv(results, choice, str(info.get("class")), header=False), "items": items, "results": slim}


def _slim(sweep: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A sweep without its raw per-request records (they are in sweep_report's JSON files)."""
    return None if sweep is None else {k: v for k, v in sweep.items() if k != "records"}


def csv_header() -> str:
    """The header row of tune.csv (rows come from ``outcome``, one class after another)."""
    return render_csv([], {"why": {}})


def report_files(outcomes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """tune.md, tune.json and tune.csv of a run: the classes' outcomes one after another."""
    import json

    body = {str((o.get("fact") or {}).get("class") or n): {k: v for k, v in o.items() if k != "items"}
            for n, o in enumerate(outcomes)}
    return {"tune.md": "\n".join(str(o.get("markdown") or "") for o in outcomes),
            "tune.json": json.dumps(body, indent=2, sort_keys=True, default=str) + "\n",
            "tune.csv": csv_header() + "".join(str(o.get("csv") or "") for o in outcomes)}
