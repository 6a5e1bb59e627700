#!/usr/bin/env bash
# The main job on the default model, on this machine: asynchronous GRPO on SmolLM2-135M-Instruct
# (configs/quickstart.yaml: grade-school arithmetic, gsm8k reward, 1 rollout worker, 40 steps of
# 4 prompts x 8 samples), measured before and after on held-out problems with `laminar eval`
# (configs/data/arithmetic_test.jsonl: no question of it is trained on; fixed seeds).
#   scripts/quickstart.sh                      # about 14 minutes on 2 cores after the build
#   scripts/quickstart.sh actor.max_steps=10   # recipe overrides go to `laminar run`
#   scripts/quickstart.sh --resume             # continue an interrupted run
# Writes runs/quickstart/ (metrics.jsonl, tensorboard/, checkpoints/, model/, plots/, logs/) and
# runs/quickstart/eval/{before,after}.json. RUN_DIR, EVAL_PROBLEMS and EVAL_N change the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
RUN_DIR="${RUN_DIR:-runs/quickstart}"
EVAL_PROBLEMS="${EVAL_PROBLEMS:-100}"
EVAL_N="${EVAL_N:-4}"
RECIPE=configs/quickstart.yaml
HELD_OUT=configs/data/arithmetic_test.jsonl

if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
echo "[quickstart] building $BUILD_DIR/cli/laminar (minutes the first time)"
cmake --build "$BUILD_DIR" -j "$(nproc)" --target laminar >/dev/null
LAMINAR="$BUILD_DIR/cli/laminar"

# pass@1 and pass@N on the held-out problems, with the recipe's sampling (temperature, max_tokens,
# chat format, reward) and fixed seeds; prints one line and keeps the JSON.
evaluate() {  # evaluate NAME MODEL
  mkdir -p "$RUN_DIR/eval"
  "$LAMINAR" eval --recipe "$RECIPE" --data "$HELD_OUT" --model "$2" --limit "$EVAL_PROBLEMS" \
      --n "$EVAL_N" --seed 0 --json --output "$RUN_DIR/eval/$1.samples.jsonl" > "$RUN_DIR/eval/$1.json"
  python3 - "$RUN_DIR/eval/$1.json" "$1" "$EVAL_N" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
n = sys.argv[3]
print(f"[quickstart] {sys.argv[2]:6s} held-out pass@1 {e['pass@1']:.3f}  pass@{n} {e['pass@' + n]:.3f}"
      f"  ({e['num_problems']} problems x {e['n']} samples, mean response "
      f"{e['mean_response_tokens']:.1f} tokens)")
PY
}

if [ ! -f "$RUN_DIR/eval/before.json" ]; then
  echo "[quickstart] evaluating the base model on $EVAL_PROBLEMS held-out problems"
  evaluate before smollm2-135m-instruct
fi
echo "[quickstart] training: $LAMINAR run $RECIPE --run-dir $RUN_DIR $*"
"$LAMINAR" run "$RECIPE" --run-dir "$RUN_DIR" "$@"
echo "[quickstart] evaluating the trained policy ($RUN_DIR/model)"
evaluate after "$RUN_DIR/model"
"$LAMINAR" plot "$RUN_DIR" >/dev/null
python3 - "$RUN_DIR" "$EVAL_N" <<'PY'
import json, sys
run, n = sys.argv[1], sys.argv[2]
b, a = (json.load(open(f"{run}/eval/{x}.json")) for x in ("before", "after"))
print(f"[quickstart] held-out pass@1 {b['pass@1']:.3f} -> {a['pass@1']:.3f}, "
      f"pass@{n} {b['pass@' + n]:.3f} -> {a['pass@' + n]:.3f}; plots in {run}/plots, "
      f"metrics in {run}/metrics.jsonl")
PY
