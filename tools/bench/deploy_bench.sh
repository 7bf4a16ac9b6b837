#!/usr/bin/env bash
# Deploy wall time for 4 embedded-engine instances (docs/PERFORMANCE.md, item 1).
#   tools/bench/deploy_bench.sh [TIME_SCALE] [SCENARIOS...]
# SCENARIOS: profile:policy, default "mtp:parallel baseline:parallel mtp_hicache:serial
# mtp_hicache:parallel". Each: clean base dir, cold deploy (timed), no-change re-run (timed),
# stop. Results: $PERF_DIR/deploy-results/<scenario>.{log,json} (PERF_DIR: build/perf in the
# checkout by default, git-ignored) and a summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg"
export ANSIBLE_CALLBACK_PLUGINS="$PWD/tools/bench" ANSIBLE_CALLBACKS_ENABLED=task_timer
INV=tools/bench/inventory_deploy4.yml
export PERF_DIR=${PERF_DIR:-$PWD/build/perf}
BASE=$PERF_DIR/deploy4
OUT=$PERF_DIR/deploy-results
SCALE=${1:-0.13}; shift || true
SCEN=("$@"); [ ${#SCEN[@]} -gt 0 ] || SCEN=(mtp:parallel baseline:parallel mtp_hicache:serial mtp_hicache:parallel)
mkdir -p "$OUT"
stop() { ansible-playbook -i $INV playbooks/stop.yml >/dev/null 2>&1 || true; }
trap stop EXIT
recap() { grep -o 'changed=[0-9]*' "$1" | tail -1; }
for sc in "${SCEN[@]}"; do
  prof=${sc%%:*}; pol=${sc##*:}; tag="${prof}-${pol}"
  stop; rm -rf "$BASE"
  t0=$(date +%s.%N)
  LLMOPS_TASK_TIMES=$OUT/$tag.cold.tasks.json ansible-playbook -i $INV playbooks/deploy.yml \
    -e profile="$prof" -e sglang_start_policy="$pol" -e sglang_sim_time_scale="$SCALE" >"$OUT/$tag.cold.log" 2>&1
  t1=$(date +%s.%N)
  LLMOPS_TASK_TIMES=$OUT/$tag.rerun.tasks.json ansible-playbook -i $INV playbooks/deploy.yml \
    -e profile="$prof" -e sglang_start_policy="$pol" -e sglang_sim_time_scale="$SCALE" >"$OUT/$tag.rerun.log" 2>&1
  t2=$(date +%s.%N)
  .venv/bin/python tools/bench/modelled_startup.py "$BASE" >"$OUT/$tag.startup.json"
  L=$(.venv/bin/python -c "import json,sys;d=json.load(open('$OUT/$tag.startup.json'));v=[i['measured_L_s'] for i in d.values()];print(f'{min(v):.0f}-{max(v):.0f}', f'{sum(v)/len(v):.1f}', f\"{d['gpu0']['modelled_ready_s']}\")")
  read -r Lrange Lmean Lmod <<<"$L"
  cold=$(echo "$t1 - $t0" | bc); rerun=$(echo "$t2 - $t1" | bc)
  printf '%-22s scale=%s modelled=%ss L=%s (mean %s) cold=%.1fs (%s, %.2f L) rerun=%.1fs (%s) load=%s\n' \
    "$tag" "$SCALE" "$Lmod" "$Lrange" "$Lmean" "$cold" "$(recap "$OUT/$tag.cold.log")" \
    "$(echo "$cold / $Lmean" | bc -l)" "$rerun" "$(recap "$OUT/$tag.rerun.log")" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
done
