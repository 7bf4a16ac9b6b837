#!/usr/bin/env bash
# Sweep wall time, stop_on_plateau vs full (docs/PERFORMANCE.md item 3): deploy the seed
# hardware (tools/bench/inventory_seed_bench.yml, profile mtp_hicache, time scale 0.1), then
# run the throughput_sweep logic at the role's default levels 1,4,8,16,32,48 (1024 tokens,
# max(2C, 8) requests per level) REPS times each way, alternating, then stop.
#   tools/bench/plateau_bench.sh [REPS]      (default 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" ANSIBLE_CONFIG="$PWD/ansible.cfg"
REPS=${1:-2}; INV=tools/bench/inventory_seed_bench.yml
OUT=${PERF_DIR:-$PWD/build/perf}/plateau; mkdir -p "$OUT"
trap 'ansible-playbook -i $INV playbooks/stop.yml >/dev/null 2>&1 || true' EXIT
ansible-playbook -i $INV playbooks/deploy.yml -e profile=mtp_hicache >"$OUT/deploy.log" 2>&1
URL=http://127.0.0.1:34200
for rep in $(seq "$REPS"); do
  for mode in full plateau; do
    extra=(); [ $mode = plateau ] && extra=(--stop-on-plateau)
    echo "== rep $rep $mode load=$(cut -d' ' -f1-3 /proc/loadavg)"
    .venv/bin/python tools/bench/sweep_cli.py "$URL" --concurrency 1 4 8 16 32 48 \
      --max-tokens 1024 --label "$mode rep$rep" --json "$OUT/$mode-rep$rep.json" "${extra[@]}"
  done
done
