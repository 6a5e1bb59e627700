#!/usr/bin/env python3
"""Writes the quickstart's arithmetic dataset: configs/data/arithmetic_{train,test}.jsonl.

Small grade-school problems (sums and differences of numbers up to 30, some as one-line word
problems) that SmolLM2-135M-Instruct solves now and then when sampling at temperature 1 (pass@1
about 0.1), so a GRPO group usually holds both right and wrong answers: the signal the quickstart
learns from. One JSON object a line: `prompt` (the question), `ground_truth` (the number, as text)
and `data_source` ("arithmetic"); score with the `gsm8k` reward (it reads the last number).

The split is by problem: no test question appears in the train set. Deterministic (fixed seed),
standard library only: `python3 scripts/make_arithmetic_data.py [--out-dir configs/data]`.
"""
import argparse
import json
import os
import random

NAMES = ["Tom", "Anna", "Sam", "Lily", "Ben", "Mia", "Leo", "Emma", "Noah", "Zoe"]
THINGS = ["apples", "books", "marbles", "stickers", "pencils", "cookies", "shells", "cards"]


def problems():
    """Every problem the templates make, as two lists of (question, answer) in a fixed order:
    bare sums and differences, and word problems."""
    bare, word = [], []
    for a in range(1, 31):
        for b in range(1, 31):
            bare.append((f"What is {a} + {b}?", a + b))
            if a > b:
                bare.append((f"What is {a} - {b}?", a - b))
    for name in NAMES:
        for thing in THINGS:
            for a in range(2, 16):
                for b in range(2, 10):
                    word.append((f"{name} has {a} {thing} and gets {b} more. "
                                f"How many {thing} does {name} have now?", a + b))
                    word.append((f"{name} has {a + b} {thing} and gives away {b}. "
                                f"How many {thing} does {name} have left?", a))
    return bare, word


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "configs",
                                                     "data"))
    p.add_argument("--train", type=int, default=2000, help="train problems (half of each kind)")
    p.add_argument("--test", type=int, default=200, help="held-out problems (half of each kind)")
    p.add_argument("--seed", type=int, default=20261130)
    a = p.parse_args()
    rng = random.Random(a.seed)
    train, test = [], []
    for kind in problems():
        rng.shuffle(kind)
        if (a.train + a.test) // 2 > len(kind):
            raise SystemExit(f"asked for {(a.train + a.test) // 2} problems of a kind, "
                             f"the templates make {len(kind)}")
        test += kind[:a.test // 2]
        train += kind[a.test // 2:a.test // 2 + a.train // 2]
    rng.shuffle(train)
    rng.shuffle(test)
    assert not {q for q, _ in test} & {q for q, _ in train}
    for name, part in (("arithmetic_train.jsonl", train), ("arithmetic_test.jsonl", test)):
        with open(os.path.join(a.out_dir, name), "w") as f:
            for q, ans in part:
                f.write(json.dumps({"prompt": q, "ground_truth": str(ans),
                                    "data_source": "arithmetic"}) + "\n")
        print(f"wrote {len(part)} problems to {os.path.join(a.out_dir, name)}")


if __name__ == "__main__":
    main()
