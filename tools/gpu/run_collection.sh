#!/usr/bin/env bash
# Drives the REAL SGLang 0.5.17 with the collection's own playbooks on a 2x H200 machine:
# host_facts -> deploy.yml --tags plan -> deploy.yml -> status.yml -> bench.yml -> deploy.yml
# again (idempotence) -> stop.yml, recording everything under $OUT. See docs/gpu-runs.md.
#
# usage, from the checkout root, with .realsg/site312.tar.xz (build.sh) and .gpu/ (pack.sh):
#   OUT=/some/dir bash tools/gpu/run_collection.sh 2>&1 | tee /some/dir/log.txt
# env: PROFILE (mtp_hicache), INV (inventories/gpu), BUDGET (seconds for the whole script, 560),
#      XVARS (extra vars for every playbook, JSON; e.g. a local rehearsal with the embedded engine),
#      QUICK=1 (skip host_facts, --tags plan and the second deploy), PREWARM=1 (one sampled request
#      per instance before the bench: the first one stalls ~100 s on a fresh machine)
set -u
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8 LANG=C.UTF-8
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$(pwd); W=$OUT/work; mkdir -p "$W"
PROFILE=${PROFILE:-mtp_hicache}; INV=${INV:-inventories/gpu}; XVARS=${XVARS:-"{}"}
T0=$(date +%s); END=$(( T0 + ${BUDGET:-560} ))
step() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
# seconds a step may take: at most WANT, and never into the last RESERVE seconds (stop + collect)
tmo() { local want=$1 reserve=${2:-60} left; left=$(( END - $(date +%s) - reserve )); [ "$left" -lt "$want" ] && want=$left; [ "$want" -lt 5 ] && want=5; echo "$want"; }

step "machine"
nvidia-smi --query-gpu=index,name,memory.used,memory.total,driver_version --format=csv,noheader
grep -E 'MemTotal|MemAvailable' /proc/meminfo; nproc
python3 -c "import sys, jinja2, yaml, aiohttp; print(sys.executable, sys.version.split()[0], 'jinja2', jinja2.__version__, 'pyyaml', yaml.__version__, 'aiohttp', aiohttp.__version__)"

step "unpack ansible-core, the model folders and the SGLang site"
mkdir -p /tmp/ans && xz -dc .gpu/ansible-core-2.19.14-noarch.tar.xz | tar -C /tmp/ans -xf - || exit 1
[ -d .realsg/models ] || { mkdir -p .realsg && xz -dc .gpu/models.tar.xz | tar -C .realsg -xf -; } || exit 1
[ -d /tmp/site/sglang ] || { mkdir -p /tmp/site && xz -dc .realsg/site312.tar.xz | tar -C /tmp/site -xf -; } || exit 1
export PYTHONPATH=/tmp/ans PATH=/tmp/ans/bin:$PATH ANSIBLE_CONFIG=$ROOT/ansible.cfg ANSIBLE_NOCOLOR=1
ansible-playbook --version | head -1

( while :; do
    echo "$(( $(date +%s) - T0 ))s memtotal_kb=$(awk '/MemTotal/{print $2}' /proc/meminfo) memavail_kb=$(awk '/MemAvailable/{print $2}' /proc/meminfo) gpu_used_mib=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' '/')"
    sleep 2
  done ) > "$W/timeline.txt" 2>&1 &
SAMPLER=$!

if [ "${QUICK:-0}" != 1 ]; then
step "host_facts (nvidia-smi, then NVML)"
{ for f in /proc/meminfo /proc/self/cgroup /proc/1/comm /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.high /sys/fs/cgroup/memory.current; do
    echo "### $f"; cat "$f" 2>&1; done
  echo "### /run/systemd/system"; ls -d /run/systemd/system 2>&1
  echo "### nvidia-smi query"; nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,driver_version,compute_cap,mig.mode.current --format=csv,noheader,nounits
  echo "### nvidia-smi"; nvidia-smi; echo "### topo"; nvidia-smi topo -m; } > "$W/raw_host.txt" 2>&1
PYI=$(command -v python3)
# ansible-core 2.19 has no json stdout callback (it is in ansible.posix): the default callback
# with callback_result_format=json prints "localhost | SUCCESS => {...}"; strip the prefix.
for v in smi nvml; do
  a=""; [ $v = nvml ] && a="-a use_nvml=true"
  ANSIBLE_CALLBACK_RESULT_FORMAT=json timeout 90 ansible localhost -i "$INV" -c local \
    -e ansible_python_interpreter="$PYI" -m llmops.sglang.host_facts $a > "$W/host_facts_$v.txt" 2> "$W/host_facts_$v.err"
  echo "host_facts ($v) rc=$?"
  sed '1s/^[^{]*=> //' "$W/host_facts_$v.txt" > "$OUT/host_facts_$v.json"
done
python3 - "$OUT/host_facts_smi.json" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))["ansible_facts"]["sglang_host"]
print(json.dumps({k: f.get(k) for k in ("gpu_source", "gpu_count", "driver_version", "cuda_version", "memory", "cpu_count", "numa_nodes", "service_manager")}, indent=1))
PY

step "plan (deploy.yml --tags plan)"
timeout "$(tmo 60)" ansible-playbook -i "$INV" -e "$XVARS" playbooks/deploy.yml -e profile="$PROFILE" --tags plan; echo "plan rc=$?"

fi

step "deploy"
timeout "$(tmo 420 90)" ansible-playbook -i "$INV" -e "$XVARS" playbooks/deploy.yml -e profile="$PROFILE"; echo "deploy rc=$?"

step "status"
timeout "$(tmo 60)" ansible-playbook -i "$INV" -e "$XVARS" playbooks/status.yml; echo "status rc=$?"

if [ "${PREWARM:-0}" = 1 ]; then
  step "prewarm: one sampled completion per instance, at the same time"
  WP=""
  for p in 30000 30100; do
    ( t=$(date +%s); curl -s -m "$(tmo 240 200)" http://127.0.0.1:$p/v1/completions -H 'content-type: application/json' \
        -d '{"model":"x","prompt":"Write a Python function that parses a CSV file.","max_tokens":16,"temperature":0.6,"top_p":0.95,"ignore_eos":true}' >/dev/null
      echo "prewarm $p: $(( $(date +%s) - t )) s" ) &
    WP="$WP $!"
  done
  wait $WP
fi

step "bench (hosts one after another: -f 1)"
timeout "$(tmo 200)" ansible-playbook -i "$INV" -e "$XVARS" playbooks/bench.yml -f 1 -e sglang_bench_run_id=h200-real \
  -e sglang_bench_title="SGLang 0.5.17 on NVIDIA H200 (real, random weights)"; echo "bench rc=$?"
cp reports/gpu/h200-real/summary.md "$OUT/summary.md" 2>/dev/null
for p in 30000 30100; do
  { curl -s "http://127.0.0.1:$p/metrics" | grep -E '^sglang:(spec_accept|hicache|num_running|token_usage|cache_hit)'; curl -s "http://127.0.0.1:$p/server_info"; } > "$W/metrics_$p.txt" 2>&1
done

if [ "${QUICK:-0}" != 1 ] && [ $(( END - $(date +%s) )) -gt 150 ]; then
  step "deploy again (nothing changed: expect changed=0, same pids)"
  timeout "$(tmo 90)" ansible-playbook -i "$INV" -e "$XVARS" playbooks/deploy.yml -e profile="$PROFILE"; echo "redeploy rc=$?"
fi

step "stop"
timeout "$(tmo 120 15)" ansible-playbook -i "$INV" -e "$XVARS" playbooks/stop.yml; echo "stop rc=$?"
for pf in /tmp/sglang-run/*/gpu*/server.pid; do
  [ -f "$pf" ] && { echo "left running: $pf"; kill -TERM -- "-$(cat "$pf")" 2>/dev/null; }
done
for i in $(seq 1 20); do
  u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | tr '\n' '/'); echo "after stop +${i}s: gpu_used_mib=$u"
  case $u in 0/0/|[0-9]/[0-9]/) break;; esac; sleep 1
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
cp -rL reports/gpu/h200-real "$W/report" 2>/dev/null
echo "--- hybrid server log, key lines"
grep -hE 'max_total_num_tokens|Allocating|Mamba Cache|fired up|Tree cache|deprecat|Error|error' "$W"/hybrid/*-server.log | grep -v server_args= | cut -c1-220 | head -30
echo "--- dense server log, key lines"
grep -hE 'max_total_num_tokens|fired up|Error|error' "$W"/dense/*-server.log | grep -v server_args= | cut -c1-220 | head -10
tail -3 "$W/timeline.txt"
tar -C "$OUT" -czf "$OUT/run.tar.gz" work && rm -rf "$W"
ls -la "$OUT"
step "done"
