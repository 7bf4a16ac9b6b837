#!/usr/bin/env bash
# Client ceiling (docs/PERFORMANCE.md item 2): the llmops sweep logic vs SGLang 0.5.17's
# bench_serving, against the same zero-delay server (tools/bench/zero_server.py), each client
# pinned to CPU 0, the server to CPU 1.
#   tools/bench/client_ceiling.sh [REPS] [CONCURRENCIES...]     (default: 2 reps, 64 256)
# Env: MAX_TOKENS (512), REQ_PER_C (4: requests per level = 4*C), PORT (34500),
#      MODES ("bulk perevent": server writes a response at once / one write per SSE event),
#      TOKENIZER (a folder with tokenizer.json for bench_serving; default /tmp/sgbench/models/qwen3-dense),
#      MAKE_MODELS (path to make_models.py, which writes that folder when it is missing: the
#      8000-token BPE of the GPU recording kit, gpu/real-sglang/make_models.py in the maintainers'
#      shared folder; it is not part of this repository).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-2}; shift || true
CS=("$@"); [ ${#CS[@]} -gt 0 ] || CS=(64 256)
T=${MAX_TOKENS:-512}; K=${REQ_PER_C:-4}; PORT=${PORT:-34500}
OUT=${PERF_DIR:-$PWD/build/perf}/ceiling; mkdir -p "$OUT"
SG=/tmp/sgbench
if [ ! -x $SG/bin/python ] || ! $SG/bin/python -c 'import sglang, transformers, orjson' 2>/dev/null; then
  python3 -m venv $SG
  $SG/bin/pip install -q --no-deps sglang==0.5.17
  $SG/bin/pip install -q aiohttp numpy requests tqdm orjson pybase64 psutil pyzmq pillow transformers==5.12.1
fi
TOK=${TOKENIZER:-$SG/models/qwen3-dense}
if [ ! -f "$TOK/tokenizer.json" ]; then
  if [ -z "${TOKENIZER:-}" ] && [ -f "${MAKE_MODELS:-}" ]; then
    $SG/bin/python "$MAKE_MODELS" $SG/models >/dev/null
  else
    echo "no $TOK/tokenizer.json: set TOKENIZER to a folder with one, or MAKE_MODELS to make_models.py" >&2
    exit 1
  fi
fi
URL=http://127.0.0.1:$PORT
srv_cpu() { awk '{printf "%.2f", ($14+$15)/100}' /proc/$SRV/stat; }
SRV=
trap '[ -n "$SRV" ] && kill -- -$SRV 2>/dev/null || true' EXIT
for mode in ${MODES:-bulk perevent}; do
  flag=(); [ "$mode" = perevent ] && flag=(--per-event-writes)
  setsid taskset -c 1 .venv/bin/python tools/bench/zero_server.py --port "$PORT" "${flag[@]}" >"$OUT/server-$mode.log" 2>&1 &
  SRV=$!
  for _ in $(seq 50); do curl -sf "$URL/health" >/dev/null && break; sleep 0.2; done
for rep in $(seq "$REPS"); do
  for C in "${CS[@]}"; do
    N=$((K * C))
    echo "== server=$mode rep $rep C=$C N=$N T=$T load=$(cut -d' ' -f1-3 /proc/loadavg)"
    s0=$(srv_cpu)
    taskset -c 0 .venv/bin/python tools/bench/sweep_cli.py "$URL" --concurrency "$C" \
      --requests "$N" --max-tokens "$T" --label "llmops rep$rep" | grep -v SUMMARY
    s1=$(srv_cpu); echo "   server CPU during llmops run: $(echo "$s1 - $s0" | bc) s"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 taskset -c 0 $SG/bin/python tools/bench/run_bench_serving.py --backend sglang-oai \
      --base-url "$URL" --model zero --tokenizer "$TOK" --dataset-name random-ids \
      --random-input-len 64 --random-output-len "$T" --random-range-ratio 1.0 \
      --num-prompts "$N" --max-concurrency "$C" --request-rate inf --disable-tqdm \
      --output-file "$OUT/bench_serving.jsonl" >"$OUT/bs-$mode-rep$rep-C$C.txt" 2>&1 || true
    echo "   server CPU during bench_serving run: $(echo "$(srv_cpu) - $s1" | bc) s"
    python3 - "$OUT/bs-$mode-rep$rep-C$C.txt" "$rep" "$C" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def f(label):
    m = re.search(re.escape(label) + r"\s+([\d.]+)", text)
    return float(m.group(1)) if m else float("nan")
dur, tps, ok = f("Benchmark duration (s):"), f("Output token throughput (tok/s):"), f("Successful requests:")
cpu = re.search(r"BENCH_SERVING_PROCESS wall=([\d.]+)s cpu=([\d.]+)s", text)
print(f"bench_serving rep{sys.argv[2]} C={sys.argv[3]} ok={ok:.0f} dur={dur:.2f}s tok/s={tps:.0f} "
      f"chunk/s={tps:.0f} process_cpu={cpu.group(2) if cpu else '?'}s/wall={cpu.group(1) if cpu else '?'}s")
if ok != ok or ok == 0:
    print(text[-3000:])
PY
  done
done
kill -- -$SRV 2>/dev/null || true; SRV=; sleep 0.5
done
