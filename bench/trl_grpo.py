#!/usr/bin/env python3
"""TRL peer for bench/rl_vs_trl.sh: GRPO with TRL's GRPOTrainer (from PyPI, on the CPU, generation
with transformers, no vLLM) on the model, data, reward and hyper-parameters of a laminar recipe.

It reads the *effective* recipe that `laminar run` writes into its run folder (every key, defaults
included), so both sides run the same configuration:
  model.path               -> the same GGUF, loaded dequantized to f32 by transformers
  data.path, data.chat_format, data.system_message, data.seed
                           -> conversational prompts rendered with the model's own chat template
                              (SmolLM2's inserts its default system message, as laminar's `auto`)
  reward (gsm8k)           -> gsm8k_score below, a port of reward/gsm8k.cc
  rollout.n, temperature, top_p, top_k, min_p, max_tokens
                           -> num_generations, temperature, top_p, top_k, min_p,
                              max_completion_length
  actor.groups_per_step    -> generation batch = groups_per_step * n completions per step
  actor.mini_batch_size    -> gradient_accumulation_steps x per_device_train_batch_size (0: the
                              whole batch, one update), in micro-batches of --micro-batch samples
  actor.ppo_epochs         -> num_iterations
  actor.lr, grad_clip, weight_decay, lr_schedule, warmup_steps
                           -> learning_rate, max_grad_norm, weight_decay, lr_scheduler_type,
                              warmup_steps (AdamW)
  actor.kl_coef            -> beta (0: no reference model)
  actor.compute            -> bf16 (autocast) or f32
  actor.clip_ratio_low/high, loss_agg_mode, loss, adv_estimator
                           -> epsilon/epsilon_high, loss_type, importance_sampling_level,
                              scale_rewards
A "step" is one generation batch (groups_per_step prompts x n samples), laminar's global step.

Measures the wall time at the end of every step (callback) and counts the trained samples and their
tokens exactly from the batch the trainer builds (prompt mask + completion mask, so the completion's
EOS counts as in laminar's response_ids). Writes one JSON object to --out.
"""
import argparse
import json
import math
import os
import re
import sys
import time


# ---- the gsm8k reward: a line-by-line port of laminar's reward/gsm8k.cc -------------------------

REL_TOL = 1e-9  # reward/answer.h kRelativeTolerance


def _digit(c):
    return "0" <= c <= "9"


def _alnum(c):
    return c.isascii() and c.isalnum()


def _negative_before(s, i):
    if i >= 1 and s[i - 1] == "$":
        i -= 1
        if i >= 1 and s[i - 1] == "\\":
            i -= 1
    if i >= 1 and s[i - 1] in ("-", "\u2212"):
        sign = i - 1
    else:
        return False
    if sign == 0:
        return True
    return not (_alnum(s[sign - 1]) or s[sign - 1] in ")}]")


def _parse_unsigned(s, i):
    j = i
    digits = ""
    while j < len(s) and _digit(s[j]):
        digits += s[j]
        j += 1
    if digits and len(digits) <= 3:  # thousands groups: ",ddd" not followed by another digit
        while (j + 3 < len(s) and s[j] == "," and all(_digit(c) for c in s[j + 1:j + 4])
               and (j + 4 >= len(s) or not _digit(s[j + 4]))):
            digits += s[j + 1:j + 4]
            j += 4
    if j + 1 < len(s) and s[j] == "." and _digit(s[j + 1]):
        digits += "."
        j += 1
        while j < len(s) and _digit(s[j]):
            digits += s[j]
            j += 1
    return (float(digits) if digits and digits != "." else 0.0), j


def find_numbers(s):
    out, i = [], 0
    while i < len(s):
        starts = _digit(s[i]) or (s[i] == "." and i + 1 < len(s) and _digit(s[i + 1])
                                  and (i == 0 or not _digit(s[i - 1])))
        if not starts:
            i += 1
            continue
        v, end = _parse_unsigned(s, i)
        out.append(-v if _negative_before(s, i) else v)
        i = end
    return out


def _first_number(s):
    v = find_numbers(s)
    return v[0] if v else None


def _close_brace(s, open_at):
    depth, i = 0, open_at
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            i += 2
            continue
        if s[i] == "{":
            depth += 1
        if s[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _last_boxed_content(s):
    pos, size = -1, 0
    for cmd in ("\\boxed", "\\fbox"):
        p = s.rfind(cmd)
        if p != -1 and p > pos:
            pos, size = p, len(cmd)
    if pos == -1:
        return None
    at = pos + size
    if at < len(s) and s[at] == "{":
        close = _close_brace(s, at)
        return None if close is None else s[at + 1:close - 1]
    if at < len(s) and s[at] == " ":
        rest = s[at + 1:]
        end = rest.find("$")
        content = (rest if end == -1 else rest[:end]).strip()
        if content:
            return content
    return None


def extract_gsm8k_answer(response):
    hashes = response.rfind("####")
    if hashes != -1:
        v = _first_number(response[hashes + 4:])
        if v is not None:
            return v
    boxed = _last_boxed_content(response)
    if boxed is not None:
        eq = boxed.rfind("=")
        v = _first_number(boxed[eq + 1:] if eq != -1 else boxed)
        if v is not None:
            return v
    numbers = find_numbers(response)
    return numbers[-1] if numbers else None


def parse_ground_truth(truth):
    hashes = truth.rfind("####")
    if hashes != -1:
        return _first_number(truth[hashes + 4:])
    numbers = find_numbers(truth)
    if len(numbers) != 1 or any(c.isascii() and c.isalpha() for c in truth):
        return None
    return numbers[0]


def numbers_equal(a, b):
    return (math.isfinite(a) and math.isfinite(b)
            and abs(a - b) <= REL_TOL * max(abs(a), abs(b)))


def gsm8k_score(response, ground_truth, format_score=0.0, failure_score=0.0):
    truth = parse_ground_truth(str(ground_truth))
    if truth is None:
        return failure_score  # laminar: an error, scored reward.failure_score
    answer = extract_gsm8k_answer(response)
    if answer is None:
        return 0.0
    return 1.0 if numbers_equal(answer, truth) else format_score


# ---- the recipe -> TRL ---------------------------------------------------------------------------

KNOWN_MODELS = {"smollm2-135m-instruct": "SmolLM2-135M-Instruct.Q4_1.gguf"}  # model/model_path.cc


def resolve_model(path):
    """Returns (directory, gguf file name or None) as laminar's ResolveModelPath would find it."""
    if not os.path.exists(path) and path in KNOWN_MODELS:
        cache = (os.environ.get("LAMINAR_MODEL_CACHE")
                 or os.path.expanduser("~/.cache/laminar/models"))
        path = os.path.join(cache, KNOWN_MODELS[path])
    if not os.path.exists(path):
        sys.exit(f"trl_grpo: model '{path}' not found (run scripts/setup.sh)")
    if os.path.isdir(path):
        return path, None
    if not path.endswith(".gguf"):
        sys.exit(f"trl_grpo: model '{path}': the peer loads GGUF files and Hugging Face folders")
    return os.path.dirname(os.path.abspath(path)), os.path.basename(path)


def trl_settings(r, micro_batch):
    """Checks the recipe keys this peer maps and returns the GRPOConfig keyword arguments; the
    trainer runs forward/backward on `micro_batch` samples at a time (0: rollout.n)."""
    actor, rollout = r["actor"], r["rollout"]
    unsupported = []
    loss_type = {"token-mean": "dapo", "seq-mean-token-mean": "grpo",
                 "seq-mean-token-sum-norm": "dr_grpo"}.get(actor["loss_agg_mode"])
    if loss_type is None:
        unsupported.append(f"actor.loss_agg_mode={actor['loss_agg_mode']}")
    level = {"vanilla": "token", "gspo": "sequence"}.get(actor["loss"])
    if level is None:
        unsupported.append(f"actor.loss={actor['loss']}")
    scale = {"grpo": "group", "dr_grpo": "none"}.get(actor["adv_estimator"])
    if scale is None:
        unsupported.append(f"actor.adv_estimator={actor['adv_estimator']}")
    schedule = {"constant": "constant", "constant_with_warmup": "constant_with_warmup",
                "cosine": "cosine"}.get(actor["lr_schedule"])
    if schedule is None:
        unsupported.append(f"actor.lr_schedule={actor['lr_schedule']}")
    if actor["optimizer"] != "adamw":
        unsupported.append(f"actor.optimizer={actor['optimizer']}")
    if float(actor.get("entropy_coef", 0)) != 0:
        unsupported.append("actor.entropy_coef != 0")
    if rollout.get("stop"):
        unsupported.append("rollout.stop")
    if not rollout.get("stop_at_eos", True):
        unsupported.append("rollout.stop_at_eos=false")
    if unsupported:
        sys.exit("trl_grpo: the TRL peer has no equivalent for " + ", ".join(unsupported))
    n = int(rollout["n"])
    batch = int(actor["groups_per_step"]) * n
    mini = int(actor.get("mini_batch_size", 0)) or batch
    micro = min(micro_batch or n, mini)
    if batch % mini or mini % micro:
        sys.exit(f"trl_grpo: actor.mini_batch_size={mini} must divide the batch ({batch}) and the "
                 f"micro-batch ({micro}) must divide it")
    return dict(
        num_generations=n,
        generation_batch_size=batch,  # one generation per step, split into micro-batches
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=mini // micro,  # one optimizer update per mini-batch
        num_iterations=int(actor.get("ppo_epochs", 1)),
        max_completion_length=int(rollout["max_tokens"]),
        temperature=float(rollout["temperature"]),
        top_p=float(rollout.get("top_p", 1)),
        top_k=int(rollout.get("top_k", 0)),
        min_p=float(rollout["min_p"]) if float(rollout.get("min_p", 0)) > 0 else None,
        learning_rate=float(actor["lr"]),
        max_grad_norm=float(actor["grad_clip"]) if float(actor["grad_clip"]) > 0 else 0.0,
        weight_decay=float(actor.get("weight_decay", 0)),
        lr_scheduler_type=schedule,
        warmup_steps=int(actor.get("warmup_steps", 0)),
        beta=float(actor.get("kl_coef", 0)),
        epsilon=float(actor["clip_ratio_low"]),
        epsilon_high=float(actor["clip_ratio_high"]),
        loss_type=loss_type,
        importance_sampling_level=level,
        scale_rewards=scale,
        seed=int(r["data"].get("seed", 1)),
    )


def load_prompts(r, repo_root):
    d = r["data"]
    path = d["path"] if os.path.isabs(d["path"]) else os.path.join(repo_root, d["path"])
    rows = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            prompt = row[d.get("prompt_key", "prompt")]
            truth = row[d.get("ground_truth_key", "ground_truth")]
            if d.get("chat_format", ""):
                if isinstance(prompt, str):
                    prompt = [{"role": "user", "content": prompt}]
                if d.get("system_message") and prompt[0]["role"] != "system":
                    prompt = [{"role": "system", "content": d["system_message"]}] + prompt
            rows.append({"prompt": prompt, "ground_truth": str(truth)})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipe", required=True, help="effective recipe.yaml of a laminar run")
    p.add_argument("--steps", type=int, required=True, help="generation batches (laminar steps)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--micro-batch", type=int, default=0,
                   help="samples per forward/backward, gradients accumulated to the recipe's "
                        "batch (0: rollout.n, one group; the whole batch at once needs ~12 GB)")
    p.add_argument("--repo-root", default=".", help="base of relative data paths")
    p.add_argument("--out", required=True, help="JSON result file")
    p.add_argument("--work-dir", required=True, help="scratch folder for the trainer")
    a = p.parse_args()

    import torch
    import yaml
    torch.set_num_threads(a.threads)
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    with open(a.recipe) as f:
        r = yaml.safe_load(f)
    if r["reward"].get("name") != "gsm8k" or r["reward"].get("python") or r["reward"].get("c") \
            or r["reward"].get("components"):
        sys.exit("trl_grpo: the TRL peer implements only the built-in gsm8k reward")
    format_score = float((r["reward"].get("params") or {}).get("format_score", 0.0))
    failure_score = float(r["reward"].get("failure_score", 0.0))
    settings = trl_settings(r, a.micro_batch)
    n = settings["num_generations"]
    updates_per_step = (settings["generation_batch_size"] // settings["per_device_train_batch_size"]
                        // settings["gradient_accumulation_steps"] * settings["num_iterations"])

    load_start = time.perf_counter()
    model_dir, gguf = resolve_model(r["model"]["path"])
    extra = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(model_dir, **extra)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **extra)
    if getattr(model, "hf_quantizer", None) is not None:
        # transformers 5.x dequantizes GGUF to f32 but flags the model as quantized, and Trainer
        # refuses to train a quantized model; the weights are plain f32 (shared/data/README.md).
        model.hf_quantizer.remove_quantization_config(model)
    dataset = Dataset.from_list(load_prompts(r, a.repo_root))

    rewards = []  # per step: the scores of its samples

    def gsm8k(completions, ground_truth, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        scores = [gsm8k_score(t, g, format_score, failure_score)
                  for t, g in zip(texts, ground_truth)]
        rewards.append(scores)
        return scores

    counts = []  # per generation batch: (samples, prompt tokens, response tokens)

    class CountingGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            counts.append((int(out["prompt_ids"].shape[0]), int(out["prompt_mask"].sum()),
                           int(out["completion_mask"].sum())))
            return out

    # TRL turns activation checkpointing on by default; laminar keeps activations (as does
    # transformers' Trainer), and recomputing them only slows the peer down.
    fields = GRPOConfig.__dataclass_fields__
    checkpointing_off = {("activation_checkpointing" if "activation_checkpointing" in fields
                          else "gradient_checkpointing"): False}

    step_end = []  # perf_counter at the end of each step (after its last optimizer update)

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % updates_per_step == 0:
                step_end.append(time.perf_counter())

    config = GRPOConfig(
        output_dir=a.work_dir, max_steps=a.steps * updates_per_step, use_cpu=True,
        fp16=False, use_vllm=False, report_to="none", save_strategy="no",
        bf16=r["actor"].get("compute", "f32") == "bf16", logging_steps=1, disable_tqdm=True,
        dataloader_num_workers=0, dataloader_pin_memory=False, log_completions=False,
        **checkpointing_off, **settings)
    trainer = CountingGRPOTrainer(model=model, reward_funcs=gsm8k, args=config,
                                  train_dataset=dataset, processing_class=tokenizer,
                                  callbacks=[StepClock()])
    load_s = time.perf_counter() - load_start
    train_start = time.perf_counter()
    trainer.train()
    total_s = time.perf_counter() - train_start

    steps = []
    for k, t in enumerate(step_end):
        samples, prompt_tokens, response_tokens = counts[k]
        scores = rewards[k] if k < len(rewards) else []
        steps.append({"step": k + 1, "end_s": t - train_start, "samples": samples,
                      "prompt_tokens": prompt_tokens, "response_tokens": response_tokens,
                      "reward_mean": sum(scores) / len(scores) if scores else float("nan")})
    with open(a.out, "w") as f:
        json.dump({"steps": steps, "load_s": load_s, "train_s": total_s, "threads": a.threads,
                   "groups_per_step": len(steps) and steps[0]["samples"] // n,
                   "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                                "torch": torch.__version__},
                   "config": settings}, f)


if __name__ == "__main__":
    main()
