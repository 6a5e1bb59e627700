#!/usr/bin/env bash
# Runs one RL job on this machine as separate processes (docs/architecture.md): a master relay, the
# manager, the actor and N rollout workers, all reading RECIPE with the same dotted overrides.
# Logs go to RUN_DIR/<role>.log; the actor prints one line per step on stderr. The script returns
# when the actor finishes (actor.max_steps, or the data runs out) and stops the other processes;
# Ctrl-C stops everything (the actor saves a checkpoint first when actor.checkpoint_dir is set).
#   scripts/launch_local.sh RECIPE [--rollouts N] [--run-dir DIR] [--resume] [key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,7p "$0" >&2; exit 2; }
RECIPE="$1"; shift
ROLLOUTS=2; RUN_DIR=""; RESUME=""; OVERRIDES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rollouts) ROLLOUTS="$2"; shift 2 ;;
    --run-dir) RUN_DIR="$2"; shift 2 ;;
    --resume) RESUME="--resume"; shift ;;
    *) OVERRIDES+=("$1"); shift ;;
  esac
done
LAMINAR="${LAMINAR_BIN:-build/cli/laminar}"
[ -x "$LAMINAR" ] || { echo "launch_local: $LAMINAR missing: run scripts/test.sh (or build) first" >&2; exit 1; }
RUN_DIR="${RUN_DIR:-runs/$(basename "$RECIPE" .yaml)}"
mkdir -p "$RUN_DIR"
pids=()
ACTOR=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
# Ctrl-C: the actor stops first (it saves a checkpoint, which needs the manager), then the rest.
# Children run in their own sessions (setsid), so the terminal's SIGINT reaches only this script.
interrupted() {
  echo "launch_local: stopping (the actor saves a checkpoint first when actor.checkpoint_dir is set)" >&2
  if [ -n "$ACTOR" ]; then kill "$ACTOR" 2>/dev/null || true; wait "$ACTOR" 2>/dev/null || true; fi
  exit 130
}
trap cleanup EXIT
trap interrupted INT TERM

# Starts a role in the background; its first stdout line (a JSON object) goes to RUN_DIR/<name>.ready.
declare -A pid_of
start() {
  local name="$1"; shift
  setsid "$LAMINAR" "$@" > "$RUN_DIR/$name.ready" 2> "$RUN_DIR/$name.log" &
  pids+=($!)
  pid_of[$name]=$!
}
# Waits for RUN_DIR/<name>.ready and prints its `key`.
ready() {
  local name="$1" key="$2"
  for _ in $(seq 600); do
    if [ -s "$RUN_DIR/$name.ready" ]; then
      python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])" \
        "$RUN_DIR/$name.ready" "$key"
      return
    fi
    kill -0 "${pid_of[$name]}" 2>/dev/null || break  # it exited: its log says why
    sleep 0.1
  done
  echo "launch_local: $name did not start; see $RUN_DIR/$name.log" >&2
  tail -n 5 "$RUN_DIR/$name.log" >&2
  exit 1
}
[[ "$ROLLOUTS" =~ ^[1-9][0-9]*$ ]] || { echo "launch_local: --rollouts needs a number >= 1, got '$ROLLOUTS'" >&2; exit 2; }
ARGS=(--recipe "$RECIPE" "${OVERRIDES[@]}" "rollout.num_workers=$ROLLOUTS")
start relay relay --id master --shm-prefix "laminar-$$"
RELAY="$(ready relay control)"
start manager manager "${ARGS[@]}"
MANAGER="$(ready manager endpoint)"
setsid "$LAMINAR" actor "${ARGS[@]}" --manager "$MANAGER" --relay "$RELAY" $RESUME \
    > "$RUN_DIR/actor.ready" 2> >(tee "$RUN_DIR/actor.log" | grep --line-buffered '^\[actor\]' >&2) &
ACTOR=$!
pids+=("$ACTOR")
pid_of[actor]=$ACTOR
# The actor is ready once it has restored the manager (--resume): only then may rollouts join.
ready actor role > /dev/null
for i in $(seq 0 $((ROLLOUTS - 1))); do
  start "rollout$i" rollout "${ARGS[@]}" --id "rollout/$i" --manager "$MANAGER" --relay "$RELAY"
done
echo "launch_local: relay $RELAY, manager $MANAGER, $ROLLOUTS rollouts; logs in $RUN_DIR" >&2
rollout_pids=("${pids[@]:3}")
# Wait for the actor; if every rollout dies first, nothing will ever train: say so and stop.
while kill -0 "$ACTOR" 2>/dev/null; do
  alive=0
  for p in "${rollout_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
  if [ "$alive" -eq 0 ]; then
    echo "launch_local: every rollout exited; see $RUN_DIR/rollout0.log:" >&2
    tail -n 3 "$RUN_DIR/rollout0.log" >&2
    exit 1
  fi
  sleep 0.5
done
status=0
wait "$ACTOR" || status=$?
if [ "$status" -ne 0 ]; then
  echo "launch_local: the actor failed (exit $status); see $RUN_DIR/actor.log" >&2
  tail -n 3 "$RUN_DIR/actor.log" >&2
fi
exit "$status"
