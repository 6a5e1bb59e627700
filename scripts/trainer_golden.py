#!/usr/bin/env python3
"""Golden loss, per-token logprobs and parameter gradients of stories260K on a fixed batch, from an
independent implementation: a plain PyTorch Llama written here from llama2.c's model.py
(karpathy/llama2.c: RMSNorm eps 1e-5, interleaved RoPE theta 10000, GQA, SwiGLU, tied classifier),
run in float64. tests/trainer/stories260k_train_test.cc compares laminar's trainer with it.

Regenerate (needs torch; scripts/setup.sh --bench installs it):
  ~/.cache/laminar/bench-venv/bin/python scripts/trainer_golden.py \
      ../shared/data/models/stories260K > tests/data/stories260k_train_golden.json

The batch: two sequences from the real greedy traces in that folder; the loss is the token-mean
negative logprob of each next token, over every position except the first four of sequence 0
(a "prompt", masked as RL masks prompts). Gradients are summarised per tensor (L2 norm, sum, and
eight elements at fixed indices) to keep the file small.
"""
import json
import struct
import sys

import numpy as np
import torch


def load_llama2c(path):
    with open(path, "rb") as f:
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("7i", f.read(28))
        shared = vocab > 0
        vocab = abs(vocab)
        data = np.frombuffer(f.read(), dtype=np.float32)
    head = dim // n_heads
    kv_dim = n_kv * head
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        t = torch.from_numpy(data[off:off + n].copy()).reshape(shape).double()
        off += n
        return t

    w = {"model.embed_tokens.weight": take(vocab, dim)}
    rms_att = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    rms_ffn = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    w["model.norm.weight"] = take(dim)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = rms_att[i].clone()
        w[p + "self_attn.q_proj.weight"] = wq[i].clone()
        w[p + "self_attn.k_proj.weight"] = wk[i].clone()
        w[p + "self_attn.v_proj.weight"] = wv[i].clone()
        w[p + "self_attn.o_proj.weight"] = wo[i].clone()
        w[p + "post_attention_layernorm.weight"] = rms_ffn[i].clone()
        w[p + "mlp.gate_proj.weight"] = w1[i].clone()
        w[p + "mlp.down_proj.weight"] = w2[i].clone()
        w[p + "mlp.up_proj.weight"] = w3[i].clone()
    assert shared, "stories260K shares its classifier with the embedding"
    cfg = dict(dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv=n_kv, head=head)
    return cfg, w


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def rope(x, n_heads, head):
    # x [T, H*D]; rotate adjacent pairs (2i, 2i+1) by pos * 10000^(-2i/D), llama2.c's layout.
    t = x.shape[0]
    x = x.view(t, n_heads, head // 2, 2)
    inv = 1.0 / (10000.0 ** (torch.arange(0, head, 2, dtype=torch.float64) / head))
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = x[..., 0], x[..., 1]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(t, n_heads * head)


def forward(cfg, w, ids):
    t = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["n_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"])
        q = rope(h @ w[p + "self_attn.q_proj.weight"].T, cfg["n_heads"], cfg["head"])
        k = rope(h @ w[p + "self_attn.k_proj.weight"].T, cfg["n_kv"], cfg["head"])
        v = h @ w[p + "self_attn.v_proj.weight"].T
        q = q.view(t, cfg["n_heads"], cfg["head"]).transpose(0, 1)
        rep = cfg["n_heads"] // cfg["n_kv"]
        k = k.view(t, cfg["n_kv"], cfg["head"]).transpose(0, 1).repeat_interleave(rep, 0)
        v = v.view(t, cfg["n_kv"], cfg["head"]).transpose(0, 1).repeat_interleave(rep, 0)
        s = q @ k.transpose(1, 2) / cfg["head"] ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        att = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(t, -1)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"])
    return torch.log_softmax(x @ w["model.embed_tokens.weight"].T, -1)


def main():
    folder = sys.argv[1]
    cfg, w = load_llama2c(folder + "/stories260K.bin")
    seqs = []
    for name, n in (("derived_greedy_trace_once_upon_a_time_64.json", 40),
                    ("derived_greedy_trace_empty_prompt_200.json", 25)):
        trace = json.load(open(f"{folder}/{name}"))
        ids = [p["input"] for p in trace["positions"]][:n]
        seqs.append(ids)
    for t in w.values():
        t.requires_grad_(True)
    total, count, logprobs, masks = 0, 0, [], []
    for si, ids in enumerate(seqs):
        lp_all = forward(cfg, w, ids)
        for i in range(len(ids)):
            has_target = i + 1 < len(ids)
            masked = has_target and not (si == 0 and i < 4)
            lp = lp_all[i, ids[i + 1]] if has_target else None
            logprobs.append(float(lp.detach()) if has_target else 0.0)
            masks.append(1 if masked else 0)
            if masked:
                total = total - lp
                count += 1
    loss = total / count
    loss.backward()
    grads = {}
    for name, t in sorted(w.items()):
        g = t.grad.reshape(-1)
        idx = [(k * 7919 + 13) % g.numel() for k in range(8)]
        grads[name] = {"norm": float(g.norm()), "sum": float(g.sum()), "index": idx,
                       "values": [float(g[i]) for i in idx]}
    out = {"source": "scripts/trainer_golden.py (independent float64 PyTorch Llama after "
                     "llama2.c model.py) on ../shared/data/models/stories260K/stories260K.bin",
           "torch": torch.__version__, "sequences": seqs, "loss_mask": masks,
           "loss": float(loss.detach()), "logprobs": logprobs, "grads": grads}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
