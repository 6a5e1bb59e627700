#!/usr/bin/env python3
"""Turns public datasets into laminar's prompt rows, as verl's examples/data_preprocess scripts do.

One JSON object a line out: `prompt` (the instruction the policy sees), `ground_truth` (what the
reward compares with) and `data_source` (which picks the reward under `reward.name: auto`).

  python3 scripts/prepare_data.py gsm8k     --input gsm8k/train.jsonl   --output data/gsm8k_train.jsonl
  python3 scripts/prepare_data.py countdown --input countdown.jsonl     --output data/countdown.jsonl
  python3 scripts/prepare_data.py math      --input math500/test.jsonl  --output data/math500.jsonl

Inputs (JSON Lines; `\\uXXXX` escapes are decoded by the JSON parser):
- gsm8k: openai/grade-school-math rows {question, answer}; the answer's final `#### N` line is the
  ground truth. The instruction is verl's ("Let's think step by step and output the final answer
  after \\"####\\".").
- countdown: rows {input: "30,100,93", output: "23"} (dllm-reasoning/d1) or {nums: [...], target: N}
  (Jiayi-Pan/Countdown-Tasks-3to4); the prompt is TinyZero's (<think> ... </think>, then the
  equation in <answer> ... </answer>), the ground truth {"target": N, "numbers": [...]}.
- math: MATH / MATH-500 rows {problem, answer} (or {problem, solution} with a \\boxed{} answer).
Standard library only. A row without the fields it needs stops the script with its line number.
"""
import argparse
import json
import os
import re
import sys

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def fail(where, message):
    sys.exit(f"prepare_data: {where}: {message}")


def gsm8k(row, where):
    if "question" not in row or "answer" not in row:
        fail(where, "a GSM8K row needs 'question' and 'answer'")
    m = re.search(r"####\s*(.+?)\s*$", row["answer"])
    if not m:
        fail(where, "the answer has no final '#### N' line")
    return {"prompt": f"{row['question']} {GSM8K_INSTRUCTION}",
            "ground_truth": m.group(1).replace(",", ""), "data_source": "openai/gsm8k"}


def countdown(row, where):
    if "input" in row and "output" in row:
        numbers = [int(x) for x in str(row["input"]).split(",")]
        target = int(row["output"])
    elif "nums" in row and "target" in row:
        numbers, target = [int(x) for x in row["nums"]], int(row["target"])
    else:
        fail(where, "a Countdown row needs 'input' and 'output' (or 'nums' and 'target')")
    prompt = (f"Using the numbers {numbers}, create an equation that equals {target}. You can use "
              "basic arithmetic operations (+, -, *, /) and each number can only be used once. "
              "Show your work in <think> </think> tags. And return the final answer in <answer> "
              "</answer> tags, for example <answer> (1 + 2) / 3 </answer>.")
    return {"prompt": prompt, "ground_truth": json.dumps({"target": target, "numbers": numbers}),
            "data_source": "countdown"}


def boxed(text):
    """The content of the last \\boxed{...} in text, with nested braces; None if there is none."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1:j]
    return None


def math(row, where):
    if "problem" not in row:
        fail(where, "a MATH row needs 'problem'")
    answer = row.get("answer") or boxed(row.get("solution", ""))
    if not answer:
        fail(where, "a MATH row needs 'answer' or a solution with \\boxed{}")
    return {"prompt": f"{row['problem']} {MATH_INSTRUCTION}", "ground_truth": answer,
            "data_source": "HuggingFaceH4/MATH-500"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset", choices=["gsm8k", "countdown", "math"])
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--limit", type=int, default=0, help="first N rows only (0: all)")
    a = p.parse_args()
    convert = {"gsm8k": gsm8k, "countdown": countdown, "math": math}[a.dataset]
    rows = []
    with open(a.input) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{a.input}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                fail(where, f"not JSON: {e}")
            if not isinstance(row, dict):
                fail(where, "not a JSON object")
            try:
                rows.append(convert(row, where))
            except (TypeError, ValueError) as e:
                fail(where, f"bad field: {e}")
            if a.limit and len(rows) == a.limit:
                break
    os.makedirs(os.path.dirname(a.output) or ".", exist_ok=True)
    with open(a.output, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(rows)} {a.dataset} prompts to {a.output}")


if __name__ == "__main__":
    main()
