#!/usr/bin/env bash
# Runs one RL job over the nodes of a Slurm allocation (inside sbatch or salloc). Every role
# instance of the recipe's cluster plan (`laminar cluster-plan`: the manager, which serves the
# coordinator, the actor and the master relay on the first node; a relay on each other rollout
# node; the rollouts spread over the rollout nodes; the actor's data-parallel ranks, if
# actor.world_size > 1, over the nodes before them) runs as one srun step on its node, and all of
# them find each other through the coordinator at tcp://<the first node's Slurm NodeAddr>:
# <cluster.coordinator_port> (the actor ranks at the port after it).
# The run's files go under RUN_DIR (--run-dir, else the recipe's run.dir, else runs/<recipe name>)
# as `laminar run` lays them out (metrics.jsonl, checkpoints/, model/, faults.jsonl), with logs in
# RUN_DIR/logs/<role>_<rank>.log. Returns when the actor finishes, then stops the rest; Ctrl-C
# (under salloc), SIGTERM to this script or `scancel` stops the actor, which saves a checkpoint
# while the manager waits for it, then the rest. A run folder that holds checkpoints needs
# --resume, except in a job that Slurm requeued (SLURM_RESTART_COUNT > 0), which resumes. When the
# actor loses a data-parallel rank (a node died), the roles start again from the last checkpoint,
# a spare node of the allocation replacing a dead one (sbatch --no-kill -N cluster.nodes + 1), at
# most MAX_RESTARTS (3) times, or without a spare in the requeued job (at most MAX_REQUEUES, 3).
#   scripts/launch_slurm.sh [--dry-run] [--run-dir DIR] [--resume] RECIPE [key=value ...]
#   sbatch -N 3 scripts/launch_slurm.sh RECIPE   # from the checkout (sbatch runs a copy of the
#                                                # script; the submit folder stands for the checkout)
# --dry-run prints the srun commands and starts nothing. The nodes come from SLURM_JOB_NODELIST,
# expanded with `scontrol show hostnames` (or, without scontrol, a simple expansion of lists such
# as node[01-03,7],login2). LAMINAR_BIN names the binary (default build/cli/laminar); it, the
# recipe and the data must be on a file system every node sees. SRUN_ARGS adds srun options to
# every step (e.g. SRUN_ARGS="--gpus-per-task=1 --cpus-per-task=8"). The roles authenticate each
# other with the recipe's run.keys; without one (and without run.insecure: true) the launcher
# makes RUN_DIR/run.keys and passes it (so RUN_DIR must be on that shared file system too).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# sbatch runs a copy of a submitted script from Slurm's spool folder: the checkout is then the
# folder it was submitted from. (Under `sbatch --wrap`, `exec` the script: a wrapping shell dies at
# once on scancel's SIGTERM, and Slurm may then take the job for ended while this script still
# stops the roles.)
if [ ! -f "$ROOT/scripts/launch_slurm.sh" ] && [ -n "${SLURM_SUBMIT_DIR:-}" ]; then
  ROOT="$SLURM_SUBMIT_DIR"
fi
usage() { sed -n 2,27p "$0" >&2; exit 2; }

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
# The run's files go under RUN_DIR as `laminar run` puts them: "override KEY=VALUE" lines.
PLAN_ARGS=(--recipe "$RECIPE" --format lines)
if [ -n "$RUN_DIR" ]; then PLAN_ARGS+=(--run-dir "$(absolute "$RUN_DIR")"); fi
PLAN="$("$LAMINAR" cluster-plan "${PLAN_ARGS[@]}" "${OVERRIDES[@]}")"
NODES=""; PORT=""; KEYS_NEEDED=0; CHECKPOINT=0; ROLES=()
while read -r kind rest; do
  case "$kind" in
    nodes) NODES="$rest" ;;
    coordinator_port) PORT="$rest" ;;
    keys_needed) KEYS_NEEDED="$rest" ;;
    run_dir) RUN_DIR="$rest" ;;
    override) OVERRIDES+=("$rest") ;;
    checkpoint) CHECKPOINT="$rest" ;;
    role) ROLES+=("$rest") ;;
  esac
done <<< "$PLAN"
# A job Slurm requeued continues from its checkpoint; a new job never mixes with an earlier run.
if [ -z "$RESUME" ] && [ "$CHECKPOINT" = 1 ]; then
  if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
    echo "launch_slurm: requeued (restart ${SLURM_RESTART_COUNT}): resuming from $RUN_DIR" >&2
    RESUME="--resume"
  elif [ "$DRY_RUN" != 1 ]; then
    echo "launch_slurm: $RUN_DIR holds an earlier run's checkpoints: pass --resume to continue" \
         "it, or choose another --run-dir" >&2
    exit 1
  fi
fi
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
# The coordinator's address: Slurm's NodeAddr of the first node (what slurmd itself is reached at;
# a cluster's node names need not resolve on every node), else its name.
coordinator_host() {
  local addr=""
  if command -v scontrol > /dev/null 2>&1; then
    addr="$(scontrol show node -o "$1" 2> /dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p' | head -n 1)"
  fi
  printf '%s\n' "${addr:-$1}"
}
COORDINATOR="tcp://$(coordinator_host "${HOSTS[0]}"):$PORT"
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
ACTOR=""
# The names of this job's running laminar steps matching the glob $1, with their step ids: "ID
# NAME" lines.
# shellcheck disable=SC2317  # (called from the trap handlers)
steps_named() {
  local id name
  if [ -z "${SLURM_JOB_ID:-}" ] || ! command -v squeue > /dev/null 2>&1; then return 0; fi
  while read -r id name; do
    # shellcheck disable=SC2254  # (a glob on purpose)
    case "$name" in laminar-*) case "$name" in $1) echo "$id $name" ;; esac ;; esac
  done < <(squeue --steps --noheader --jobs "$SLURM_JOB_ID" --format "%i %j" 2> /dev/null || true)
}
# SIGTERM to the tasks of this job's laminar steps named by the glob $1, through Slurm: a signal
# to srun itself makes it kill its step at once, leaving the role no time to stop (the actor none
# to save its checkpoint). Prints how many steps it signalled. The signals go out side by side,
# each bounded (scancel waits for a dead node's answer), and are not waited for.
# shellcheck disable=SC2317
signal_steps() {
  local id name n=0
  while read -r id name; do
    # Its status says little: count the step.
    timeout -k 1 5 scancel --signal=TERM "$id" > /dev/null 2>&1 &
    n=$((n + 1))
  done < <(steps_named "$1")
  echo "$n"
}
# The rollouts stop first, while the manager still answers them (up to ROLLOUT_STOP_WAIT_S, 10 s),
# then the rest; an srun still running STOP_WAIT_S (30) s later (its node died, so Slurm waits out
# KillWait) is killed, and the job's end stops whatever of its step is left. Only sruns still
# running are signalled (jobs -pr): an exited one's pid may be another process's now.
# shellcheck disable=SC2317  # (trap handlers)
cleanup() {
  local p n
  trap '' INT TERM  # a second Ctrl-C must not cut the stopping short
  n="$(signal_steps "laminar-rollout-*")"
  for _ in $(seq $((${ROLLOUT_STOP_WAIT_S:-10} * 10))); do
    [ -n "$(steps_named "laminar-rollout-*")" ] || break
    sleep 0.1
  done
  n=$((n + $(signal_steps "*")))
  echo "launch_slurm: stopped the other roles ($n job steps signalled) $(date -u +%T)" >&2
  if [ "$n" = 0 ]; then
    for p in $(jobs -pr); do kill "$p" 2> /dev/null || true; done
  fi
  for _ in $(seq $((${STOP_WAIT_S:-30} * 10))); do
    [ -n "$(jobs -pr)" ] || break
    sleep 0.1
  done
  for p in $(jobs -pr); do kill -KILL "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
}
# The actor stops first: it saves a checkpoint, which needs the manager.
# shellcheck disable=SC2317
interrupted() {
  echo "launch_slurm: stopping (the actor saves a checkpoint first when actor.checkpoint_dir is set)" >&2
  # ACTOR is cleared once the actor's srun is reaped (its pid may be another process's then).
  if [ -n "$ACTOR" ]; then
    if [ "$(signal_steps laminar-actor-0)" = 0 ]; then kill "$ACTOR" 2> /dev/null || true; fi
    wait "$ACTOR" 2> /dev/null || true
    ACTOR=""
  fi
  exit 130
}
# Starts every role instance of the plan on HOSTS (appending to the logs of a resumed run).
launch_roles() {
  local entry role rank log
  for entry in "${ROLES[@]}"; do
    command_of "$entry"
    read -r role rank _ <<< "$entry"
    log="$RUN_DIR/logs/${role}_$rank.log"
    if [ -n "$RESUME" ] || [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then  # after the earlier lines
      echo "---- launch_slurm: resumed $(date -u +%FT%TZ)" >> "$log"
      "${CMD[@]}" >> "$log" 2>&1 &
    else
      "${CMD[@]}" > "$log" 2>&1 &
    fi
    if [ "$role" = actor ] && [ "$rank" = 0 ]; then ACTOR=$!; fi
  done
  echo "launch_slurm: ${#ROLES[@]} role instances on $NODES node(s) (${HOSTS[*]:0:$NODES})," \
       "coordinator $COORDINATOR; logs in $RUN_DIR/logs" >&2
}
# The indices (into HOSTS) of the plan's nodes that cannot run a job step within 8 s, one a line
# (srun waits on a dead node's step until Slurm declares the node down: killed after 9 s). The
# first node, where this script runs, is alive.
dead_nodes() {
  local i pids=()
  for ((i = 1; i < NODES; i++)); do
    timeout -k 1 8 srun --overlap --nodes=1 --ntasks=1 -w "${HOSTS[$i]}" --job-name laminar-probe \
      true > /dev/null 2>&1 &
    pids+=("$!")
  done
  for ((i = 1; i < NODES; i++)); do
    wait "${pids[$((i - 1))]}" || echo "$i"
  done
}
# The ids of this job's role steps still listed on nodes other than those named in $@, one a line.
steps_left_off() {
  local id name nodes node
  [ -n "${SLURM_JOB_ID:-}" ] || return 0
  while read -r id name nodes; do
    case "$name" in laminar-probe) continue ;; laminar-*) ;; *) continue ;; esac
    for node in "$@"; do
      if [ "$nodes" = "$node" ]; then continue 2; fi
    done
    echo "$id"
  done < <(squeue --steps --noheader --jobs "$SLURM_JOB_ID" --format "%i %j %N" 2> /dev/null ||
           true)
}
# Has Slurm requeue this job once it has declared the nodes named in $@ down (it requeues a job
# that loses a node by itself, unless submitted with --no-kill), at most MAX_REQUEUES times.
requeue_after_nodes_down() {
  local node state timeout_s wait_s
  if [ "${SLURM_RESTART_COUNT:-0}" -ge "${MAX_REQUEUES:-3}" ]; then
    echo "launch_slurm: giving up after ${SLURM_RESTART_COUNT:-0} requeue(s)" \
         "(MAX_REQUEUES=${MAX_REQUEUES:-3}): resubmit with --resume" >&2
    exit 75
  fi
  timeout_s="$(scontrol show config 2> /dev/null |
               sed -n 's/^SlurmdTimeout *= *\([0-9]*\).*/\1/p' || true)"
  wait_s=$(( ${timeout_s:-300} + 30 ))
  echo "launch_slurm: no spare node for $*: requeueing the job once Slurm declares it down" \
       "(up to $wait_s s; the requeued job resumes)" >&2
  trap 'exit 143' TERM  # Slurm ending the job for its dead node
  for _ in $(seq "$wait_s"); do
    state=""
    for node in "$@"; do
      state+="$(scontrol show node -o "$node" 2> /dev/null | tr ' ' '\n' |
                sed -n 's/^State=//p' || true)"
    done
    case "$state" in *DOWN*|*NOT_RESPONDING*|*FAIL*) break ;; esac
    sleep 1
  done
  if scontrol requeue "$SLURM_JOB_ID"; then
    for _ in $(seq 120); do sleep 1; done  # until Slurm stops this script
  fi
  echo "launch_slurm: the job could not be requeued: resubmit with --resume" >&2
  exit 75
}

trap cleanup EXIT
trap interrupted INT TERM
launch_roles
# Exit 75: the actor lost a data-parallel rank (its process, host or link died), and the run goes
# on from its last checkpoint. The roles are stopped, every node of the plan is probed, a dead one
# is replaced by a spare node of the allocation (sbatch -N more than cluster.nodes, with --no-kill
# so that the job outlives the dead node), and the roles start again with --resume, at most
# MAX_RESTARTS (default 3) times. Without a spare, the job is requeued once Slurm has declared the
# dead node down.
restarts=0
next_spare="$NODES"
while true; do
  status=0
  wait "$ACTOR" || status=$?
  ACTOR=""
  if [ "$status" -ne 0 ]; then
    echo "launch_slurm: the actor failed (exit $status); see $RUN_DIR/logs/actor_0.log:" >&2
    tail -n 5 "$RUN_DIR/logs/actor_0.log" >&2
  fi
  if [ "$status" != 75 ] || [ -z "${SLURM_JOB_ID:-}" ]; then break; fi
  if [ "$restarts" -ge "${MAX_RESTARTS:-3}" ]; then
    echo "launch_slurm: lost an actor rank after $restarts restart(s); giving up" \
         "(MAX_RESTARTS=${MAX_RESTARTS:-3}): resubmit with --resume" >&2
    break
  fi
  echo "launch_slurm: lost an actor rank: stopping the roles to resume from the last checkpoint" \
       "$(date -u +%T)" >&2
  # Quickly: a dead node's steps never end on their own, and the run resumes from its checkpoint.
  ROLLOUT_STOP_WAIT_S=2 STOP_WAIT_S=5 cleanup
  trap interrupted INT TERM  # cleanup ignored them while it stopped the roles
  mapfile -t dead < <(dead_nodes)
  lost=()
  for i in "${dead[@]}"; do
    if [ -n "$i" ]; then lost+=("${HOSTS[$i]}"); fi
  done
  if [ "$((${#HOSTS[@]} - next_spare))" -lt "${#lost[@]}" ]; then
    trap - EXIT
    requeue_after_nodes_down "${lost[@]}"
  fi
  # The roles on the live nodes must be gone before theirs start again (their ports, their
  # shared memory): steps still listed after 5 s are killed.
  for t in $(seq 100); do
    left="$(steps_left_off "${lost[@]}")"
    [ -n "$left" ] || break
    if [ "$t" = 50 ]; then
      for id in $left; do timeout -k 1 5 scancel --signal=KILL "$id" > /dev/null 2>&1 & done
    fi
    sleep 0.1
  done
  for i in "${dead[@]}"; do
    [ -n "$i" ] || continue
    echo "launch_slurm: node ${HOSTS[$i]} does not answer; spare node ${HOSTS[$next_spare]}" \
         "takes its roles $(date -u +%T)" >&2
    HOSTS[i]="${HOSTS[$next_spare]}"
    next_spare=$((next_spare + 1))
  done
  restarts=$((restarts + 1))
  RESUME="--resume"
  launch_roles
done
exit "$status"
