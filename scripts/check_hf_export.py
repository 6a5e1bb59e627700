#!/usr/bin/env python3
"""Checks a Hugging Face folder written by laminar's SaveHfCheckpoint with the real libraries.

Loads the folder with transformers (AutoConfig + AutoModelForCausalLM, torch on CPU), fails on
missing / unexpected / mismatched weights, checks that the loaded parameters equal the safetensors
bytes, prints the logits of a few token ids, and optionally compares them with a JSON file.

  check_hf_export.py DIR [--tokens 1,2,3] [--expected-logits F.json] [--write-logits F.json]
                         [--interleaved-source F.safetensors] [--trace F.json] [--atol 1e-4]

--interleaved-source: a safetensors file with the same weights in the interleaved RoPE layout
(llama2.c / GGUF); each q/k weight and bias must equal transformers' convert_llama_weights_to_hf
`permute` of it, every other tensor must be equal.

--trace: a per-position logits trace of llama2.c's run.c (../shared/data/models/stories260K/
derived_greedy_trace_*.json: positions[i].input, .top5 [[id, logit]...], .logits at some
positions); the folder's logits for the same inputs must match within --atol. Positions > 0 check
that the RoPE conversion computes the same function.

Needs: pip install torch transformers safetensors (e.g. in a venv outside the repo).
Exit status 0 when every check passes.
"""
import argparse
import json
import os
import re
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM


def folder_tensors(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(load_file(os.path.join(folder, name)))
    return tensors


def hf_permute(w, n_heads):
    """convert_llama_weights_to_hf.py's permute (interleaved -> rotate-half), for 2-D or 1-D."""
    dim1 = w.shape[0]
    rest = w.shape[1:]
    return w.reshape(n_heads, dim1 // n_heads // 2, 2, *rest).transpose(1, 2).reshape(dim1, *rest)


def check_loading(folder, config):
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, config=config, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"FAIL loading info: {problems}")
        return None
    print(f"ok   loaded {type(model).__name__}: no missing/unexpected/mismatched weights")
    return model


def check_parameters(model, tensors, config):
    state = model.state_dict()
    bad = 0
    for name, t in tensors.items():
        if name not in state:
            print(f"FAIL tensor {name} not in the model's state_dict")
            bad += 1
            continue
        if not torch.equal(state[name], t.to(torch.float32)):
            print(f"FAIL tensor {name} differs from the file")
            bad += 1
    if config.tie_word_embeddings:
        if not torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"]):
            print("FAIL lm_head is not tied to the embeddings")
            bad += 1
    if bad == 0:
        print(f"ok   {len(tensors)} parameters equal the safetensors bytes")
    return bad


def check_interleaved(tensors, source, config):
    ref = load_file(source)
    bad = 0
    if sorted(ref) != sorted(tensors):
        print("FAIL tensor names differ from the interleaved source")
        return 1
    pattern = re.compile(r"model\.layers\.\d+\.self_attn\.([qk])_proj\.(weight|bias)$")
    permuted = 0
    for name, t in ref.items():
        m = pattern.match(name)
        if m:
            heads = config.num_attention_heads if m.group(1) == "q" else config.num_key_value_heads
            t = hf_permute(t, heads)
            permuted += 1
        if not torch.equal(t, tensors[name]):
            print(f"FAIL {name}: folder != permute(interleaved source)" if m else
                  f"FAIL {name}: differs from the interleaved source")
            bad += 1
    if bad == 0:
        print(f"ok   {permuted} q/k tensors equal HF permute() of the interleaved source; "
              f"{len(ref) - permuted} others equal")
    return bad


def check_trace(model, trace_path, atol):
    with open(trace_path) as f:
        positions = json.load(f)["positions"]
    tokens = [p["input"] for p in positions]
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    worst, compared = 0.0, 0
    for p in positions:
        row = logits[p["pos"]]
        pairs = [(i, v) for i, v in p["top5"]]
        if "logits" in p:
            pairs += list(enumerate(p["logits"]))
        for i, v in pairs:
            worst = max(worst, abs(row[i].item() - v))
            compared += 1
        if row.argmax().item() != p["next"]:
            print(f"FAIL trace pos {p['pos']}: argmax {row.argmax().item()} != {p['next']}")
            return 1
    ok = worst <= atol
    print(f"{'ok  ' if ok else 'FAIL'} trace: {len(tokens)} positions, {compared} logits, "
          f"max |diff| {worst:.3g} (atol {atol}), argmax equal everywhere")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("folder")
    p.add_argument("--tokens", default="1,2,3,4")
    p.add_argument("--expected-logits")
    p.add_argument("--write-logits")
    p.add_argument("--interleaved-source")
    p.add_argument("--trace")
    p.add_argument("--atol", type=float, default=1e-4)
    args = p.parse_args()

    config = AutoConfig.from_pretrained(args.folder)
    print(f"ok   config: {config.architectures} layers={config.num_hidden_layers} "
          f"heads={config.num_attention_heads}/{config.num_key_value_heads} "
          f"head_dim={config.head_dim} vocab={config.vocab_size}")
    model = check_loading(args.folder, config)
    if model is None:
        return 1
    tensors = folder_tensors(args.folder)
    bad = check_parameters(model, tensors, config)
    if args.interleaved_source:
        bad += check_interleaved(tensors, args.interleaved_source, config)
    if args.trace:
        bad += check_trace(model, args.trace, args.atol)

    tokens = [int(t) % config.vocab_size for t in args.tokens.split(",")]
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    print(f"tokens {tokens}")
    for i, row in enumerate(logits):
        print(f"  pos {i}: " + " ".join(f"{v:.5f}" for v in row[:8].tolist()) + " ...")
    if args.write_logits:
        with open(args.write_logits, "w") as f:
            json.dump({"tokens": tokens, "logits": logits.tolist()}, f)
    if args.expected_logits:
        with open(args.expected_logits) as f:
            expected = json.load(f)
        exp = torch.tensor(expected["logits"], dtype=torch.float32)
        if expected.get("tokens", tokens) != tokens or exp.shape != logits.shape:
            print(f"FAIL expected logits are for tokens {expected.get('tokens')} shape {tuple(exp.shape)}")
            bad += 1
        else:
            err = (exp - logits).abs().max().item()
            ok = err <= args.atol
            print(f"{'ok  ' if ok else 'FAIL'} max |logit - expected| = {err:.3g} (atol {args.atol})")
            bad += 0 if ok else 1
    print("PASS" if bad == 0 else f"FAIL ({bad} problems)")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
