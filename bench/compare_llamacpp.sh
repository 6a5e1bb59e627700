#!/usr/bin/env bash
# Decode and prefill throughput of laminar (every weight format: f32, bf16, w8a8, w4a8, and gguf =
# the file's own blocks) and llama.cpp on the same GGUF file, measured in the
# same run, with the ratio. Needs scripts/setup.sh --bench (builds the llama.cpp peer).
#   bench/compare_llamacpp.sh [MODEL.gguf] [THREADS] [ROUNDS]
#     (defaults: the SmolLM2 default model, nproc, 3 rounds)
# When the model's BF16 sibling (*.BF16.gguf, written by bench/setup_llamacpp.sh) exists, llama.cpp
# also runs it, and laminar's f32/bf16 rows are compared with that peer (same bytes per weight).
# Shared VMs drift by 2x and more between minutes, so the peer and laminar run in ROUNDS
# interleaved rounds (odd rounds peer first, even rounds laminar first); every ratio is taken
# within a round, and the summary gives each round's ratio and the median.
# Writes a JSON summary to stdout; human-readable lines to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-$HOME/.cache/laminar/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${2:-$(nproc)}"
ROUNDS="${3:-3}"
PEER="${LAMINAR_PEERS:-$HOME/.cache/laminar/peers}/llama.cpp/build/bin/llama-bench"
LAMINAR="${LAMINAR_BIN:-build/cli/laminar}"
[ -x "$PEER" ] || { echo "llama.cpp peer missing: run scripts/setup.sh --bench" >&2; exit 1; }
[ -x "$LAMINAR" ] || { echo "laminar missing: run scripts/test.sh (or build) first" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "model not found: $MODEL" >&2; exit 1; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer, got '$ROUNDS'" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
MODEL_BF16="$(dirname "$MODEL")/$(basename "$MODEL" | sed -E 's/\.[^.]+\.gguf$//').BF16.gguf"
[ "$MODEL_BF16" != "$MODEL" ] && [ -f "$MODEL_BF16" ] || MODEL_BF16=""
# ggml's AMX path (used for Q4_x/Q8_0 on AMX CPUs through weight repacking) crashed in
# ggml_backend_amx_mul_mat on the Sapphire Rapids dev VM (llama-cpp-python 0.3.36); then the peer
# runs without repacking from then on, and the JSON says so.
PEER_REPACK=1
run_peer() {  # $1: round directory
  if [ "$PEER_REPACK" = 1 ] &&
      ! "$PEER" -m "$MODEL" -t "$THREADS" -p 512 -n 64 -r 3 -o json > "$1/peer.json" 2> "$1/peer.err"; then
    echo "llama-bench failed on $MODEL ($(tail -1 "$1/peer.err")); running it with --repack 0" >&2
    PEER_REPACK=0
  fi
  if [ "$PEER_REPACK" = 0 ]; then
    "$PEER" -m "$MODEL" -t "$THREADS" -p 512 -n 64 -r 3 --repack 0 -o json > "$1/peer.json"
  fi
  if [ -n "$MODEL_BF16" ]; then
    "$PEER" -m "$MODEL_BF16" -t "$THREADS" -p 512 -n 64 -r 3 -o json > "$1/peer_bf16.json"
  fi
}
run_laminar() {  # $1: round directory. A format the model cannot run (gguf on a checkpoint
  # without quantized blocks) is skipped with laminar's message.
  for w in f32 bf16 w8a8 w4a8 gguf; do
    if ! "$LAMINAR" bench decode --model "$MODEL" --weights "$w" --batch 1 --steps 64 \
        > "$1/decode_$w.json" 2> "$1/decode_$w.err" ||
       ! "$LAMINAR" bench prefill --model "$MODEL" --weights "$w" --prompt-tokens 512 --repeats 2 \
        > "$1/prefill_$w.json" 2> "$1/prefill_$w.err"; then
      { grep -h "laminar" "$1/decode_$w.err" "$1/prefill_$w.err" 2>/dev/null || true; } |
        tail -1 > "$1/skipped_$w"
      if [ "$r" = 1 ]; then echo "$w skipped: $(cat "$1/skipped_$w")" >&2; fi
    fi
  done
}
for r in $(seq 1 "$ROUNDS"); do
  mkdir -p "$tmp/$r"
  if [ $((r % 2)) = 1 ]; then run_peer "$tmp/$r"; run_laminar "$tmp/$r"
  else run_laminar "$tmp/$r"; run_peer "$tmp/$r"; fi
  echo "round $r of $ROUNDS done" >&2
done
python3 - "$tmp" "$MODEL" "$PEER_REPACK" "$ROUNDS" <<'PY'
import json, os, statistics, sys
tmp, model, repack, rounds = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
FORMATS = ("f32", "bf16", "w8a8", "w4a8", "gguf")
def peer_rates(r, name):
    path = os.path.join(tmp, str(r), name)
    if not os.path.exists(path):
        return None
    rows = json.load(open(path))
    return {"prefill_512_tok_s": next(x["avg_ts"] for x in rows if x["n_prompt"] > 0),
            "decode_tok_s": next(x["avg_ts"] for x in rows if x["n_gen"] > 0)}
per_round = []
for r in range(1, rounds + 1):
    rd = {"llama_cpp": peer_rates(r, "peer.json"), "llama_cpp_bf16": peer_rates(r, "peer_bf16.json"),
          "laminar": {}}
    for w in FORMATS:
        if os.path.exists(os.path.join(tmp, str(r), f"skipped_{w}")):
            continue
        d = json.load(open(os.path.join(tmp, str(r), f"decode_{w}.json")))
        p = json.load(open(os.path.join(tmp, str(r), f"prefill_{w}.json")))
        rd["laminar"][w] = {"decode_tok_s": d["decode"][0]["tokens_per_s"],
                            "prefill_512_tok_s": p["prefill"][0]["tokens_per_s"],
                            "decode_dram_fraction": d["decode"][0]["dram_fraction"],
                            "dram_read_gb_per_s": d["dram_read_gb_per_s"]}
    per_round.append(rd)
def med(xs):
    return statistics.median(xs)
out = {"model": model, "rounds": rounds, "llama_cpp_repack": repack, "per_round": per_round,
       "median": {"llama_cpp": {}, "laminar": {}}}
for peer in ("llama_cpp", "llama_cpp_bf16"):
    if per_round[0][peer] is None:
        continue
    out["median"][peer] = {k: med([rd[peer][k] for rd in per_round])
                           for k in ("prefill_512_tok_s", "decode_tok_s")}
print(f"{rounds} interleaved rounds; ratios are within a round: median [each round]",
      file=sys.stderr)
for w in FORMATS:
    if any(w not in rd["laminar"] for rd in per_round):
        skipped = open(os.path.join(tmp, "1", f"skipped_{w}")).read().strip()
        out["median"]["laminar"][w] = {"skipped": skipped or "failed"}
        continue
    row = {k: med([rd["laminar"][w][k] for rd in per_round])
           for k in ("decode_tok_s", "prefill_512_tok_s", "decode_dram_fraction")}
    line = f"{w:5s} decode {row['decode_tok_s']:7.1f} prefill {row['prefill_512_tok_s']:7.1f} tok/s"
    peers = [("llama_cpp", "")] + ([("llama_cpp_bf16", " BF16")] if w in ("f32", "bf16") and
                                   per_round[0]["llama_cpp_bf16"] else [])
    for peer, label in peers:
        suffix = "" if peer == "llama_cpp" else "_bf16"
        for phase, key in (("decode", "decode_tok_s"), ("prefill", "prefill_512_tok_s")):
            ratios = [rd["laminar"][w][key] / rd[peer][key] for rd in per_round]
            row[f"{phase}_ratio_vs_llama_cpp{suffix}"] = med(ratios)
            row[f"{phase}_ratios_vs_llama_cpp{suffix}"] = ratios
            line += (f"; {phase} {med(ratios):.2f}x llama.cpp{label} "
                     f"[{' '.join(f'{x:.2f}' for x in ratios)}]")
    out["median"]["laminar"][w] = row
    print(line, file=sys.stderr)
print(json.dumps(out, indent=2))
PY
