#!/usr/bin/env python3
"""PyTorch peer for `laminar bench train`: forward + backward of Hugging Face's LlamaForCausalLM
with the same shape as laminar's model, on the CPU, in the same run. Prints one JSON line.

Weights are randomly initialised: throughput does not depend on their values. bf16 runs under
torch.autocast (bf16 compute, f32 master weights), the same semantics as laminar's bf16 compute.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True, help="JSON with the model's dimensions")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--seqs", type=int, default=8)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    c = json.loads(a.config)
    config = LlamaConfig(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"], max_position_embeddings=max(c["max_position_embeddings"], a.seq_len),
        rms_norm_eps=c["rms_norm_eps"], rope_theta=c["rope_theta"],
        tie_word_embeddings=c["tie_word_embeddings"], attention_bias=c["attention_bias"])
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).float().train()
    ids = torch.randint(0, c["vocab_size"], (a.seqs, a.seq_len))
    times = []
    for rep in range(a.repeats + 1):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        elapsed = time.perf_counter() - start
        if rep > 0:
            times.append(elapsed)
    median = statistics.median(times)
    print(json.dumps({"tokens_per_s": a.seqs * a.seq_len / median, "median_s": median,
                      "torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
