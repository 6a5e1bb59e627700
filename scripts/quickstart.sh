#!/usr/bin/env bash
# The main job on the default model, on this machine. Until the RL loop lands (see the open issues)
# this runs its pieces end to end on SmolLM2-135M-Instruct: inspect the model, sample a GRPO group
# of answers to an arithmetic question (with the rollout's per-token logprobs), score them with a
# rule, and take one policy-gradient step on them with the trainer (GRPO advantages, PPO clip,
# truncated importance weights, AdamW), printing verl-named metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target laminar >/dev/null
LAMINAR="$BUILD_DIR/cli/laminar"
MODEL="${1:-smollm2-135m-instruct}"
"$LAMINAR" inspect "$MODEL"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
question="What is 7 + 5? Answer with the number."
echo
echo "--- a GRPO group: 4 sampled answers to '$question' (score 1 when the answer says 12)"
for seed in 1 2 3 4; do
  "$LAMINAR" generate --model "$MODEL" --chat --prompt "$question" --max-tokens 24 \
      --temperature 1 --seed "$seed" --json > "$work/sample.json"
  python3 - "$work/sample.json" >> "$work/group.jsonl" <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1]))
s["group"] = 0
s["score"] = 1.0 if re.search(r"\b12\b", s["text"]) else 0.0
print(json.dumps(s))
print(f"  score {s['score']:.0f}: {s['text'].strip()[:70]!r}", file=sys.stderr)
PY
done
echo
echo "--- one trainer step on the group (metrics as JSON)"
"$LAMINAR" train --model "$MODEL" --data "$work/group.jsonl" --groups-per-step 1 --steps 1 \
    --lr 1e-5
