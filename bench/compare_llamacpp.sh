#!/usr/bin/env bash
# Decode and prefill throughput of laminar (every weight format: f32, bf16, w8a8, w4a8, and gguf =
# the file's own blocks) and llama.cpp on the same GGUF file, measured in the
# same run, with the ratio. Needs scripts/setup.sh --bench (builds the llama.cpp peer).
#   bench/compare_llamacpp.sh [MODEL.gguf] [THREADS]     (default: the SmolLM2 default model, nproc)
# When the model's BF16 sibling (*.BF16.gguf, written by bench/setup_llamacpp.sh) exists, llama.cpp
# also runs it, and laminar's f32/bf16 rows are compared with that peer (same bytes per weight).
# Writes a JSON summary to stdout; human-readable lines to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:-$HOME/.cache/laminar/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${2:-$(nproc)}"
PEER="${LAMINAR_PEERS:-$HOME/.cache/laminar/peers}/llama.cpp/build/bin/llama-bench"
LAMINAR="${LAMINAR_BIN:-build/cli/laminar}"
[ -x "$PEER" ] || { echo "llama.cpp peer missing: run scripts/setup.sh --bench" >&2; exit 1; }
[ -x "$LAMINAR" ] || { echo "laminar missing: run scripts/test.sh (or build) first" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# ggml's AMX path (used for Q4_x/Q8_0 on AMX CPUs through weight repacking) crashed in
# ggml_backend_amx_mul_mat on the Sapphire Rapids dev VM (llama-cpp-python 0.3.36); then the peer
# runs again without repacking, and the JSON says so.
PEER_REPACK=1
if ! "$PEER" -m "$MODEL" -t "$THREADS" -p 512 -n 64 -r 3 -o json > "$tmp/peer.json" 2> "$tmp/peer.err"; then
  echo "llama-bench failed on $MODEL ($(tail -1 "$tmp/peer.err")); running it with --repack 0" >&2
  PEER_REPACK=0
  "$PEER" -m "$MODEL" -t "$THREADS" -p 512 -n 64 -r 3 --repack 0 -o json > "$tmp/peer.json"
fi
MODEL_BF16="$(dirname "$MODEL")/$(basename "$MODEL" | sed -E 's/\.[^.]+\.gguf$//').BF16.gguf"
if [ -f "$MODEL_BF16" ] && [ "$MODEL_BF16" != "$MODEL" ]; then
  "$PEER" -m "$MODEL_BF16" -t "$THREADS" -p 512 -n 64 -r 3 -o json > "$tmp/peer_bf16.json"
fi
for w in f32 bf16 w8a8 w4a8 gguf; do
  "$LAMINAR" bench decode --model "$MODEL" --weights "$w" --batch 1 --steps 32 > "$tmp/decode_$w.json" 2>/dev/null
  "$LAMINAR" bench prefill --model "$MODEL" --weights "$w" --prompt-tokens 512 --repeats 2 > "$tmp/prefill_$w.json" 2>/dev/null
done
python3 - "$tmp" "$MODEL" "$PEER_REPACK" <<'PY'
import json, os, sys
tmp, model, repack = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def peer_rates(name):
    path = os.path.join(tmp, name)
    if not os.path.exists(path):
        return None
    rows = json.load(open(path))
    return (next(r["avg_ts"] for r in rows if r["n_prompt"] > 0),
            next(r["avg_ts"] for r in rows if r["n_gen"] > 0))
peer_pp, peer_tg = peer_rates("peer.json")
bf16_peer = peer_rates("peer_bf16.json")
out = {"model": model, "llama_cpp": {"prefill_512_tok_s": peer_pp, "decode_tok_s": peer_tg,
                                     "repack": repack},
       "laminar": {}}
if bf16_peer:
    out["llama_cpp_bf16"] = {"prefill_512_tok_s": bf16_peer[0], "decode_tok_s": bf16_peer[1]}
for w in ("f32", "bf16", "w8a8", "w4a8", "gguf"):
    d = json.load(open(os.path.join(tmp, f"decode_{w}.json")))
    p = json.load(open(os.path.join(tmp, f"prefill_{w}.json")))
    dec, pre = d["decode"][0]["tokens_per_s"], p["prefill"][0]["tokens_per_s"]
    row = {"decode_tok_s": dec, "prefill_512_tok_s": pre,
           "decode_ratio_vs_llama_cpp": dec / peer_tg,
           "prefill_ratio_vs_llama_cpp": pre / peer_pp,
           "decode_dram_fraction": d["decode"][0]["dram_fraction"],
           "dram_read_gb_per_s": d["dram_read_gb_per_s"]}
    line = (f"{w:5s} decode {dec:7.1f} tok/s ({dec/peer_tg:.2f}x llama.cpp {peer_tg:.1f}); "
            f"prefill {pre:7.1f} tok/s ({pre/peer_pp:.2f}x llama.cpp {peer_pp:.1f})")
    if bf16_peer and w in ("f32", "bf16"):
        row["decode_ratio_vs_llama_cpp_bf16"] = dec / bf16_peer[1]
        row["prefill_ratio_vs_llama_cpp_bf16"] = pre / bf16_peer[0]
        line += (f"; vs llama.cpp BF16: decode {dec/bf16_peer[1]:.2f}x ({bf16_peer[1]:.1f}), "
                 f"prefill {pre/bf16_peer[0]:.2f}x ({bf16_peer[0]:.1f})")
    out["laminar"][w] = row
    print(line, file=sys.stderr)
print(json.dumps(out, indent=2))
PY
