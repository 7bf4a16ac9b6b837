"""SGLang's own bench_serving next to the collection's sweep, on a deployed instance.

Runs the release's client (`sglang.benchmark.serving`, what `python3 -m sglang.bench_serving`
runs) in this one process (one import for every run) with the shapes that
tools/gpu/run_collection.sh gives the collection's sweep, and keeps the server's /metrics text
before and after each run, so that both clients' runs can be read against the server's own
counters (prompt tokens, cached tokens by tier).

    python3 bench_serving_side.py DEPLOYMENT_JSON OUTDIR rate --rates 2 4 8 16 --seconds 10 \
        --input-len 256 --output-len 256
    python3 bench_serving_side.py DEPLOYMENT_JSON OUTDIR prefix --rate 8 --groups 16 \
        --per-group 8 --prefix-len 1024 --suffix-len 64 --output-len 128

Needs the release on PYTHONPATH (the device's /tmp/site). Writes OUTDIR/bench_serving.jsonl
(bench_serving's own --output-file, one line per run, with --output-details) and
OUTDIR/metrics_sg-<tag>_{before,after}.txt. Matching what the sweep sends: `--backend
sglang-oai` (streamed POST /v1/completions, as the sweep's `api: openai`), temperature 0.6 and
top_p 0.95 through `--extra-request-body` (the sweep's defaults), EOS ignored (both clients'
default), seed 42, one warm-up request, the cache flushed before each run (`--flush-cache`; the
sweep flushes before each level: with seed 42 both repeat their prompts from one rate to the next).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import urllib.request


def instance(manifest_path: str) -> tuple[str, str]:
    """(base URL, model path) of the manifest's first instance."""
    with open(manifest_path, encoding="utf-8") as f:
        inst = json.load(f)["instances"][0]
    argv = inst["argv"]
    model = argv[argv.index("--model-path") + 1]
    return inst["connect_url"].rstrip("/"), model


def scrape(url: str, path: str) -> None:
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        text = f"# scrape failed: {e}\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def without_hf_datasets() -> None:
    """Lets `sglang.benchmark.serving` import where Hugging Face `datasets` is not installed.

    Its dataset package imports `from datasets import load_dataset` at module level for MMMU
    alone (longbench_v2 imports it when used); random-ids and generated-shared-prefix never call
    it. The device image has no `datasets` (the first run stopped there: No module named
    'datasets'), and carrying it means carrying its own pins (multiprocess, fsspec). When the
    real package is missing, a module whose load_dataset refuses with that reason stands in."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        import types

        def load_dataset(*_args: object, **_kwargs: object) -> None:
            raise RuntimeError("Hugging Face datasets is not installed here: only bench_serving's "
                               "mmmu and longbench_v2 datasets need it")

        shim = types.ModuleType("datasets")
        shim.load_dataset = load_dataset  # type: ignore[attr-defined]
        sys.modules["datasets"] = shim


def run(url: str, model: str, outdir: str, tag: str, extra: list[str]) -> None:
    without_hf_datasets()
    from sglang.benchmark import serving

    argv = ["bench_serving", "--backend", "sglang-oai", "--base-url", url, "--model", model,
            "--tokenizer", model, "--seed", "42", "--warmup-requests", "1",
            "--extra-request-body", json.dumps({"temperature": 0.6, "top_p": 0.95}),
            "--output-file", os.path.join(outdir, "bench_serving.jsonl"), "--output-details",
            "--disable-tqdm", "--tag", tag, *extra]
    print("### bench_serving " + " ".join(argv[1:]), flush=True)
    scrape(url, os.path.join(outdir, f"metrics_sg-{tag}_before.txt"))
    t0 = time.monotonic()
    sys.argv = argv
    try:
        serving.cli_main()
    except SystemExit as e:
        print(f"### bench_serving {tag} exited: {e.code}", flush=True)
    except Exception as e:  # noqa: BLE001 - one failed run must not lose the others
        print(f"### bench_serving {tag} failed: {type(e).__name__}: {e}", flush=True)
    scrape(url, os.path.join(outdir, f"metrics_sg-{tag}_after.txt"))
    print(f"### bench_serving {tag}: {time.monotonic() - t0:.1f} s", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("manifest")
    p.add_argument("outdir")
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("rate")
    r.add_argument("--rates", type=float, nargs="+", required=True)
    r.add_argument("--seconds", type=float, required=True, help="seconds of arrivals per rate")
    r.add_argument("--input-len", type=int, required=True)
    r.add_argument("--output-len", type=int, required=True)
    s = sub.add_parser("prefix")
    s.add_argument("--rate", type=float, required=True)
    s.add_argument("--groups", type=int, required=True)
    s.add_argument("--per-group", type=int, required=True)
    s.add_argument("--prefix-len", type=int, required=True)
    s.add_argument("--suffix-len", type=int, required=True)
    s.add_argument("--output-len", type=int, required=True)
    a = p.parse_args()
    os.makedirs(a.outdir, exist_ok=True)
    url, model = instance(a.manifest)
    if a.mode == "rate":
        for rate in a.rates:
            # random-ids: token ids drawn from the vocabulary, exact lengths (range ratio 1);
            # "random" would download ShareGPT, which the device cannot reach
            run(url, model, a.outdir, f"rate-{rate:g}", [
                "--dataset-name", "random-ids", "--random-input-len", str(a.input_len),
                "--random-output-len", str(a.output_len), "--random-range-ratio", "1",
                "--num-prompts", str(max(1, math.ceil(rate * a.seconds))), "--request-rate", str(rate),
                "--flush-cache"])
    else:
        run(url, model, a.outdir, "prefix", [
            "--dataset-name", "generated-shared-prefix", "--gsp-num-groups", str(a.groups),
            "--gsp-prompts-per-group", str(a.per_group), "--gsp-system-prompt-len", str(a.prefix_len),
            "--gsp-question-len", str(a.suffix_len), "--gsp-output-len", str(a.output_len),
            "--gsp-range-ratio", "1", "--request-rate", str(a.rate), "--flush-cache"])


if __name__ == "__main__":
    main()
