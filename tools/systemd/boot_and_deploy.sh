#!/usr/bin/env bash
# Boot a real systemd (Debian bookworm, systemd 252) in a systemd-nspawn container and run the
# server role's systemd backend (sglang@.service, embedded "sim" engine) inside it for real:
# deploy, status, idempotent re-deploy, serial restart after a change, crash detection, stop,
# and `sglang_service_manager: auto` detection.
#
# Written for a host WITHOUT systemd as PID 1 (a CI VM / container host): the container is not
# registered with systemd-machined (--register=no --keep-unit) and commands get in through
# nsenter(1) into the container's PID 1 namespaces, not machinectl / systemd-run -M.
# (On a host whose PID 1 is systemd the same flags work; not tested there.)
#
# Needs: root, CAP_SYS_ADMIN, cgroup2 mounted (pure v2 at /sys/fs/cgroup, or hybrid with
#   /sys/fs/cgroup/unified), apt-get (systemd-container + debootstrap are installed when missing),
#   a Debian mirror and PyPI reachable (pip runs inside the container on the host's network; the
#   host's extra CAs from /usr/local/share/ca-certificates are trusted inside too), ~600 MB disk.
# Takes (measured on a 2-vCPU Firecracker VM): debootstrap ~50 s (first run only; the rootfs is
#   kept and reused), boot ~1-2 s, venv ~5-10 s (first run only), the play sequence ~2 min
#   (of which 30 s is the crash-detection timeout).
#
# Usage:  sudo tools/systemd/boot_and_deploy.sh
# Environment (all optional):
#   SD_ROOTFS=/var/tmp/sglang-sd-root   kept between runs (delete it to rebuild)
#   SD_MACHINE=sglang-sd                container name
#   SD_CGROUP=unified|hybrid            cgroup layout inside the container (default unified:
#                                       SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1; hybrid = nspawn's
#                                       choice on a hybrid host)
#   SD_MIRROR=http://deb.debian.org/debian
#   SD_BASE_PORT=32000                  ports base..base+1 and base+1000.. inside (host network)
#   SD_LOG_DIR=<checkout>/.run/systemd  console log and per-play logs
#   SD_KEEP=1                           leave the container running at exit (default: shut down)
# Exit status: 0 when every check passed; 1 when a check failed (each FAIL line names it);
# 2 when the container could not be booted.
# The container and the cgroups it created are removed on exit, also after a failure or ^C.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ROOTFS=${SD_ROOTFS:-/var/tmp/sglang-sd-root}
MACHINE=${SD_MACHINE:-sglang-sd}
CGMODE=${SD_CGROUP:-unified}
MIRROR=${SD_MIRROR:-http://deb.debian.org/debian}
BASE_PORT=${SD_BASE_PORT:-32000}
LOG_DIR=${SD_LOG_DIR:-$REPO/.run/systemd}
KEEP=${SD_KEEP:-0}
VENV=/opt/ansible-venv                       # inside the container
PIP_PKGS=(ansible-core==2.19.14 aiohttp==3.14.5 PyYAML==6.0.3 "jinja2>=3.1,<4")

[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 2; }
mkdir -p "$LOG_DIR" && rm -f "$LOG_DIR"/*.log "$LOG_DIR"/*.txt
FAILS=0
NSPAWN_PID=""
LEADER=""
CGNAME="sglang-sd-$MACHINE"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$LOG_DIR/summary.txt"; }
pass() { log "PASS  $*"; }
fail() { log "FAIL  $*"; FAILS=$((FAILS + 1)); }

# ---------------------------------------------------------------- cleanup (always)
cgroup_roots() {  # the writable hierarchies nspawn uses: unified and name=systemd
  local d
  for d in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/systemd; do
    [ -e "$d/cgroup.procs" ] && echo "$d"
  done
}
cleanup() {
  local rc=$?
  if [ "$KEEP" = 1 ] && [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    log "SD_KEEP=1: container left running (nspawn pid $NSPAWN_PID, leader $LEADER)"
    exit $rc
  fi
  if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    kill -TERM "$NSPAWN_PID" 2>/dev/null       # nspawn: SIGTERM = orderly poweroff of the container
    for _ in $(seq 1 100); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$NSPAWN_PID" 2>/dev/null && kill -KILL "$NSPAWN_PID" 2>/dev/null
    wait "$NSPAWN_PID" 2>/dev/null
  fi
  local root
  for root in $(cgroup_roots); do
    [ -d "$root/$CGNAME" ] && find "$root/$CGNAME" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  rm -rf "/run/systemd/nspawn/propagate/$MACHINE" 2>/dev/null
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- 0. host tools
log "=== systemd backend under a real systemd: $REPO @ $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)"
log "host: PID 1 = $(cat /proc/1/comm), kernel $(uname -r), /sys/fs/cgroup = $(stat -fc %T /sys/fs/cgroup)"
if ! command -v systemd-nspawn >/dev/null || ! command -v debootstrap >/dev/null; then
  t=$(now)
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container debootstrap \
    >"$LOG_DIR/apt.log" 2>&1 || { log "apt-get install systemd-container debootstrap failed (see apt.log)"; exit 2; }
  log "installed systemd-container debootstrap in $(since "$t") s"
fi

# ---------------------------------------------------------------- 1. root file system
if [ ! -e "$ROOTFS/.sglang-sd-ready" ]; then
  t=$(now)
  rm -rf "$ROOTFS"
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,python3,python3-venv,ca-certificates,procps,iproute2 \
    bookworm "$ROOTFS" "$MIRROR" >"$LOG_DIR/debootstrap.log" 2>&1 \
    || { log "debootstrap failed (see debootstrap.log)"; exit 2; }
  touch "$ROOTFS/.sglang-sd-ready"
  log "debootstrap bookworm -> $ROOTFS in $(since "$t") s"
else
  log "reusing $ROOTFS (delete it to rebuild)"
fi
# trust the host's extra CAs (TLS-intercepting egress proxies) inside the container
cp /usr/local/share/ca-certificates/*.crt "$ROOTFS/usr/local/share/ca-certificates/" 2>/dev/null || true

# ---------------------------------------------------------------- 2. boot
NSPAWN_ARGS=(-D "$ROOTFS" --machine="$MACHINE" --register=no --keep-unit
             --bind-ro="$REPO":/srv/collection -b)
NSPAWN_ENV=()
[ "$CGMODE" = unified ] && NSPAWN_ENV=(SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1)
log "boot: ${NSPAWN_ENV[*]} systemd-nspawn ${NSPAWN_ARGS[*]}"
t=$(now)
(
  # A cgroup of its own in the hierarchies nspawn writes to (it creates payload/ and
  # supervisor/ under the cgroup it runs in): removed on exit.
  for root in $(cgroup_roots); do
    mkdir -p "$root/$CGNAME" && echo $BASHPID >"$root/$CGNAME/cgroup.procs"
  done
  cd /
  exec env "${NSPAWN_ENV[@]}" systemd-nspawn "${NSPAWN_ARGS[@]}" </dev/null
) >"$LOG_DIR/console.log" 2>&1 &
NSPAWN_PID=$!
state=""
for _ in $(seq 1 120); do
  kill -0 "$NSPAWN_PID" 2>/dev/null || break
  for c in $(pgrep -P "$NSPAWN_PID"); do [ "$(cat /proc/"$c"/comm 2>/dev/null)" = systemd ] && LEADER=$c; done
  if [ -n "$LEADER" ]; then
    state=$(nsenter -t "$LEADER" -a systemctl is-system-running 2>/dev/null)
    case $state in running|degraded) break ;; esac
  fi
  sleep 0.5
done
case $state in
  running|degraded) log "booted in $(since "$t") s: leader pid $LEADER (host), system state $state" ;;
  *) log "container did not boot (state '${state:-none}'); console:"; tail -30 "$LOG_DIR/console.log" | tee -a "$LOG_DIR/summary.txt"; exit 2 ;;
esac

# run a command inside the container, as root, with a clean environment
C() { nsenter -t "$LEADER" -a env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 SYSTEMD_COLORS=0 SYSTEMD_PAGER= "$@"; }
log "inside: $(C systemctl --version | head -1); cgroup fs $(C stat -fc %T /sys/fs/cgroup); failed units: $(C systemctl --failed --plain --no-legend | wc -l)"

# ---------------------------------------------------------------- 3. ansible inside
t=$(now)
C update-ca-certificates >/dev/null 2>&1
if ! C "$VENV/bin/python" -c 'import ansible, aiohttp' 2>/dev/null; then
  C python3 -m venv "$VENV" && C "$VENV/bin/pip" install -q --disable-pip-version-check "${PIP_PKGS[@]}" \
    >"$LOG_DIR/pip.log" 2>&1 || { log "pip install in the container failed (see pip.log)"; exit 2; }
  log "venv $VENV with ${PIP_PKGS[*]} in $(since "$t") s"
fi
log "inside: $(C "$VENV/bin/ansible" --version | head -1)"

mkdir -p "$ROOTFS/root/sgtest"
cat >"$ROOTFS/root/sgtest/inventory.yml" <<EOF
# what tests/integration/conftest.py make_inventory builds, with sglang_service_manager: systemd
all:
  children:
    sglang_servers:
      hosts:
        localhost:
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
          sglang_base_port: $BASE_PORT
          sglang_service_manager: systemd
          sglang_sim_time_scale: 0.005
          sglang_stop_timeout: 15
          sglang_ready_interval: 0.5
EOF
cat >"$ROOTFS/root/sgtest/play.sh" <<EOF
#!/bin/sh
# ansible-playbook inside the container, against the read-only checkout at /srv/collection
export ANSIBLE_CONFIG=/srv/collection/ansible.cfg ANSIBLE_CACHE_PLUGIN=memory ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
export ANSIBLE_COLLECTIONS_PATH=/srv/collection/collections
cd /srv/collection
pb=\$1; shift
exec $VENV/bin/ansible-playbook -i /root/sgtest/inventory.yml playbooks/\$pb "\$@"
EOF
chmod +x "$ROOTFS/root/sgtest/play.sh"

# ---------------------------------------------------------------- helpers for the checks
N=0
RUN_RC=0; RUN_CHANGED=""; RUN_LOG=""
play() {  # play NAME PLAYBOOK [args]: runs it, logs to LOG_DIR/NN-NAME.log, sets RUN_*
  local name=$1; shift
  N=$((N + 1)); RUN_LOG="$LOG_DIR/$(printf %02d $N)-$name.log"
  local t0; t0=$(now)
  C /root/sgtest/play.sh "$@" >"$RUN_LOG" 2>&1; RUN_RC=$?
  RUN_CHANGED=$(sed -nE 's/^localhost +: ok=[0-9]+ +changed=([0-9]+).*/\1/p' "$RUN_LOG" | tail -1)
  log "play  $name: $* -> rc=$RUN_RC changed=${RUN_CHANGED:-?} in $(since "$t0") s ($(basename "$RUN_LOG"))"
}
mainpids() { C systemctl show -p MainPID --value sglang@gpu0.service sglang@gpu1.service | grep -v '^$' | paste -sd' '; }
unit_procs() {  # host view of the processes left in the units' control groups (cgroup2)
  local f n=0 root=/sys/fs/cgroup
  [ -e /sys/fs/cgroup/unified/cgroup.procs ] && root=/sys/fs/cgroup/unified
  while read -r f; do n=$((n + $(wc -l <"$f"))); done < <(find "$root/$CGNAME" -path '*sglang@*' -name cgroup.procs 2>/dev/null)
  echo $n
}
manifest() { C "$VENV/bin/python" -c "import json,sys; d=json.load(open('/srv/sglang/deployment.json')); $1"; }
mono_us() { C systemctl show -p "$2" --value "$1"; }

# ---------------------------------------------------------------- 4. the sequence
# a fresh host: nothing of a previous run of this script
C sh -c 'systemctl stop "sglang@*.service"; systemctl disable sglang@gpu0.service sglang@gpu1.service;
         rm -rf /srv/sglang /etc/systemd/system/sglang@.service; systemctl daemon-reload' >/dev/null 2>&1

# 4a. --check on a fresh host: prints the plan, changes nothing
play check-fresh deploy.yml --check
if [ "$RUN_RC" = 0 ]; then pass "deploy.yml --check on a fresh host"
else fail "deploy.yml --check on a fresh host: $(grep -m1 '^\[ERROR\]' "$RUN_LOG")"; fi
C test -e /etc/systemd/system/sglang@.service && fail "--check installed the unit file" || pass "--check left no unit file"

# 4a. first deploy on a fresh host
play deploy-fresh deploy.yml
if [ "$RUN_RC" = 0 ]; then
  pass "first deploy on a fresh host"
else
  fail "first deploy on a fresh host: $(grep -m1 '^\[ERROR\]' "$RUN_LOG")"
  play deploy-fresh-retry deploy.yml
  [ "$RUN_RC" = 0 ] && log "NOTE  the same deploy run again succeeds (nothing changed any more, so no stop handler)"
fi
[ "$RUN_RC" = 0 ] || { fail "deploy does not work at all; stopping here"; exit 1; }

for i in gpu0 gpu1; do
  st=$(C systemctl is-active "sglang@$i.service"); en=$(C systemctl is-enabled "sglang@$i.service")
  [ "$st" = active ] && [ "$en" = enabled ] && pass "sglang@$i: $st, $en" || fail "sglang@$i: $st, $en"
done
PIDS1=$(mainpids); log "MainPIDs: $PIDS1"
C systemctl status --no-pager --lines=0 sglang@gpu0.service sglang@gpu1.service >"$LOG_DIR/systemctl-status.txt" 2>&1
C systemd-cgls --no-pager -u system-sglang.slice >"$LOG_DIR/cgls.txt" 2>&1
log "control groups: $(C systemctl show -p ControlGroup --value sglang@gpu0.service), processes in the units' cgroups (host view): $(unit_procs)"
sed 's/^/      /' "$LOG_DIR/cgls.txt" | cut -c1-120 | tee -a "$LOG_DIR/summary.txt" >/dev/null
sm=$(manifest 'print(d["service_manager"])')
[ "$sm" = systemd ] && pass "manifest service_manager: systemd" || fail "manifest service_manager: $sm"
mpids=$(manifest 'print(" ".join(str(i["pid"]) for i in d["instances"]))')
units=$(manifest 'print(" ".join(str(i["unit"]) for i in d["instances"]))')
log "manifest: units $units, pids $mpids"
[ "$mpids" = "$PIDS1" ] && pass "manifest pids = MainPIDs" || fail "manifest pids ($mpids) are not the units' MainPIDs ($PIDS1)"

# 4b. status
play status status.yml
grep -E "^ +- 'gpu" "$RUN_LOG" | sed 's/^ *- /      /' | tee -a "$LOG_DIR/summary.txt" >/dev/null
[ "$RUN_RC" = 0 ] && grep -q "gpu0: up" "$RUN_LOG" && grep -q "gpu1: up" "$RUN_LOG" && pass "status: both up" || fail "status"
grep -q "process=running" "$RUN_LOG" && pass "status knows the process is running" \
  || fail "status reports process=$(grep -oE 'process=[a-z]+' "$RUN_LOG" | head -1 | cut -d= -f2) for a running unit"

# 4c. re-deploy: nothing changes
play redeploy deploy.yml
PIDS2=$(mainpids)
[ "$RUN_RC" = 0 ] && [ "$RUN_CHANGED" = 0 ] && pass "re-deploy: changed=0" || fail "re-deploy: rc=$RUN_RC changed=$RUN_CHANGED"
[ "$PIDS2" = "$PIDS1" ] && pass "re-deploy kept the MainPIDs ($PIDS2)" || fail "re-deploy changed the MainPIDs: $PIDS1 -> $PIDS2"

# 4d. a change, started serially: gpu1 must start only once gpu0 answers /health_generate
play serial deploy.yml -e sglang_start_policy=serial -e sglang_sim_time_scale=0.05
PIDS3=$(mainpids)
[ "$RUN_RC" = 0 ] && pass "serial re-deploy after a change (rc 0, changed=$RUN_CHANGED, MainPIDs $PIDS1 -> $PIDS3)" || fail "serial re-deploy rc=$RUN_RC"
s0=$(mono_us sglang@gpu0.service ExecMainStartTimestampMonotonic)
s1=$(mono_us sglang@gpu1.service ExecMainStartTimestampMonotonic)
r0=$(manifest 'print([i for i in d["instances"] if i["name"]=="gpu0"][0]["ready_after_s"])')
gap=$(awk -v a="$s0" -v b="$s1" 'BEGIN{printf "%.2f", (b-a)/1e6}')
log "serial: gpu1 started ${gap} s after gpu0; gpu0 needed ${r0} s to be ready"
awk -v g="$gap" -v r="$r0" 'BEGIN{exit !(g+0 >= r+0)}' && pass "serial: gpu1 started after gpu0 was ready" \
  || fail "serial: gpu1 started ${gap} s after gpu0, before gpu0 was ready (${r0} s): sglang_start_policy=serial is not honoured by the systemd backend"

# 4e. a server that dies at start: found at once, or only at the readiness timeout?
play crash deploy.yml -e sglang_python=/usr/bin/python3 -e sglang_ready_timeout=30
took=$(sed -nE 's/.*-> rc=[0-9]+ changed=[^ ]+ in ([0-9.]+) s.*/\1/p' "$LOG_DIR/summary.txt" | tail -1)
reason=$(grep -m1 -oE "instance gpu[0-9] is not ready: .* within [0-9.]+ s" "$RUN_LOG")
log "crash: rc=$RUN_RC after $took s: $reason; $(C systemctl show -p SubState -p NRestarts sglang@gpu0.service | tr '\n' ' ')"
[ "$RUN_RC" != 0 ] && pass "a server that cannot start fails the deploy" || fail "a server that cannot start did not fail the deploy"
grep -q "within 30" "$RUN_LOG" && fail "a dead server is found only at the readiness timeout (30 s here, 600 s+ by default), not at once (units restart every 10 s meanwhile)" \
  || pass "a dead server is found before the timeout"

# 4f. back to a good deployment, then stop
play recover deploy.yml
[ "$RUN_RC" = 0 ] && pass "deploy after the failure" || fail "deploy after the failure rc=$RUN_RC"
play stop stop.yml
for i in gpu0 gpu1; do
  st=$(C systemctl is-active "sglang@$i.service"); en=$(C systemctl is-enabled "sglang@$i.service")
  [ "$st" = inactive ] && [ "$en" = disabled ] && pass "after stop.yml sglang@$i: $st, $en" || fail "after stop.yml sglang@$i: $st, $en"
done
left=$(unit_procs)
[ "$left" = 0 ] && pass "nothing left in the units' control groups" || fail "$left processes left in the units' cgroups"

# 4g. sglang_service_manager: auto picks systemd here
play auto deploy.yml -e sglang_service_manager=auto
sm=$(manifest 'print(d["service_manager"])')
[ "$RUN_RC" = 0 ] && [ "$sm" = systemd ] && pass "sglang_service_manager=auto -> $sm" || fail "auto: rc=$RUN_RC service_manager=$sm"
play stop-auto stop.yml
[ "$(unit_procs)" = 0 ] && pass "stopped again" || fail "processes left after the second stop"

log "=== $FAILS check(s) failed; logs in $LOG_DIR"
[ "$FAILS" = 0 ]
