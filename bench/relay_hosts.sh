#!/usr/bin/env bash
# The relay broadcast across hosts (issue: the relay chain on shaped links): 1 + N hosts of
# scripts/netns_cluster.sh, each host's link shaped to RATE both ways so that one transfer of the
# version takes seconds and the network, not the CPU, bounds it. The master relay and the driver
# (`laminar bench broadcast --master`, which publishes like the actor) run on h1, one relay on each
# of h2..h(N+1), joined into the master's chain, and on each of those hosts a rollout
# (`laminar bench pull`) that pulls every version from its host's relay as soon as it is complete.
# Reports, per N: the time from publish until every relay holds the version, divided by the link's
# own time for those bytes (bytes*8/RATE) and by the chain to one relay (one transfer, measured in
# the same run); the machine's busy cores meanwhile; the rollouts' pull time and when the last one
# held the version. JSON on stdout, a table on stderr.
#   bench/relay_hosts.sh [--bytes 128e6] [--rate 160mbit] [--relays 1,2,4,8] [--repeats 2]
#                        [--chunk-bytes 1048576] [--transport zmq|ucx] [--topology chain|star]
# Needs root, a built build/cli/laminar (LAMINAR_BIN overrides) and what netns_cluster.sh needs
# (scripts/setup.sh --dev). Its cluster state lives in /run/laminar-bench-cluster; the cluster is
# removed when the script ends, also when it fails.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CLUSTER="$ROOT/scripts/netns_cluster.sh"
LAMINAR="$(realpath "${LAMINAR_BIN:-$ROOT/build/cli/laminar}")"
export LAMINAR_CLUSTER_STATE=/run/laminar-bench-cluster
BYTES=128e6; RATE=160mbit; RELAYS=1,2,4,8; REPEATS=2; CHUNK=1048576; TRANSPORT=zmq
TOPOLOGY=chain
usage() { sed -n 2,16p "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --bytes) BYTES="$2" ;;
    --rate) RATE="$2" ;;
    --relays) RELAYS="$2" ;;
    --repeats) REPEATS="$2" ;;
    --chunk-bytes) CHUNK="$2" ;;
    --transport) TRANSPORT="$2" ;;
    --topology) TOPOLOGY="$2" ;;
    *) usage ;;
  esac
  shift 2
done
[ -x "$LAMINAR" ] || { echo "relay_hosts: $LAMINAR missing: build it first" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "relay_hosts: needs root (network namespaces)" >&2; exit 1; }
# tc's rate in bits per second (kbit, mbit, gbit: powers of 1000, as tc reads them).
BPS="$(python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit|bit)", sys.argv[1])
if not m: sys.exit("relay_hosts: --rate " + sys.argv[1] + ": give e.g. 160mbit")
print(float(m[1]) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m[2]])' "$RATE")"
IFS=, read -r -a COUNTS <<< "$RELAYS"
MAX=0
for n in "${COUNTS[@]}"; do
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 15 ]; then
    echo "relay_hosts: --relays: each count is 1..15 (one host each), not '$n'" >&2; exit 2
  fi
  [ "$n" -gt "$MAX" ] && MAX="$n"
done
HOSTS=$((MAX + 1)); [ "$HOSTS" -ge 2 ] || HOSTS=2

work="$(mktemp -d)"
PIDS=()
stop_all() {
  local p i
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for ((i = 0; i < 100; i++)); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2> /dev/null || true; done
  PIDS=()
}
# shellcheck disable=SC2317  # (the trap handler)
cleanup() {
  stop_all
  "$CLUSTER" down > /dev/null 2>&1 || true
  if [ -n "${KEEP_LOGS:-}" ]; then echo "relay_hosts: logs in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts "$@" in host h$1 in the background, stderr to log $2; remembers its pid.
start_in() {
  local host="$1" log="$2"; shift 2
  # shellcheck disable=SC2016  # (expanded by the inner bash)
  "$CLUSTER" bg "$host" "$work/pid" bash -c 'log="$1"; shift; exec "$@" 2> "$log"' _ "$log" "$@"
  PIDS+=("$(cat "$work/pid")")
}

"$CLUSTER" up "$HOSTS" >&2
for ((h = 1; h <= HOSTS; h++)); do "$CLUSTER" shape "$h" "$RATE"; done
echo "relay_hosts: $HOSTS hosts, each link $RATE both ways; $BYTES bytes a version" >&2

results=()
for n in "${COUNTS[@]}"; do
  port=$((5600 + n))
  master="tcp://$("$CLUSTER" addr 1):$port"
  start_in 1 "$work/relay-$n-m.log" "$LAMINAR" relay --id m --listen "$master" \
    --host "$("$CLUSTER" addr 1)" --transport "$TRANSPORT" --topology "$TOPOLOGY" \
    --shm-prefix "lbh-$n-m"
  logs=()
  for ((h = 2; h <= n + 1; h++)); do
    addr="$("$CLUSTER" addr "$h")"
    start_in "$h" "$work/relay-$n-$h.log" "$LAMINAR" relay --id "r$((h - 1))" \
      --master "$master" --listen "tcp://$addr:$port" --host "$addr" --transport "$TRANSPORT" \
      --shm-prefix "lbh-$n-$h"
    start_in "$h" "$work/pull-$n-$h.log" "$LAMINAR" bench pull --relay "tcp://$addr:$port" \
      --host "$addr" --transport "$TRANSPORT" --versions "$REPEATS" --timeout 600 \
      --out "$work/pull-$n-$h.jsonl"
    logs+=("$work/pull-$n-$h.jsonl")
  done
  pull_logs="$(IFS=,; echo "${logs[*]}")"
  if ! "$CLUSTER" run 1 timeout 900 "$LAMINAR" bench broadcast --master "$master" \
      --host "$("$CLUSTER" addr 1)" --relays "$n" --transport "$TRANSPORT" --bytes "$BYTES" \
      --chunk-bytes "$CHUNK" --repeats "$REPEATS" --link-rate "$BPS" --pull-logs "$pull_logs" \
      --timeout 300 > "$work/broadcast-$n.json"; then
    echo "relay_hosts: the broadcast to $n relay(s) failed; the relays' logs:" >&2
    tail -n 5 "$work"/relay-"$n"-*.log "$work"/pull-"$n"-*.log >&2 || true
    exit 1
  fi
  stop_all
  results+=("$work/broadcast-$n.json")
done

python3 - "$TOPOLOGY" "$RATE" "${results[@]}" <<'PY'
import json, sys
topology, rate, files = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [json.load(open(f)) for f in files]
one = next((r["median_s"] for r in rows if r["relays"] == 1), None)
for r in rows:
    r["topology"] = topology
    r["ratio_to_one_relay"] = r["median_s"] / one if one else None
print(json.dumps({"rate": rate, "rows": rows}, indent=2))
print(f"{topology} at {rate} per link, {rows[0]['bytes'] / 1e6:.0f} MB a version "
      f"({rows[0]['link_s']:.2f} s on one link):", file=sys.stderr)
print("relays | time s (spread) | / link time | / one relay | busy cores | pull median / max s"
      " | last rollout holds it s", file=sys.stderr)
for r in rows:
    ratio_one = f"{r['ratio_to_one_relay']:.2f}" if r["ratio_to_one_relay"] else "-"
    print(f"{r['relays']:6d} | {r['median_s']:.2f} ({r['spread_s']:.2f}) | "
          f"{r['ratio_to_link']:.2f} | {ratio_one} | {r['busy_cores']:.2f} of {r['cores']} | "
          f"{r['pull_median_s']:.3f} / {r['pull_max_s']:.3f} | {r['held_max_s']:.2f}",
          file=sys.stderr)
PY
