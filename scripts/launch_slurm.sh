#!/usr/bin/env bash
# Runs one RL job over the nodes of a Slurm allocation (inside sbatch or salloc). Every role
# instance of the recipe's cluster plan (`laminar cluster-plan`: the manager, which serves the
# coordinator, the actor and the master relay on the first node; a relay on each other rollout
# node; the rollouts spread over the rollout nodes) runs as one srun step on its node, and all of
# them find each other through the coordinator at tcp://<first node>:<cluster.coordinator_port>.
# Logs go to RUN_DIR/logs/<role>_<rank>.log. Returns when the actor finishes, then stops the
# rest; Ctrl-C (under salloc) or SIGTERM to this script stops the actor first, which saves a
# checkpoint, then the rest.
#   scripts/launch_slurm.sh [--dry-run] [--run-dir DIR] [--resume] RECIPE [key=value ...]
#   sbatch -N 3 --wrap "scripts/launch_slurm.sh RECIPE"   # (sbatch runs a copy of a submitted
#                                                         # script: then set LAMINAR_BIN)
# --dry-run prints the srun commands and starts nothing. The nodes come from SLURM_JOB_NODELIST,
# expanded with `scontrol show hostnames` (or, without scontrol, a simple expansion of lists such
# as node[01-03,7],login2). LAMINAR_BIN names the binary (default build/cli/laminar); it, the
# recipe and the data must be on a file system every node sees. SRUN_ARGS adds srun options to
# every step (e.g. SRUN_ARGS="--gpus-per-task=1 --cpus-per-task=8"). The roles authenticate each
# other with the recipe's run.keys; without one (and without run.insecure: true) the launcher
# makes RUN_DIR/run.keys and passes it (so RUN_DIR must be on that shared file system too).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n 2,19p "$0" >&2; exit 2; }

DRY_RUN=0; RUN_DIR=""; RESUME=""; RECIPE=""; OVERRIDES=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1; shift ;;
    --run-dir) [ $# -ge 2 ] || usage; RUN_DIR="$2"; shift 2 ;;
    --resume) RESUME="--resume"; shift ;;
    -h|--help) usage ;;
    -*) echo "launch_slurm: unknown option $1" >&2; usage ;;
    *) if [ -z "$RECIPE" ]; then RECIPE="$1"; else OVERRIDES+=("$1"); fi; shift ;;
  esac
done
[ -n "$RECIPE" ] || usage
absolute() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
RECIPE="$(absolute "$RECIPE")"
LAMINAR="$(absolute "${LAMINAR_BIN:-$ROOT/build/cli/laminar}")"
[ -x "$LAMINAR" ] || { echo "launch_slurm: $LAMINAR missing: build it (or set LAMINAR_BIN)" >&2; exit 1; }
[ -f "$RECIPE" ] || { echo "launch_slurm: recipe $RECIPE is not a file" >&2; exit 1; }
RUN_DIR="$(absolute "${RUN_DIR:-runs/$(basename "$RECIPE" .yaml)}")"

# Prints one host name a line for a Slurm node list: one bracket group per name, with ranges
# that keep their zero padding (node[01-03,7],login2 -> node01 node02 node03 node7 login2).
expand_nodelist() {
  local list="$1" item="" c i depth=0 prefix body suffix range lo hi n
  local items=() ranges=()
  for ((i = 0; i < ${#list}; i++)); do
    c="${list:i:1}"
    case "$c" in
      '[') depth=$((depth + 1)); item+="$c" ;;
      ']') depth=$((depth - 1)); item+="$c" ;;
      ',') if [ "$depth" -eq 0 ]; then items+=("$item"); item=""; else item+="$c"; fi ;;
      *) item+="$c" ;;
    esac
  done
  [ -z "$item" ] || items+=("$item")
  for item in "${items[@]}"; do
    if [[ "$item" =~ ^([^][]*)\[([^]]*)\](.*)$ ]]; then
      prefix="${BASH_REMATCH[1]}"; body="${BASH_REMATCH[2]}"; suffix="${BASH_REMATCH[3]}"
      IFS=, read -ra ranges <<< "$body"
      for range in "${ranges[@]}"; do
        if [[ "$range" =~ ^([0-9]+)-([0-9]+)$ ]]; then
          lo="${BASH_REMATCH[1]}"; hi="${BASH_REMATCH[2]}"
          for ((n = 10#$lo; n <= 10#$hi; n++)); do
            printf '%s%0*d%s\n' "$prefix" "${#lo}" "$n" "$suffix"
          done
        else
          printf '%s%s%s\n' "$prefix" "$range" "$suffix"
        fi
      done
    else
      printf '%s\n' "$item"
    fi
  done
}

NODELIST="${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}"
[ -n "$NODELIST" ] || { echo "launch_slurm: no SLURM_JOB_NODELIST: run inside sbatch or salloc" >&2; exit 1; }
if command -v scontrol > /dev/null 2>&1 && EXPANDED="$(scontrol show hostnames "$NODELIST" 2> /dev/null)"; then
  mapfile -t HOSTS <<< "$EXPANDED"
else
  mapfile -t HOSTS < <(expand_nodelist "$NODELIST")
fi

# The plan, from laminar itself (no YAML in bash): "nodes N", "coordinator_port P", ...,
# then "role ROLE RANK NODE" lines in launch order.
PLAN="$("$LAMINAR" cluster-plan --recipe "$RECIPE" "${OVERRIDES[@]}" --format lines)"
NODES=""; PORT=""; KEYS_NEEDED=0; ROLES=()
while read -r kind a b c; do
  case "$kind" in
    nodes) NODES="$a" ;;
    coordinator_port) PORT="$a" ;;
    keys_needed) KEYS_NEEDED="$a" ;;
    role) ROLES+=("$a $b $c") ;;
  esac
done <<< "$PLAN"
# The roles authenticate each other with CURVE (run.keys): a recipe that names no key file gets
# one in the run folder (kept for --resume), which every node must read.
if [ "$KEYS_NEEDED" = 1 ]; then
  KEYS="$RUN_DIR/run.keys"
  if [ "$DRY_RUN" != 1 ] && [ ! -f "$KEYS" ]; then
    mkdir -p "$RUN_DIR"
    "$LAMINAR" keys "$KEYS" > /dev/null
  fi
  OVERRIDES+=("run.keys=$KEYS")
fi
if [ "${#HOSTS[@]}" -lt "$NODES" ]; then
  echo "launch_slurm: the recipe's cluster.nodes is $NODES but the allocation has ${#HOSTS[@]}" \
       "node(s) ($NODELIST); allocate more (sbatch -N $NODES) or lower cluster.nodes" >&2
  exit 1
fi
COORDINATOR="tcp://${HOSTS[0]}:$PORT"
read -ra SRUN_EXTRA <<< "${SRUN_ARGS:-}"

# The srun command of role instance "ROLE RANK NODE", into the array CMD.
command_of() {
  local role rank node
  read -r role rank node <<< "$1"
  CMD=(srun --nodes=1 --ntasks=1 --overlap -w "${HOSTS[$node]}" --job-name "laminar-$role-$rank"
       "${SRUN_EXTRA[@]}" "$LAMINAR" "$role" --recipe "$RECIPE" --rank "$rank"
       --coordinator "$COORDINATOR" "${OVERRIDES[@]}")
  if [ "$role" = actor ] && [ -n "$RESUME" ]; then CMD+=("$RESUME"); fi
}

if [ "$DRY_RUN" = 1 ]; then
  for entry in "${ROLES[@]}"; do
    command_of "$entry"
    printf '%q ' "${CMD[@]}" | sed 's/ $//'
    echo
  done
  exit 0
fi

mkdir -p "$RUN_DIR/logs"
pids=()
ACTOR=""
# shellcheck disable=SC2317  # (trap handlers)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
}
# The actor stops first: it saves a checkpoint, which needs the manager.
# shellcheck disable=SC2317
interrupted() {
  echo "launch_slurm: stopping (the actor saves a checkpoint first when actor.checkpoint_dir is set)" >&2
  if [ -n "$ACTOR" ]; then kill "$ACTOR" 2> /dev/null || true; wait "$ACTOR" 2> /dev/null || true; fi
  exit 130
}
trap cleanup EXIT
trap interrupted INT TERM
for entry in "${ROLES[@]}"; do
  command_of "$entry"
  read -r role rank _ <<< "$entry"
  "${CMD[@]}" > "$RUN_DIR/logs/${role}_$rank.log" 2>&1 &
  pids+=($!)
  if [ "$role" = actor ]; then ACTOR=$!; fi
done
echo "launch_slurm: ${#ROLES[@]} role instances on $NODES node(s), coordinator $COORDINATOR;" \
     "logs in $RUN_DIR/logs" >&2
status=0
wait "$ACTOR" || status=$?
if [ "$status" -ne 0 ]; then
  echo "launch_slurm: the actor failed (exit $status); see $RUN_DIR/logs/actor_0.log:" >&2
  tail -n 5 "$RUN_DIR/logs/actor_0.log" >&2
fi
exit "$status"
