"""The collection's sweep next to SGLang's bench_serving, from one run of tools/gpu/run_collection.sh.

    mkdir -p reports/gpu-run && tar -C reports/gpu-run -xzf run.tar.gz
    .venv/bin/python tools/gpu/compare_bench_serving.py reports/gpu-run/work

Reads the bench reports the steps benchrate and benchprefix wrote (report-h200-rate/,
report-h200-prefix/: each instance's `{"meta", "sweep"}` JSON), bench_serving's own lines
(sgbench/bench_serving.jsonl, steps sgrate and sgprefix) and the server's /metrics before and
after each run, and prints Markdown tables: per rate, offered vs achieved request rate, req/s,
output tok/s, TTFT and ITL p50/p99, TPOT p50, the server's own TTFT mean (its histogram's
sum / count over the run), goodput, the server's prompt tokens per request and cache hit rate, one
row per client (the sweep's prompt tokens per request: over its whole step, below each
table; bench_serving's: per run, its warm-up request included). Nothing is computed that the files do not hold: a missing value is `-`.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from typing import Any

_LINE = re.compile(r"^(sglang[:_][a-z_]+)(\{[^}]*\})?\s+([-+0-9.eE]+|NaN|[+-]Inf)\s*$")


def counters(path: str) -> dict[str, float]:
    """Each metric summed over its label sets; cached tokens also by cache_source."""
    out: dict[str, float] = {}
    try:
        text = open(path, encoding="utf-8").read()
    except OSError:
        return out
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1).replace("sglang_", "sglang:", 1), m.group(2) or "", float(m.group(3))
        out[name] = out.get(name, 0.0) + value
        src = re.search(r'cache_source="([a-z]+)"', labels)
        if src:
            key = f"{name}[{src.group(1)}]"
            out[key] = out.get(key, 0.0) + value
    return out


def delta(before: str, after: str) -> dict[str, float]:
    a, b = counters(after), counters(before)
    return {k: a[k] - b.get(k, 0.0) for k in a}


def server_cols(d: dict[str, float]) -> tuple[str, str]:
    """(prompt tokens per request, cache hit %) over a /metrics delta."""
    reqs = d.get("sglang:num_requests_total", 0.0)
    prompt = d.get("sglang:prompt_tokens_total", 0.0)
    cached = d.get("sglang:cached_tokens_total", 0.0)
    per = f"{prompt / reqs:.0f}" if reqs > 0 else "-"
    hit = f"{100 * cached / prompt:.1f}%" if prompt > 0 else "-"
    return per, hit


def fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return f"{v:.{nd}f}"
    return str(v)


def ours(report_dir: str) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(glob.glob(os.path.join(report_dir, "*.json"))):
        doc = json.load(open(path, encoding="utf-8"))
        if not isinstance(doc, dict) or "sweep" not in doc:
            continue
        for p in doc["sweep"].get("points", []):
            cc = p.get("client_cache") or {}
            sm = p.get("server_metrics") or {}
            prompt_per = (cc.get("prompt_tokens") / cc["requests"]) if cc.get("requests") else None
            rows.append({
                "rate": p.get("offered_rate"), "achieved": p.get("achieved_rate"), "n": p.get("requests"),
                "ok": p.get("ok"), "req_s": p.get("req_s"), "tok_s": p.get("output_tok_s"),
                "ttft50": (p.get("ttft_ms") or {}).get("p50"), "ttft99": (p.get("ttft_ms") or {}).get("p99"),
                "itl50": (p.get("itl_ms") or {}).get("p50"), "itl99": (p.get("itl_ms") or {}).get("p99"),
                "tpot50": (p.get("tpot_ms") or {}).get("p50"), "srv_ttft": (p.get("server") or {}).get("ttft_ms_mean"),
                "good_req": p.get("goodput_req_s"), "good_tok": p.get("goodput_tok_s"), "slo_met": p.get("slo_met"),
                "prompt": fmt(prompt_per, 0),
                "hit": fmt(100 * sm["cache_hit_rate"], 1) + "%" if sm.get("cache_hit_rate") is not None else "-",
                "duration": p.get("duration_s"),
            })
    return rows


def theirs(work: str) -> dict[str, dict[str, Any]]:
    out = {}
    path = os.path.join(work, "sgbench", "bench_serving.jsonl")
    if not os.path.exists(path):
        return out
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        tag = r.get("tag") or ""
        d = delta(os.path.join(work, "sgbench", f"metrics_sg-{tag}_before.txt"),
                  os.path.join(work, "sgbench", f"metrics_sg-{tag}_after.txt"))
        # the /metrics delta includes bench_serving's warm-up request (one)
        prompt, hit = server_cols(d)
        n_ttft = d.get("sglang:time_to_first_token_seconds_count", 0.0)
        srv_ttft = 1000 * d["sglang:time_to_first_token_seconds_sum"] / n_ttft if n_ttft > 0 else None
        chunks = sum(len(x) + 1 for x in r.get("itls") or [])
        tok_per_chunk = sum(r.get("output_lens") or []) / chunks if chunks else None
        out[tag] = {
            "rate": r.get("request_rate"), "achieved": None, "n": len(r.get("input_lens") or []) or None,
            "ok": r.get("completed"), "req_s": r.get("request_throughput"), "tok_s": r.get("output_throughput"),
            "ttft50": r.get("median_ttft_ms"), "ttft99": r.get("p99_ttft_ms"),
            "itl50": r.get("median_itl_ms"), "itl99": r.get("p99_itl_ms"), "tpot50": r.get("median_tpot_ms"),
            "srv_ttft": srv_ttft, "tok_per_chunk": tok_per_chunk,
            "good_req": None, "good_tok": None, "slo_met": None, "prompt": prompt, "hit": hit,
            "duration": r.get("duration"),
        }
    return out


HEAD = ("| client | offered req/s | achieved req/s | requests (ok) | req/s | output tok/s | TTFT p50 ms | "
        "TTFT p99 ms | ITL p50 ms | ITL p99 ms | TPOT p50 ms | server TTFT mean ms | goodput req/s | "
        "goodput tok/s | SLO met | prompt tok/req | cache hit | duration s |\n" + "|---" * 18 + "|")


def row(who: str, r: dict[str, Any]) -> str:
    n = f"{r['n'] if r['n'] is not None else '-'} ({r['ok'] if r['ok'] is not None else '-'})"
    return (f"| {who} | {fmt(r['rate'], 0)} | {fmt(r['achieved'], 2)} | {n} | {fmt(r['req_s'], 2)} | "
            f"{fmt(r['tok_s'])} | {fmt(r['ttft50'])} | {fmt(r['ttft99'])} | {fmt(r['itl50'], 2)} | "
            f"{fmt(r['itl99'], 2)} | {fmt(r['tpot50'], 2)} | {fmt(r['srv_ttft'])} | {fmt(r['good_req'], 2)} | {fmt(r['good_tok'])} | {fmt(r['slo_met'])} | "
            f"{r['prompt']} | {r['hit']} | {fmt(r['duration'], 2)} |")


def main() -> None:
    work = sys.argv[1]
    sg = theirs(work)
    for title, report, tags in (("Rate sweep (random prompts)", "report-h200-rate", None),
                                ("shared_prefix", "report-h200-prefix", ["prefix"])):
        print(f"### {title}\n\n{HEAD}")
        mine = ours(os.path.join(work, report))
        for r in mine:
            print(row("sweep", r))
            tag = tags[0] if tags else f"rate-{r['rate']:g}" if r["rate"] is not None else None
            if tag in sg:
                print(row("bench_serving", sg[tag]))
        per_chunk = [f"{t} {fmt(v['tok_per_chunk'], 2)}" for t, v in sg.items()
                     if v.get("tok_per_chunk") and (t == "prefix") == bool(tags)]
        if per_chunk:
            print(f"\nTokens per streamed chunk (bench_serving's output_lens / chunks): {', '.join(per_chunk)}.")
        for port in ("30000", "30100"):
            d = delta(os.path.join(work, f"metrics_{report[7:]}_before_{port}.txt"),
                      os.path.join(work, f"metrics_{report[7:]}_after_{port}.txt"))
            if d.get("sglang:num_requests_total"):
                prompt, hit = server_cols(d)
                print(f"\nThe sweep's whole step on the server (port {port}, its /metrics before and after, warm-up "
                      f"requests included): {d['sglang:num_requests_total']:.0f} requests, {prompt} prompt tokens "
                      f"per request, cache hit {hit}.")
        print()


if __name__ == "__main__":
    main()
