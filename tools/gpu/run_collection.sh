#!/usr/bin/env bash
# Drives the REAL SGLang 0.5.17 with the collection's own playbooks on an H200 machine and
# records everything under $OUT. See docs/gpu-runs.md.
#
# usage, from the checkout root, with .gpu/ made by tools/gpu/pack.sh:
#   OUT=/some/dir bash tools/gpu/run_collection.sh 2>&1 | tee /some/dir/log.txt
# env:
#   STEPS   the steps, in order (default: "facts plan deploy status bench redeploy stop"); known:
#           facts     host_facts (nvidia-smi, then NVML) -> $OUT/host_facts_*.json
#           plan      deploy.yml --tags plan
#           deploy    deploy.yml (a cold start)
#           redeploy  deploy.yml again, nothing changed: expect changed=0 and the same pids; then
#                     host_facts with the deployment's folder: which GPU processes are its own
#           status    status.yml
#           prewarm   one sampled completion per instance (the first one stalls ~100 s when cold)
#           bench     bench.yml (run id h200-real); bench2 runs it again (run id h200-warm),
#                     bench3 .. bench9 again (h200-warm3 ..)
#           benchrate bench.yml in open-loop rate mode (run id h200-rate): RATES req/s, Poisson, seed
#                     42, LEVEL_S seconds of arrivals each, random prompts of SWEEP_IN_LEN words
#                     (the sweep's random text) and OUT_LEN output tokens, SLO $SLO,
#                     cache flushed before each level (request i is the same text at every level)
#           restart   stop.yml, then deploy.yml (a cold start of the same configuration)
#           storage   the HiCache storage tier's folders: page files, bytes, layout stamps, log lines
#           benchprefix  bench.yml (run id h200-prefix; benchprefix2 .. benchprefix4: h200-prefix2 ..),
#                     one rate level at GSP_RATE req/s of a
#                     shared_prefix workload GSP="groups per-group prefix-len suffix-len output-len",
#                     groups x per-group requests, cache flushed before the level
#           sgrate    SGLang's own bench_serving (tools/gpu/bench_serving_side.py, the release's
#                     client) at the same RATES, LEVEL_S x rate requests each, random-ids prompts of
#                     IN_LEN tokens, OUT_LEN output tokens, --flush-cache
#           sgprefix  bench_serving's generated-shared-prefix with the GSP shape at GSP_RATE
#                     (--flush-cache); every bench and bench_serving run keeps the instances'
#                     /metrics before and after it (work/metrics_*_before/after_PORT.txt)
#           generate  generate.yml over GEN_LINES lines (the sweep's default prompts in turn, OUT_LEN
#                     tokens, ignore_eos, temperature 0.6) at GEN_C requests in flight per instance
#                     -> $OUT/summary-generate.md and summary-generate.json (issue 31)
#           benchgen  bench.yml at the same shape: one level at C=GEN_C, GEN_C x 8 requests of the
#                     same prompts and OUT_LEN tokens (run id h200-gen): the peak generate.yml is
#                     compared with
#           stop      stop.yml, then anything left is killed by process group
#   PROFILE (mtp_hicache), INV (inventories/gpu), LIMIT (ansible --limit, e.g. h200-hybrid on a
#   one-GPU machine), BUDGET (seconds for the whole script, 560), XVARS (JSON extra vars for every
#   playbook, e.g. {"sglang_hicache_size_gb": 8}), BENCHVARS (JSON extra vars for bench.yml only,
#   e.g. {"sglang_bench_requests": 64}; given after the step's own vars, so it wins)
#   RATES ("2 4 8 16"), LEVEL_S (10), IN_LEN (256), OUT_LEN (256), SLO ('{"ttft_p99_ms": 200,
#   "itl_p50_ms": 20}'), GSP ("16 8 1024 64 128"), GSP_RATE (8): the shapes both clients are given;
#   SWEEP_IN_LEN (IN_LEN) and SWEEP_GSP ("prefix-len suffix-len", GSP's): the sweep's own lengths,
#   which count its generated 4-character words, not the model's tokens (bench_serving counts
#   token ids): with ../shared/gpu/real-sglang's 8000-token tokenizer a word is about 2.45 tokens,
#   so SWEEP_IN_LEN=104 SWEEP_GSP="418 26" give the prompts 256 and 1024 + 64 tokens
set -u
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$(pwd); W=$OUT/work; mkdir -p "$W"
PROFILE=${PROFILE:-mtp_hicache}; INV=${INV:-inventories/gpu}; XVARS=${XVARS:-"{}"}; BENCHVARS=${BENCHVARS:-"{}"}
STEPS=${STEPS:-"facts plan deploy status bench redeploy stop"}
RATES=${RATES:-"2 4 8 16"}; LEVEL_S=${LEVEL_S:-10}; IN_LEN=${IN_LEN:-256}; OUT_LEN=${OUT_LEN:-256}
SLO=${SLO:-'{"ttft_p99_ms": 200, "itl_p50_ms": 20}'}; GSP=${GSP:-"16 8 1024 64 128"}; GSP_RATE=${GSP_RATE:-8}
read -r G_GROUPS G_PER G_PREFIX G_SUFFIX G_OUT <<< "$GSP"
GEN_LINES=${GEN_LINES:-2000}; GEN_C=${GEN_C:-32}
SWEEP_IN_LEN=${SWEEP_IN_LEN:-$IN_LEN}; read -r S_PREFIX S_SUFFIX <<< "${SWEEP_GSP:-$G_PREFIX $G_SUFFIX}"
HERE=$(cd "$(dirname "$0")" && pwd)
LIM=(); [ -n "${LIMIT:-}" ] && LIM=(--limit "$LIMIT")
T0=$(date +%s); END=$(( T0 + ${BUDGET:-560} ))
step() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
# seconds a step may take: at most WANT, and never into the last RESERVE seconds (stop + collect)
tmo() { local want=$1 reserve=${2:-60} left; left=$(( END - $(date +%s) - reserve )); [ "$left" -lt "$want" ] && want=$left; [ "$want" -lt 5 ] && want=5; echo "$want"; }
play() { local t=$1; shift; timeout "$t" ansible-playbook -i "$INV" "${LIM[@]}" -e "$XVARS" "$@"; }
pids() { python3 - /tmp/sglang-run/*/deployment.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    try:
        manifest = json.load(open(path))
    except (OSError, ValueError):
        continue
    print(" ".join("%s=%s" % (i["name"], i["pid"]) for i in manifest["instances"]))
PY
}

step "machine"
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
grep -E 'MemTotal|MemAvailable' /proc/meminfo; nproc
python3 -c "import sys, jinja2, yaml, aiohttp; print(sys.executable, sys.version.split()[0], 'jinja2', jinja2.__version__, 'pyyaml', yaml.__version__, 'aiohttp', aiohttp.__version__)"

step "unpack ansible-core, the model folders and the SGLang site"
mkdir -p /tmp/ans && xz -dc .gpu/ansible-core-2.19.14-noarch.tar.xz | tar -C /tmp/ans -xf - || exit 1
[ -d .realsg/models ] || { mkdir -p .realsg && xz -dc .gpu/models.tar.xz | tar -C .realsg -xf -; } || exit 1
SITE=.gpu/site312.tar.xz; [ -f "$SITE" ] || SITE=.realsg/site312.tar.xz
[ -d /tmp/site/sglang ] || { mkdir -p /tmp/site && xz -T0 -dc "$SITE" | tar -C /tmp/site -xf -; } || exit 1
export PYTHONPATH=/tmp/ans PATH=/tmp/ans/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_NOCOLOR=1
ansible-playbook --version | head -1

( while :; do
    echo "$(( $(date +%s) - T0 ))s memtotal_kb=$(awk '/MemTotal/{print $2}' /proc/meminfo) memavail_kb=$(awk '/MemAvailable/{print $2}' /proc/meminfo) gpu_used_mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' '/') gpu_procs=$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ';')"
    sleep 2
  done ) > "$W/timeline.txt" 2>&1 &
SAMPLER=$!
PYI=$(command -v python3)

scrape() {  # $1: a name; each instance's /metrics -> $W/metrics_<name>_<port>.txt
  for p in 30000 30100; do curl -s -m 10 "http://127.0.0.1:$p/metrics" > "$W/metrics_$1_$p.txt" 2>/dev/null; done
}
benchplay() {  # $1: run id, $2: the step's extra vars (JSON)
  local id=$1
  step "bench $id (hosts one after another: -f 1)"
  scrape "${id}_before"
  play "$(tmo 300)" playbooks/bench.yml -f 1 -e sglang_bench_run_id="$id" -e "$2" -e "$BENCHVARS" \
    -e sglang_bench_title="SGLang 0.5.17 on NVIDIA H200 (real, random weights), $id"; echo "bench $id rc=$?"
  scrape "${id}_after"
  cp reports/gpu/"$id"/summary.md "$OUT/summary-$id.md" 2>/dev/null
}
sgbench() {  # bench_serving_side.py's arguments after the output folder
  local manifest
  manifest=${SGB_MANIFEST:-$(ls /tmp/sglang-run/*/deployment.json 2>/dev/null | head -1)}
  [ -n "$manifest" ] || { echo "bench_serving: no deployment.json"; return; }
  PYTHONPATH=/tmp/site timeout "$(tmo 300)" python3 "$HERE/bench_serving_side.py" "$manifest" "$W/sgbench" "$@"
  echo "bench_serving $1 rc=$?"
}

host_facts() {  # $1: name, then module args
  local name=$1; shift
  ANSIBLE_CALLBACK_RESULT_FORMAT=json timeout 90 ansible localhost -i "$INV" -c local \
    -e ansible_python_interpreter="$PYI" -m llmops.sglang.host_facts "$@" > "$W/host_facts_$name.txt" 2> "$W/host_facts_$name.err"
  echo "host_facts ($name) rc=$?"
  sed '1s/^[^{]*=> //' "$W/host_facts_$name.txt" > "$OUT/host_facts_$name.json"
}

for s in $STEPS; do
  case $s in
  facts)
    step "host_facts (nvidia-smi, then NVML)"
    { for f in /proc/meminfo /proc/self/cgroup /proc/1/comm /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.high /sys/fs/cgroup/memory.current; do
        echo "### $f"; cat "$f" 2>&1; done
      echo "### nvidia-smi"; nvidia-smi; } > "$W/raw_host.txt" 2>&1
    host_facts smi; host_facts nvml -a use_nvml=true;;
  plan)
    step "plan (deploy.yml --tags plan)"
    play "$(tmo 60)" playbooks/deploy.yml -e profile="$PROFILE" --tags plan; echo "plan rc=$?";;
  deploy)
    step "deploy (cold)"
    play "$(tmo 420 120)" playbooks/deploy.yml -e profile="$PROFILE"; echo "deploy rc=$?"
    echo "pids after deploy: $(pids)";;
  redeploy)
    step "deploy again (nothing changed: expect changed=0, same pids)"
    before=$(pids)
    play "$(tmo 120)" playbooks/deploy.yml -e profile="$PROFILE" | tee "$W/redeploy.log"; echo "redeploy rc=${PIPESTATUS[0]}"
    after=$(pids); echo "pids before: $before"; echo "pids after:  $after"
    [ "$before" = "$after" ] && echo "REDEPLOY SAME PIDS: yes" || echo "REDEPLOY SAME PIDS: NO"
    grep -E '^\S+ +: ok=' "$W/redeploy.log" | sed 's/^/recap: /'
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | sed 's/^/gpu process: /'
    for d in /tmp/sglang-run/*/; do host_facts "owned_$(basename "$d")" -a "deployment_dir=$d"; done
    python3 - "$OUT"/host_facts_owned_*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    f = json.load(open(path))["ansible_facts"]["sglang_host"]
    for g in f["gpus"]:
        print(f"GPU {g['index']}: busy={g['busy']} owned_by={g['owned_by']} processes={g['processes']}")
    print("deployment:", json.dumps(f["deployment"]))
PY
    ;;
  status)
    step "status"
    play "$(tmo 60)" playbooks/status.yml; echo "status rc=$?";;
  prewarm)
    step "prewarm: one sampled completion per instance, at the same time"
    WP=""
    for p in 30000 30100; do
      ( t=$(date +%s); curl -s -m "$(tmo 240 200)" http://127.0.0.1:$p/v1/completions -H 'content-type: application/json' \
          -d '{"model":"x","prompt":"Write a Python function that parses a CSV file.","max_tokens":16,"temperature":0.6,"top_p":0.95,"ignore_eos":true}' >/dev/null
        echo "prewarm $p: $(( $(date +%s) - t )) s" ) &
      WP="$WP $!"
    done
    wait $WP;;
  bench|bench[2-9])
    id=h200-real; [ "$s" = bench2 ] && id=h200-warm; case $s in bench[3-9]) id=h200-warm${s#bench};; esac
    step "bench $id (hosts one after another: -f 1)"
    play "$(tmo 300)" playbooks/bench.yml -f 1 -e sglang_bench_run_id=$id -e "$BENCHVARS" \
      -e sglang_bench_title="SGLang 0.5.17 on NVIDIA H200 (real, random weights), $id"; echo "bench $id rc=$?"
    cp reports/gpu/$id/summary.md "$OUT/summary-$id.md" 2>/dev/null
    for p in 30000 30100; do
      { curl -s "http://127.0.0.1:$p/metrics"; echo "### server_info"; curl -s "http://127.0.0.1:$p/server_info"; } > "$W/metrics_${id}_$p.txt" 2>&1
    done;;
  benchrate)
    benchplay h200-rate "$(printf '{"sglang_bench_mode": "rate", "sglang_bench_rates": [%s], "sglang_bench_arrival": "poisson", "sglang_bench_seed": 42, "sglang_bench_level_duration_s": %s, "sglang_bench_max_tokens": %s, "sglang_bench_flush_cache": true, "sglang_bench_workload": {"kind": "random", "input_len": %s, "output_len": %s}, "sglang_bench_slo": %s}' \
      "$(echo $RATES | tr ' ' ,)" "$LEVEL_S" "$OUT_LEN" "$SWEEP_IN_LEN" "$OUT_LEN" "$SLO")";;
  restart)
    step "restart: stop.yml, then deploy.yml (the same configuration: a cold start; a storage tier keeps its pages)"
    play "$(tmo 120 15)" playbooks/stop.yml; echo "restart stop rc=$?"
    play "$(tmo 420 120)" playbooks/deploy.yml -e profile="$PROFILE"; echo "restart deploy rc=$?"
    echo "pids after restart: $(pids)";;
  storage)
    step "the storage tier on disk (HiCache file backend): files, bytes, layout stamps, what the servers logged"
    for d in /tmp/sglang-run/*/hicache-storage/*/; do
      [ -d "$d" ] || continue
      echo "storage $d: $(find "$d" -name '*.bin' | wc -l) page files, $(du -sb "$d" | cut -f1) bytes, stamp $(cat "$d/.llmops-layout" 2>/dev/null)"
    done
    df -B1 /tmp | tail -1 | sed 's/^/df: /'
    grep -hiE 'storage|hicache|prefetch|backup' /tmp/sglang-run/*/gpu*/server.log 2>/dev/null | grep -v server_args= | cut -c1-240 | tail -20;;
  benchprefix|benchprefix[2-9])
    benchplay "h200-prefix${s#benchprefix}" "$(printf '{"sglang_bench_mode": "rate", "sglang_bench_rates": [%s], "sglang_bench_arrival": "poisson", "sglang_bench_seed": 42, "sglang_bench_requests": %s, "sglang_bench_max_tokens": %s, "sglang_bench_flush_cache": true, "sglang_bench_workload": {"kind": "shared_prefix", "groups": %s, "prompts_per_group": %s, "prefix_len": %s, "suffix_len": %s, "output_len": %s, "order": "shuffled"}}' \
      "$GSP_RATE" "$(( G_GROUPS * G_PER ))" "$G_OUT" "$G_GROUPS" "$G_PER" "$S_PREFIX" "$S_SUFFIX" "$G_OUT")";;
  generate)
    step "generate.yml: $GEN_LINES lines, $OUT_LEN tokens each, C=$GEN_C per instance"
    python3 - "$W/generate.jsonl" "$GEN_LINES" "$OUT_LEN" <<'PY'
import json, sys
sys.path.insert(0, "collections")
from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import DEFAULT_PROMPTS
path, lines, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "w") as fh:
    for i in range(lines):
        fh.write(json.dumps({"id": f"g{i}", "prompt": DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)], "max_tokens": out,
                             "temperature": 0.6, "ignore_eos": True}) + "\n")
PY
    play "$(tmo 420)" playbooks/generate.yml -e sglang_generate_input="$W/generate.jsonl" -e sglang_generate_job=generate \
      -e sglang_generate_concurrency="$GEN_C" -e sglang_generate_reports_dir="$ROOT/reports/gpu" \
      -e sglang_generate_fetch=false -e sglang_generate_poll=10; echo "generate rc=$?"
    cp reports/gpu/generate/generate/summary.md "$OUT/summary-generate.md" 2>/dev/null
    cp reports/gpu/generate/generate/summary.json "$OUT/summary-generate.json" 2>/dev/null;;
  benchgen)
    benchplay h200-gen "$(printf '{"sglang_bench_concurrency": [%s], "sglang_bench_requests": %s, "sglang_bench_max_tokens": %s, "sglang_bench_temperature": 0.6, "sglang_bench_ignore_eos": true}' \
      "$GEN_C" "$(( GEN_C * 8 ))" "$OUT_LEN")";;
  sgrate)
    step "bench_serving at the same rates"
    # shellcheck disable=SC2086
    sgbench rate --rates $RATES --seconds "$LEVEL_S" --input-len "$IN_LEN" --output-len "$OUT_LEN";;
  sgprefix)
    step "bench_serving generated-shared-prefix"
    sgbench prefix --rate "$GSP_RATE" --groups "$G_GROUPS" --per-group "$G_PER" --prefix-len "$G_PREFIX" \
      --suffix-len "$G_SUFFIX" --output-len "$G_OUT";;
  stop)
    step "stop"
    play "$(tmo 120 15)" playbooks/stop.yml; echo "stop rc=$?"
    for pf in /tmp/sglang-run/*/gpu*/server.pid; do
      [ -f "$pf" ] && { echo "left running: $pf"; kill -TERM -- "-$(head -1 "$pf")" 2>/dev/null; }
    done
    for i in $(seq 1 20); do
      u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' '/'); echo "after stop +${i}s: gpu_used_mib=$u"
      case $u in 0/|0/0/|[0-9]/|[0-9]/[0-9]/) break;; esac; sleep 1
    done;;
  *) echo "unknown step $s";;
  esac
done

step "collect"
kill "$SAMPLER" 2>/dev/null
for d in hybrid dense; do
  mkdir -p "$W/$d"; cp /tmp/sglang-run/$d/deployment.json "$W/$d/" 2>/dev/null
  for i in /tmp/sglang-run/$d/gpu*; do
    [ -d "$i" ] || continue; n=$(basename "$i")
    for f in server.log launch.sh env; do cp "$i/$f" "$W/$d/$n-$f" 2>/dev/null; done
  done
done
for id in h200-real h200-warm h200-rate h200-prefix h200-prefix2 h200-prefix3 h200-prefix4; do cp -rL reports/gpu/$id "$W/report-$id" 2>/dev/null; done
echo "--- server log key lines"
grep -hE 'max_total_num_tokens|Allocating|Mamba Cache|fired up|Tree cache|deprecat|Error|error' "$W"/*/*-server.log | grep -v server_args= | cut -c1-220 | head -30
tail -3 "$W/timeline.txt"
tar -C "$OUT" -czf "$OUT/run.tar.gz" work && rm -rf "$W"
ls -la "$OUT"
step "done"
