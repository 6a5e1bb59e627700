#!/usr/bin/env bash
# Laminar's long-tail experiment on this machine: response budgets drawn per prompt from
# a log-normal with p99 = 10 x median (as reported for reasoning workloads), 4 rollouts, the same
# prompts and steps in every mode; reports trained tokens per second (tokens in the trained batch
# / time between actor updates, Laminar's headline metric) for sync, one_step_off, async without
# repack and async with repack, as JSON on stdout and a table on stderr.
#   bench/long_tail.sh [STEPS] [MEDIAN_TOKENS]     (default 12 steps, median 40 tokens)
# Needs ../shared/data (stories260K) and a built build/cli/laminar.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-12}"
MEDIAN="${2:-40}"
MODEL=../shared/data/models/stories260K
[ -f "$MODEL/stories260K.bin" ] || { echo "long_tail: $MODEL missing" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$work/prompts.jsonl" "$MEDIAN" <<'PY'
import json, math, random, sys
rng = random.Random(7)
sigma = math.log(10) / 2.326  # p99 / median = exp(2.326 sigma) = 10
prompts = ["Once upon a time", "The dog", "Lily was", "Tom had a", "One day", "The sun",
           "A little girl", "The cat"]
with open(sys.argv[1], "w") as f:
    for i in range(400):
        budget = min(480, max(4, int(round(float(sys.argv[2]) * math.exp(rng.gauss(0, sigma))))))
        f.write(json.dumps({"prompt": prompts[i % len(prompts)], "ground_truth": "cat",
                            "data_source": "stories", "max_tokens": budget}) + "\n")
PY
cat > "$work/recipe.yaml" <<YAML
model: {path: $MODEL/stories260K.bin, tokenizer: $MODEL/tok512.bin}
data: {path: $work/prompts.jsonl, max_tokens_key: max_tokens, shuffle: false}
reward: {name: contains}
rollout: {n: 4, max_tokens: 480, kv_cache_mb: 16, max_groups: 4, stop_at_eos: false,
          heartbeat_interval_ms: 25}
actor: {groups_per_step: 8, max_steps: $STEPS, lr: 1.0e-4}
repack: {interval_s: 0.1, max_batch: 32}
YAML
declare -A label=([sync]="mode=sync" [one_step_off]="mode=one_step_off"
                  [async_no_repack]="mode=async repack.enabled=false" [async_repack]="mode=async")
for name in sync one_step_off async_no_repack async_repack; do
  # shellcheck disable=SC2086
  scripts/launch_local.sh "$work/recipe.yaml" --rollouts 4 --run-dir "$work/$name" \
      ${label[$name]} "actor.metrics=$work/$name/metrics.jsonl" 2>/dev/null
done
python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
out = {}
for name in ("sync", "one_step_off", "async_no_repack", "async_repack"):
    rows = [json.loads(l) for l in open(os.path.join(work, name, "metrics.jsonl"))]
    steady = rows[1:] or rows  # the first step includes start-up
    secs = sum(r["timing_s/step"] for r in steady)
    tokens = sum(r["perf/total_num_tokens"] for r in steady)
    out[name] = {"trained_tokens_per_s": tokens / secs, "steps": len(rows),
                 "trained_tokens": sum(r["perf/total_num_tokens"] for r in rows),
                 "trained_tokens_timed": tokens, "timed_s": secs,
                 "staleness_mean": sum(r["staleness/mean"] for r in rows) / len(rows),
                 "trainer_idle_ratio": sum(r["trainer/idle_ratio"] for r in steady) / len(steady),
                 "repack_requests_moved": rows[-1].get("repack/requests_moved", 0),
                 "repack_sources_freed": rows[-1].get("repack/sources_freed", 0)}
base = out["sync"]["trained_tokens_per_s"]
print(f"{'mode':18s} {'trained tok/s':>14s} {'vs sync':>8s} {'staleness':>9s} {'idle':>6s} {'moved':>6s}",
      file=sys.stderr)
for k, v in out.items():
    v["ratio_vs_sync"] = v["trained_tokens_per_s"] / base
    print(f"{k:18s} {v['trained_tokens_per_s']:14.1f} {v['ratio_vs_sync']:8.2f} "
          f"{v['staleness_mean']:9.2f} {v['trainer_idle_ratio']:6.2f} {v['repack_requests_moved']:6.0f}",
          file=sys.stderr)
print(json.dumps(out, indent=2))
PY
