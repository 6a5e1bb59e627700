#!/usr/bin/env bash
# End-to-end RL throughput of a laminar recipe (default: the quickstart) against TRL's GRPOTrainer
# (PyPI, CPU, transformers generation, no vLLM) on the same model, data, reward and
# hyper-parameters, run one after the other in the same command (Performance).
#   bench/rl_vs_trl.sh [STEPS] [RECIPE] [key=value ...]   (default 4 steps, configs/quickstart.yaml)
# The overrides go to `laminar run`; TRL reads the effective recipe that run writes (all keys), so
# both sides see the same values (bench/trl_grpo.py maps them). A step is one batch of
# actor.groups_per_step prompts x rollout.n samples and one optimizer update (laminar's step).
# Timed window: the end of step 1 to the end of step STEPS (model loading, start-up and the first
# generation excluded), on both sides. Trained tokens = prompt + response tokens of the trained
# samples (laminar's perf/total_num_tokens), counted the same way on both sides; response-only
# tokens/s are reported too. Writes one JSON line to stdout; the table and progress to stderr.
# Needs a built build/cli/laminar and scripts/setup.sh --bench (the bench virtualenv with trl);
# without the virtualenv or trl it prints why and exits 0 with {"skipped": ...}. Environment:
# LAMINAR_BIN, LAMINAR_BENCH_VENV, LAMINAR_BENCH_THREADS (TRL's torch threads; default nproc),
# TRL_MICRO_BATCH (TRL's samples per forward/backward; default rollout.n, gradients accumulated
# to the recipe's batch: the whole batch at once takes ~12 GB on the quickstart).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-4}"
RECIPE="${2:-configs/quickstart.yaml}"
shift $(($# < 2 ? $# : 2))
VENV="${LAMINAR_BENCH_VENV:-$HOME/.cache/laminar/bench-venv}"
LAMINAR="${LAMINAR_BIN:-build/cli/laminar}"
THREADS="${LAMINAR_BENCH_THREADS:-$(nproc)}"
say() { echo "[rl_vs_trl] $*" >&2; }
skip() {
  say "skipped: $*"
  printf '{"skipped": "%s"}\n' "$*"
  exit 0
}
[ -x "$VENV/bin/python" ] || skip "no bench virtualenv at $VENV (run scripts/setup.sh --bench)"
"$VENV/bin/python" -c "import trl" 2>/dev/null ||
  skip "trl is not installed in $VENV (run scripts/setup.sh --bench)"
[ -x "$LAMINAR" ] || { say "laminar missing: run scripts/test.sh (or build) first"; exit 1; }
[ -f "$RECIPE" ] || { say "no recipe $RECIPE"; exit 1; }
[ "$STEPS" -ge 2 ] 2>/dev/null || { say "STEPS must be >= 2 (step 1 is warm-up)"; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say "laminar: $STEPS steps of $RECIPE $*"
start=$(date +%s)
if ! "$LAMINAR" run "$RECIPE" "actor.max_steps=$STEPS" \
    "actor.trajectory_log=$work/laminar/trajectories.jsonl" "$@" --run-dir "$work/laminar" \
    > "$work/laminar.log" 2>&1; then
  say "laminar run failed:"; tail -n 20 "$work/laminar.log" >&2; exit 1
fi
grep '^\[actor\] step' "$work/laminar.log" >&2 || true
say "laminar took $(($(date +%s) - start)) s; TRL GRPOTrainer: $STEPS steps, $THREADS torch threads"
start=$(date +%s)
if ! OMP_NUM_THREADS="$THREADS" "$VENV/bin/python" bench/trl_grpo.py \
    --recipe "$work/laminar/recipe.yaml" --steps "$STEPS" --threads "$THREADS" \
    --micro-batch "${TRL_MICRO_BATCH:-0}" --repo-root . --out "$work/trl.json" \
    --work-dir "$work/trl" > "$work/trl.log" 2>&1; then
  say "TRL failed:"; tail -n 20 "$work/trl.log" >&2; exit 1
fi
say "TRL took $(($(date +%s) - start)) s"

python3 - "$work" "$RECIPE" "$STEPS" <<'PY'
import json, os, sys
from collections import Counter
work, recipe, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])

# laminar: per step from metrics.jsonl; trained samples and their response tokens from the
# trajectory log (one line per trained sample).
samples, response = Counter(), Counter()
for line in open(os.path.join(work, "laminar", "trajectories.jsonl")):
    t = json.loads(line)
    samples[t["step"]] += 1
    response[t["step"]] += t["response_length"]
lam = []
for line in open(os.path.join(work, "laminar", "metrics.jsonl")):
    r = json.loads(line)
    k = int(r["training/global_step"])
    lam.append({"step": k, "seconds": r["timing_s/step"], "samples": samples[k],
                "tokens": r["perf/total_num_tokens"], "response_tokens": response[k],
                "reward_mean": r["critic/score/mean"], "staleness_mean": r["staleness/mean"],
                "trainer_idle_ratio": r["trainer/idle_ratio"]})

# TRL: the end time of each step; a step's seconds are the time since the previous step's end.
trl = json.load(open(os.path.join(work, "trl.json")))
tsteps = trl["steps"]
for i, s in enumerate(tsteps):
    s["seconds"] = s["end_s"] - (tsteps[i - 1]["end_s"] if i else 0.0)
    s["tokens"] = s["prompt_tokens"] + s["response_tokens"]


def summary(per_step):
    timed = [s for s in per_step if s["step"] >= 2]  # step 1 includes start-up: warm-up
    secs = sum(s["seconds"] for s in timed)
    total = lambda key, rows=timed: sum(s[key] for s in rows)
    return {"steps": len(per_step), "timed_steps": len(timed), "timed_s": secs,
            "s_per_step": secs / len(timed),
            "samples_per_s": total("samples") / secs, "tokens_per_s": total("tokens") / secs,
            "response_tokens_per_s": total("response_tokens") / secs,
            "samples_timed": total("samples"), "tokens_timed": total("tokens"),
            "reward_mean": total("reward_mean", per_step) / len(per_step),
            "response_length_mean": total("response_tokens", per_step)
            / total("samples", per_step),
            "reward_by_step": [round(s["reward_mean"], 4) for s in per_step]}


out = {"recipe": recipe, "steps": steps, "timed": f"steps 2..{steps}",
       "trained_tokens": "prompt + response tokens of the trained samples",
       "laminar": summary(lam), "trl": summary(tsteps)}
L, T = out["laminar"], out["trl"]
L["staleness_mean"] = sum(s["staleness_mean"] for s in lam) / len(lam)
L["trainer_idle_ratio"] = sum(s["trainer_idle_ratio"] for s in lam[1:]) / max(1, len(lam) - 1)
for k in ("load_s", "threads", "versions", "config"):
    T[k] = trl[k]
for k in ("samples_per_s", "tokens_per_s", "response_tokens_per_s"):
    out["ratio_" + k] = L[k] / T[k]
if len(lam) != steps or len(tsteps) != steps:
    print(f"warning: laminar ran {len(lam)} and TRL {len(tsteps)} of {steps} steps",
          file=sys.stderr)

print(f"{'':8s} {'s/step':>8s} {'samples/s':>10s} {'tokens/s':>9s} {'resp tok/s':>10s} "
      f"{'reward':>7s} {'resp len':>8s}", file=sys.stderr)
for name, v in (("laminar", L), ("TRL", T)):
    print(f"{name:8s} {v['s_per_step']:8.2f} {v['samples_per_s']:10.3f} {v['tokens_per_s']:9.1f} "
          f"{v['response_tokens_per_s']:10.1f} {v['reward_mean']:7.3f} "
          f"{v['response_length_mean']:8.1f}", file=sys.stderr)
print(f"{'ratio':8s} {T['s_per_step'] / L['s_per_step']:8.2f} {out['ratio_samples_per_s']:10.2f} "
      f"{out['ratio_tokens_per_s']:9.2f} {out['ratio_response_tokens_per_s']:10.2f}"
      f"   laminar / TRL, steps 2..{steps} timed", file=sys.stderr)
print(json.dumps(out))
PY
