#!/usr/bin/env bash
# A cluster of hosts on one Linux machine for multi-machine tests and benchmarks: host hN is a
# network namespace (lam-hN), a UTS namespace (hostname hN) and a mount namespace with a /dev/shm
# of its own, with one interface, eth0, at 10.78.1.N/24, on a veth into a bridge that lives in a
# namespace of its own (lam-sw); the machine's own network is never touched. The hosts share the
# rest of the file system (as a cluster's nodes share one) and the process table; a host's shared
# memory goes with it, as a machine's does. With --slurm, munge and a real Slurm (Debian's
# slurmctld and slurmd) run across them: slurmctld on h1, a slurmd on every host.
#
# The subnet is unreachable from the machine's own namespace (an `unreachable` route), so a
# client started outside the hosts fails at once instead of sending packets anywhere else. Start
# every server and client inside a host (`run`, `bg`); call `down` when done, also on failure.
#
#   scripts/netns_cluster.sh up K [--slurm]   K hosts (2..16), torn down first if any are up
#   scripts/netns_cluster.sh run N CMD...     CMD in host hN (SLURM_CONF set), in the foreground
#   scripts/netns_cluster.sh bg N PIDFILE CMD...   CMD in host hN in the background
#   scripts/netns_cluster.sh shape N RATE     rate-limit host hN's link both ways (tbf, e.g.
#                                             200mbit); RATE off removes the limit
#   scripts/netns_cluster.sh link N down|up   cut host hN off the bridge, or reconnect it
#   scripts/netns_cluster.sh kill N           SIGKILL every process running in host hN and empty
#                                             its /dev/shm (a machine that died)
#   scripts/netns_cluster.sh addr N           host hN's address
#   scripts/netns_cluster.sh down             stop everything in the hosts and remove them
# Needs root, iproute2 and util-linux; --slurm needs slurmctld, slurmd, slurm-client and munge
# (scripts/setup.sh --dev installs them). LAMINAR_CLUSTER_STATE (default /run/laminar-cluster)
# holds the state: the host count, the UTS namespaces, munge's key and Slurm's configuration,
# spool and logs.
set -euo pipefail

STATE="$(realpath -m "${LAMINAR_CLUSTER_STATE:-/run/laminar-cluster}")"
SUBNET=10.78.1
SWITCH=lam-sw
export SLURM_CONF="$STATE/slurm/slurm.conf"

fail() { echo "netns_cluster: $*" >&2; exit 1; }
hosts_up() { if [ -f "$STATE/hosts" ]; then cat "$STATE/hosts"; else echo 0; fi; }
need_host() {
  if ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ] || [ "$1" -gt "$(hosts_up)" ]; then
    fail "there is no host h$1 (the cluster has $(hosts_up))"
  fi
}
in_host() {
  local n="$1"; shift
  nsenter --net="/run/netns/lam-h$n" --uts="$STATE/uts/h$n" --mount="$STATE/mnt/h$n" -- "$@"
}
netns_exists() { ip netns list | awk '{print $1}' | grep -qx "$1"; }

# SIGTERM, then after up to 5 s SIGKILL, every process in host hN's network namespace.
stop_host_processes() {
  local n="$1" pids pid
  netns_exists "lam-h$n" || return 0
  pids="$(ip netns pids "lam-h$n" 2> /dev/null || true)"
  [ -n "$pids" ] || return 0
  for pid in $pids; do kill -TERM "$pid" 2> /dev/null || true; done
  for _ in $(seq 50); do
    pids="$(ip netns pids "lam-h$n" 2> /dev/null || true)"
    [ -n "$pids" ] || return 0
    sleep 0.1
  done
  for pid in $pids; do kill -KILL "$pid" 2> /dev/null || true; done
}

down() {
  local n
  for n in $(seq 16); do stop_host_processes "$n"; done
  # munged runs outside the hosts (one daemon for all, on a socket in the state folder); it
  # writes its seed file as it exits, so it is waited for before the folder goes.
  if [ -s "$STATE/munge/munged.pid" ]; then
    local munged
    munged="$(cat "$STATE/munge/munged.pid")"
    kill -TERM "$munged" 2> /dev/null || true
    for _ in $(seq 50); do
      kill -0 "$munged" 2> /dev/null || break
      sleep 0.1
    done
    kill -KILL "$munged" 2> /dev/null || true
  fi
  for n in $(seq 16); do
    # The host's mount namespace first: it holds copies of the network namespaces' mounts.
    if [ -e "$STATE/mnt/h$n" ]; then umount "$STATE/mnt/h$n" 2> /dev/null || true; fi
    if [ -e "$STATE/uts/h$n" ]; then umount "$STATE/uts/h$n" 2> /dev/null || true; fi
    if netns_exists "lam-h$n"; then ip netns delete "lam-h$n"; fi
  done
  if mountpoint -q "$STATE/mnt" 2> /dev/null; then umount "$STATE/mnt" 2> /dev/null || true; fi
  if netns_exists "$SWITCH"; then ip netns delete "$SWITCH"; fi
  if [ -f "$STATE/.laminar-cluster" ]; then
    ip route del unreachable "$SUBNET.0/24" 2> /dev/null || true
  fi
  # Only a folder that `up` made (its marker inside), under /run or /tmp.
  case "$STATE" in
    /run/netns|/run/netns/*) ;;
    /run/?*|/tmp/?*) if [ -f "$STATE/.laminar-cluster" ]; then rm -rf "$STATE"; fi ;;
  esac
  return 0
}

up() {
  local k="$1" n
  # The guard route must not replace one of the machine's own (a VPN, a container network).
  if [ -n "$(ip route show "$SUBNET.0/24")" ]; then
    fail "the machine already routes $SUBNET.0/24 ($(ip route show "$SUBNET.0/24" | head -n 1)); " \
         "is another cluster up? (down removes it)"
  fi
  # The folder is ours to remove in `down`: a new one, or one an earlier `up` made.
  if [ -d "$STATE" ] && [ ! -f "$STATE/.laminar-cluster" ] && [ -n "$(ls -A "$STATE")" ]; then
    fail "LAMINAR_CLUSTER_STATE=$STATE holds files this tool did not make: choose a new folder"
  fi
  mkdir -p "$STATE"
  touch "$STATE/.laminar-cluster"
  ip route add unreachable "$SUBNET.0/24"
  ip netns add "$SWITCH"
  ip -n "$SWITCH" link add br0 type bridge
  ip -n "$SWITCH" link set br0 up
  mkdir -p "$STATE/uts" "$STATE/mnt"
  # Mount namespaces persist as bind mounts, which need a private mount to live on.
  mount --bind "$STATE/mnt" "$STATE/mnt"
  mount --make-private "$STATE/mnt"
  for n in $(seq "$k"); do
    ip netns add "lam-h$n"
    # Made inside the namespaces: nothing is ever added to the machine's own.
    ip -n "$SWITCH" link add "lam-h$n-sw" type veth peer name eth0 netns "lam-h$n"
    ip -n "lam-h$n" addr add "$SUBNET.$n/24" dev eth0
    ip -n "lam-h$n" link set lo up
    ip -n "lam-h$n" link set eth0 up
    ip -n "$SWITCH" link set "lam-h$n-sw" master br0 up
    # A persistent UTS namespace with the host's name (nsenter --uts joins it).
    touch "$STATE/uts/h$n"
    unshare --uts="$STATE/uts/h$n" hostname "h$n"
    touch "$STATE/mnt/h$n"
    unshare --mount="$STATE/mnt/h$n" --propagation private \
      mount -t tmpfs -o mode=1777 "shm-h$n" /dev/shm
  done
  echo "$k" > "$STATE/hosts"
}

slurm_up() {
  local k="$1" n
  if ! command -v slurmctld > /dev/null || ! command -v slurmd > /dev/null ||
     ! command -v munged > /dev/null; then
    fail "--slurm needs slurmctld, slurmd, slurm-client and munge (scripts/setup.sh --dev)"
  fi
  mkdir -p "$STATE/munge" "$STATE/slurm/state" "$STATE/slurm/log"
  chown munge:munge "$STATE/munge"
  runuser -u munge -- mungekey --create --keyfile="$STATE/munge/munge.key" --force
  chmod 0600 "$STATE/munge/munge.key"
  runuser -u munge -- munged --socket="$STATE/munge/socket" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
    --seed-file="$STATE/munge/munged.seed"
  {
    echo "ClusterName=laminar"
    echo "SlurmctldHost=h1($SUBNET.1)"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$STATE/munge/socket"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "ReturnToService=2"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=30"
    echo "KillWait=30"
    echo "StateSaveLocation=$STATE/slurm/state"
    echo "SlurmctldPidFile=$STATE/slurm/slurmctld.pid"
    echo "SlurmctldLogFile=$STATE/slurm/log/slurmctld.log"
    echo "SlurmdSpoolDir=$STATE/slurm/spool-%n"
    echo "SlurmdPidFile=$STATE/slurm/slurmd-%n.pid"
    echo "SlurmdLogFile=$STATE/slurm/log/slurmd-%n.log"
    for n in $(seq "$k"); do
      echo "NodeName=h$n NodeAddr=$SUBNET.$n CPUs=$(nproc) State=UNKNOWN"
    done
    echo "PartitionName=all Nodes=h[1-$k] Default=YES MaxTime=INFINITE State=UP"
  } > "$SLURM_CONF"
  in_host 1 slurmctld
  for n in $(seq "$k"); do in_host "$n" slurmd; done
  for _ in $(seq 150); do
    if [ "$(in_host 1 sinfo --noheader --format '%D %t' 2> /dev/null)" = "$k idle" ]; then return 0; fi
    sleep 0.2
  done
  in_host 1 sinfo || true
  fail "the Slurm nodes are not idle after 30 s (logs in $STATE/slurm/log)"
}

[ "$(id -u)" = 0 ] || fail "needs root (network namespaces)"
command="${1:-}"
shift || true
case "$command" in
  up)
    k="${1:-}"; shift || true
    if ! [[ "$k" =~ ^[0-9]+$ ]] || [ "$k" -lt 2 ] || [ "$k" -gt 16 ]; then fail "up K: K is 2..16"; fi
    down
    up "$k"
    if [ "${1:-}" = --slurm ]; then slurm_up "$k"; fi
    echo "netns_cluster: hosts h1..h$k at $SUBNET.1..$SUBNET.$k${1:+, with Slurm}" ;;
  run)
    n="${1:?run N CMD}"; shift; need_host "$n"; in_host "$n" "$@" ;;
  bg)
    n="${1:?bg N PIDFILE CMD}"; pidfile="${2:?bg N PIDFILE CMD}"; shift 2; need_host "$n"
    # nsenter execs the command (no fork without --pid): $! is the command's pid.
    nsenter --net="/run/netns/lam-h$n" --uts="$STATE/uts/h$n" --mount="$STATE/mnt/h$n" -- "$@" \
      < /dev/null > /dev/null 2>&1 &
    echo $! > "$pidfile" ;;
  shape)
    n="${1:?shape N RATE}"; rate="${2:?shape N RATE}"; need_host "$n"
    if [ "$rate" = off ]; then
      tc -n "lam-h$n" qdisc del dev eth0 root 2> /dev/null || true
      tc -n "$SWITCH" qdisc del dev "lam-h$n-sw" root 2> /dev/null || true
    else
      tc -n "lam-h$n" qdisc replace dev eth0 root tbf rate "$rate" burst 256kbit latency 200ms
      tc -n "$SWITCH" qdisc replace dev "lam-h$n-sw" root tbf rate "$rate" burst 256kbit latency 200ms
    fi ;;
  link)
    n="${1:?link N down|up}"; state="${2:?link N down|up}"; need_host "$n"
    [ "$state" = down ] || [ "$state" = up ] || fail "link N down|up"
    ip -n "$SWITCH" link set "lam-h$n-sw" "$state" ;;
  kill)
    n="${1:?kill N}"; need_host "$n"
    for pid in $(ip netns pids "lam-h$n" 2> /dev/null || true); do kill -KILL "$pid" 2> /dev/null || true; done
    # A dead machine's shared memory goes with it.
    in_host "$n" sh -c 'rm -rf /dev/shm/* /dev/shm/.[!.]* 2> /dev/null; true' ;;
  addr)
    n="${1:?addr N}"; need_host "$n"; echo "$SUBNET.$n" ;;
  down)
    down ;;
  *)
    sed -n 2,25p "$0" >&2; exit 2 ;;
esac
