#!/usr/bin/env bash
# The router role's systemd backend under a real systemd (Debian bookworm, systemd 252, in
# systemd-nspawn), booted as boot_and_deploy.sh boots it (see README.md here), with the servers
# on systemd too: deploy.yml --check on a fresh host, deploy (sglang-router==0.3.2 installed by
# the role from PyPI, run as the user sglang-router by sglang-router.service), the router lists
# both instances healthy, an idempotent re-deploy (same MainPID), status.yml, a changed router
# setting (restarted, workers kept), stop.yml (unit stopped and disabled, its cgroup empty).
# Needs root and the root file system boot_and_deploy.sh builds (run that once first); it is
# copied to SD_ROOTFS so that both scripts can run side by side (their own machine names).
# Usage: sudo tools/systemd/router_under_systemd.sh     Exit status: 0 when every check passed.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ROOTFS=${SD_ROOTFS:-/var/tmp/sglang-sd-router-root}
SOURCE_ROOTFS=${SD_SOURCE_ROOTFS:-/var/tmp/sglang-sd-root}   # boot_and_deploy.sh's, copied once
MACHINE=${SD_MACHINE:-sglang-sd-router}
LOG_DIR=${SD_LOG_DIR:-$REPO/.run/systemd-router}
VENV=/opt/ansible-venv
CGNAME="sglang-sd-$MACHINE"
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
mkdir -p "$LOG_DIR" && rm -f "$LOG_DIR"/*
if [ ! -e "$ROOTFS/.sglang-sd-ready" ]; then
  [ -e "$SOURCE_ROOTFS/.sglang-sd-ready" ] || { echo "no $SOURCE_ROOTFS: run tools/systemd/boot_and_deploy.sh once" >&2; exit 2; }
  rm -rf "$ROOTFS" && cp -a "$SOURCE_ROOTFS" "$ROOTFS"
fi
NSPAWN_PID=""; LEADER=""; FAILS=0
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$LOG_DIR/summary.txt"; }
pass() { log "PASS  $*"; }
fail() { log "FAIL  $*"; FAILS=$((FAILS + 1)); }
cgroup_roots() { local d; for d in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do [ -e "$d/cgroup.procs" ] && echo "$d"; done; }
cleanup() {
  local rc=$?
  if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    kill -TERM "$NSPAWN_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$NSPAWN_PID" 2>/dev/null && kill -KILL "$NSPAWN_PID" 2>/dev/null
    wait "$NSPAWN_PID" 2>/dev/null
  fi
  local root; for root in $(cgroup_roots); do [ -d "$root/$CGNAME" ] && find "$root/$CGNAME" -depth -type d -exec rmdir {} \; 2>/dev/null; done
  rm -rf "/run/systemd/nspawn/propagate/$MACHINE" 2>/dev/null
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/" 2>/dev/null || true
(
  for root in $(cgroup_roots); do mkdir -p "$root/$CGNAME" && echo $BASHPID >"$root/$CGNAME/cgroup.procs"; done
  cd /
  exec env SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 systemd-nspawn -D "$ROOTFS" --machine="$MACHINE" --register=no --keep-unit \
    --bind-ro="$REPO":/srv/collection -b </dev/null
) >"$LOG_DIR/console.log" 2>&1 &
NSPAWN_PID=$!
state=""
for _ in $(seq 1 120); do
  kill -0 "$NSPAWN_PID" 2>/dev/null || break
  for c in $(pgrep -P "$NSPAWN_PID"); do [ "$(cat /proc/"$c"/comm 2>/dev/null)" = systemd ] && LEADER=$c; done
  if [ -n "$LEADER" ]; then state=$(nsenter -t "$LEADER" -a systemctl is-system-running 2>/dev/null); case $state in running|degraded) break ;; esac; fi
  sleep 0.5
done
case $state in running|degraded) log "booted: leader $LEADER, $state" ;; *) log "no boot"; tail -20 "$LOG_DIR/console.log"; exit 2 ;; esac
C() { nsenter -t "$LEADER" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 SYSTEMD_COLORS=0 SYSTEMD_PAGER= "$@"; }
C update-ca-certificates >/dev/null 2>&1
log "inside: $(C systemctl --version | head -1); $(C "$VENV/bin/ansible" --version | head -1)"
mkdir -p "$ROOTFS/root/sgtest"
cat >"$ROOTFS/root/sgtest/inventory.yml" <<EOF
all:
  children:
    sglang_servers:
      hosts:
        localhost:
    sglang_routers:
      hosts:
        localhost:
  vars:
    ansible_connection: local
    ansible_python_interpreter: $VENV/bin/python
    sglang_engine: sim
    sglang_version: "0.5.23"
    sglang_declared_gpus: [{name: NVIDIA H200, memory_mib: 143771, count: 2}]
    sglang_model_path: /srv/collection/data/models/qwen3.6-27b
    sglang_base_dir: /srv/sglang
    sglang_install: false
    sglang_python: $VENV/bin/python
    sglang_user: ""
    sglang_create_user: false
    sglang_base_port: 32700
    sglang_service_manager: systemd
    sglang_sim_time_scale: 0.005
    sglang_stop_timeout: 15
    sglang_ready_interval: 0.5
    # the router: installed by the role from PyPI, its own user, systemd (auto)
    sglang_router_port: 32950
    sglang_router_prometheus_port: 32951
    sglang_router_venv_python: python3
EOF
cat >"$ROOTFS/root/sgtest/play.sh" <<EOF
#!/bin/sh
export ANSIBLE_CONFIG=/srv/collection/ansible.cfg ANSIBLE_CACHE_PLUGIN=memory ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
export ANSIBLE_COLLECTIONS_PATH=/srv/collection/collections
cd /srv/collection
pb=\$1; shift
exec $VENV/bin/ansible-playbook -i /root/sgtest/inventory.yml playbooks/\$pb "\$@"
EOF
chmod +x "$ROOTFS/root/sgtest/play.sh"
N=0
play() { local name=$1; shift; N=$((N + 1)); RUN_LOG="$LOG_DIR/$(printf %02d $N)-$name.log"; local t0; t0=$(date +%s)
  C /root/sgtest/play.sh "$@" >"$RUN_LOG" 2>&1; RUN_RC=$?
  RUN_CHANGED=$(sed -nE 's/^localhost +: ok=[0-9]+ +changed=([0-9]+).*/\1/p' "$RUN_LOG" | tail -1)
  log "play  $name: $* -> rc=$RUN_RC changed=${RUN_CHANGED:-?} in $(( $(date +%s) - t0 )) s"; }
rpid() { C systemctl show -p MainPID --value sglang-router.service; }
workers() { C "$VENV/bin/python" -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:32950/workers").read().decode())'; }
wlist() { workers | C "$VENV/bin/python" -c 'import json,sys; print(" ".join(sorted(w["url"]+("+" if w["is_healthy"] else "-") for w in json.load(sys.stdin)["workers"])))'; }

# a fresh host: nothing of a previous run of this script
C sh -c 'systemctl stop sglang-router.service "sglang@*.service"; systemctl disable sglang-router.service sglang@gpu0.service sglang@gpu1.service;
         rm -rf /srv/sglang /opt/sglang-router /etc/systemd/system/sglang@.service /etc/systemd/system/sglang-router.service; systemctl daemon-reload' >/dev/null 2>&1

play check-fresh deploy.yml --check
[ "$RUN_RC" = 0 ] && pass "--check on a fresh host" || fail "--check: $(grep -m1 -A3 '^fatal' "$RUN_LOG")"
C test -e /etc/systemd/system/sglang-router.service && fail "--check wrote the unit" || pass "--check left no router unit"

play deploy deploy.yml
[ "$RUN_RC" = 0 ] && pass "first deploy (router installed from PyPI)" || { fail "deploy: $(grep -m1 -A5 '^fatal' "$RUN_LOG")"; exit 1; }
st=$(C systemctl is-active sglang-router.service); en=$(C systemctl is-enabled sglang-router.service)
[ "$st" = active ] && [ "$en" = enabled ] && pass "sglang-router.service $st, $en" || fail "sglang-router.service $st $en"
P1=$(rpid); log "router MainPID $P1, user $(C ps -o user= -p "$P1"), cmdline: $(C cat /proc/"$P1"/cmdline | tr '\0' ' ' | tr -s ' ')"
C systemctl status --no-pager --lines=3 sglang-router.service >"$LOG_DIR/router-status.txt" 2>&1
W1=$(wlist); log "workers: $W1"
[ "$W1" = "http://127.0.0.1:32700+ http://127.0.0.1:32701+" ] && pass "router lists both instances, healthy" || fail "workers: $W1"

play again deploy.yml
[ "$RUN_RC" = 0 ] && [ "$RUN_CHANGED" = 0 ] && pass "re-deploy: changed=0" || fail "re-deploy rc=$RUN_RC changed=$RUN_CHANGED"
[ "$(rpid)" = "$P1" ] && pass "router kept its MainPID" || fail "router MainPID $(rpid) != $P1"

play status status.yml
tr -s ' \n' ' ' <"$RUN_LOG" | grep -q "running (systemd, pid $P1), health 200, readiness 200" && pass "status.yml: router running, healthy, ready" || fail "status.yml"

play change deploy.yml -e sglang_router_policy=round_robin
[ "$RUN_RC" = 0 ] && pass "changed policy: deploy ok (changed=$RUN_CHANGED)" || fail "change: $(grep -m1 -A5 '^fatal' "$RUN_LOG")"
P2=$(rpid); [ "$P2" != "$P1" ] && pass "router restarted ($P1 -> $P2)" || fail "router not restarted"
W2=$(wlist); [ "$W2" = "$W1" ] && pass "workers kept across the restart: $W2" || fail "workers after restart: $W2"
C systemctl show -p NRestarts --value sglang-router.service | grep -qx 0 && pass "NRestarts 0 (no crash loop)" || fail "NRestarts"

play stop stop.yml
st=$(C systemctl is-active sglang-router.service); en=$(C systemctl is-enabled sglang-router.service)
[ "$st" != active ] && [ "$en" = disabled ] && pass "stop: sglang-router.service $st, $en" || fail "stop: $st $en"
n=$(find /sys/fs/cgroup/$CGNAME -path '*sglang-router.service*' -name cgroup.procs -exec cat {} + 2>/dev/null | wc -l)
[ "$n" = 0 ] && pass "nothing left in the router's control group" || fail "$n processes left"
log "done: $FAILS failure(s)"
exit $((FAILS > 0))
