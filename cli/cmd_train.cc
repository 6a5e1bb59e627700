// `laminar train`: policy-gradient updates of a model on trajectories from a JSON Lines file
// (trainer/sample_io.h), on one rank or several data-parallel ranks (Gloo on CPUs, NCCL on GPUs)
// that meet at --rendezvous. Prints one JSON line of metrics per step (rank 0); saves atomic
// checkpoints and resumes from them bit-identically; exports a Hugging Face folder at the end.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "trainer/checkpoint.h"
#include "trainer/sample_io.h"
#include "trainer/trainer.h"

namespace laminar::cli {
namespace {

struct TrainArgs {
  std::string model, data;
  int64_t steps = 1;
  int64_t groups_per_step = 1;
  trainer::TrainerConfig config;
  std::string compute = "f32";
  std::string checkpoint_dir;
  int64_t save_every = 0;
  int keep_last = 2;
  bool resume = false;
  std::string export_hf;
  bool overwrite_export = false;
  std::string metrics_path;
  trainer::CollectiveOptions collective;
};

int Fail(const std::string& message) { return CommandFail("train", message); }

// The groups rank `rank` trains on at `step`: its share of the step's world × G consecutive
// groups, wrapping around the file, so W ranks with G groups each see exactly what one rank with
// W × G groups sees.
std::vector<trainer::TrainSample> StepSamples(
    const std::vector<std::vector<trainer::TrainSample>>& groups, int64_t step, int64_t g, int rank,
    int world) {
  std::vector<trainer::TrainSample> out;
  const int64_t n = static_cast<int64_t>(groups.size());
  for (int64_t k = 0; k < g; ++k) {
    const int64_t gi = (step * g * world + rank * g + k) % n;
    for (const auto& s : groups[gi]) {
      out.push_back(s);
      out.back().group_id = step * g * world + rank * g + k;
    }
  }
  return out;
}

// Everything that can be checked before the model loads and ranks meet: where results go.
Status CheckOutputs(const TrainArgs& a) {
  namespace fs = std::filesystem;
  if (a.collective.rank >= a.collective.world_size) {
    return InvalidArgumentError("--rank " + std::to_string(a.collective.rank) +
                                " is not below --world-size " +
                                std::to_string(a.collective.world_size));
  }
  if (a.resume && a.checkpoint_dir.empty()) {
    return InvalidArgumentError("--resume needs --checkpoint-dir");
  }
  std::error_code ec;
  if (!a.checkpoint_dir.empty()) {
    if (!a.resume && a.collective.rank == 0 && fs::exists(a.checkpoint_dir, ec)) {
      for (const auto& e : fs::directory_iterator(a.checkpoint_dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name == "latest" || name.rfind("step_", 0) == 0) {
          return AlreadyExistsError("--checkpoint-dir " + a.checkpoint_dir +
                                    " holds an earlier run's checkpoints (" + name +
                                    "): pass --resume to continue it, or choose another folder");
        }
      }
    }
    fs::create_directories(a.checkpoint_dir, ec);
    if (ec || access(a.checkpoint_dir.c_str(), W_OK) != 0) {
      return FailedPreconditionError("--checkpoint-dir " + a.checkpoint_dir +
                                     " cannot be created or written");
    }
  }
  if (!a.export_hf.empty() && !a.overwrite_export && fs::exists(a.export_hf, ec)) {
    return AlreadyExistsError("--export-hf " + a.export_hf +
                              " exists; pass --overwrite-export to replace it");
  }
  return OkStatus();
}

// Kept whole: `laminar train` from flags to the last step, in the order a user reads its output.
int Run(TrainArgs a) {
  if (Status st = CheckOutputs(a); !st.ok()) return Fail(st.message());
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status().message());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status().message());
  auto groups = trainer::ReadSampleGroups(a.data);
  if (!groups.ok()) return Fail(groups.status().message());
  a.config.graph.bf16_compute = a.compute == "bf16";
  std::unique_ptr<trainer::Collective> collective;
  if (a.collective.world_size > 1 || a.collective.backend != "local") {
    auto c = trainer::CreateCollective(a.collective);
    if (!c.ok()) return Fail(c.status().message());
    collective = std::move(*c);
  }
  auto t = trainer::Trainer::Create(ckpt->config, ckpt->weights, a.config, std::move(collective));
  if (!t.ok()) return Fail(t.status().message());
  auto& tr = **t;
  // Every sample is checked now, naming its line, rather than when its step comes.
  for (const auto& group : *groups) {
    if (Status st = tr.ValidateSamples(group); !st.ok()) return Fail(st.message());
  }
  const nlohmann::json run = {
      {"data", a.data}, {"groups_per_step", a.groups_per_step}, {"world_size", tr.world_size()}};
  if (a.resume) {
    auto latest = trainer::LatestCheckpointStep(a.checkpoint_dir);
    if (latest.ok()) {
      auto user = tr.LoadCheckpoint(a.checkpoint_dir);
      if (!user.ok()) return Fail(user.status().message());
      const bool same =
          user->is_object() &&
          user->value("groups_per_step", nlohmann::json()) == run["groups_per_step"] &&
          user->value("world_size", nlohmann::json()) == run["world_size"];
      if (!same) {
        return Fail("checkpoint in " + a.checkpoint_dir + " was written by a run with " +
                    user->dump() + "; this run has " + run.dump());
      }
      std::fprintf(stderr, "laminar train: resumed from step %lld in %s\n",
                   static_cast<long long>(tr.global_step()), a.checkpoint_dir.c_str());
    } else if (latest.status().code() == StatusCode::kNotFound) {
      std::fprintf(stderr, "laminar train: no checkpoint in %s yet; starting at step 0\n",
                   a.checkpoint_dir.c_str());
    } else {
      return Fail(latest.status().message());
    }
  }
  if (Status st = tr.CheckRanksAgree(); !st.ok()) return Fail(st.message());
  std::ofstream metrics_file;
  if (!a.metrics_path.empty() && tr.rank() == 0) {
    metrics_file.open(a.metrics_path, std::ios::app);
    if (!metrics_file) return Fail("cannot open --metrics " + a.metrics_path);
  }
  while (tr.global_step() < a.steps) {
    auto samples =
        StepSamples(*groups, tr.global_step(), a.groups_per_step, tr.rank(), tr.world_size());
    auto metrics = tr.Step(samples);
    if (!metrics.ok()) {
      return Fail("step " + std::to_string(tr.global_step()) + ": " + metrics.status().message());
    }
    if (tr.rank() == 0) {
      nlohmann::json line = {{"step", tr.global_step()}};
      for (const auto& [k, v] : *metrics) line[k] = v;
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
      if (metrics_file) metrics_file << line.dump() << "\n" << std::flush;
    }
    const bool last = tr.global_step() == a.steps;
    if (!a.checkpoint_dir.empty() &&
        ((a.save_every > 0 && tr.global_step() % a.save_every == 0) || last)) {
      auto saved = tr.SaveCheckpoint(a.checkpoint_dir, run, a.keep_last);
      if (!saved.ok()) return Fail(saved.status().message());
    }
  }
  if (!a.export_hf.empty()) {
    // The tokenizer travels with the policy when the checkpoint has one we can export.
    std::map<std::string, std::string> tokenizer_files;
    auto tok = model::LoadTokenizerForModel(*path, "");
    if (tok.ok()) {
      auto files = model::ExportHfTokenizerFiles(**tok, ckpt->chat_template);
      if (files.ok()) tokenizer_files = std::move(*files);
    }
    Status st = tr.ExportHuggingFace(a.export_hf, tokenizer_files, DType::kF32, a.overwrite_export);
    if (!st.ok()) return Fail(st.message());
  }
  return 0;
}

std::function<int()> SetupTrain(CLI::App* app) {
  auto a = std::make_shared<TrainArgs>();
  auto& c = a->config;
  app->add_option("--model", a->model, "checkpoint path or model name")->required();
  app->add_option("--data", a->data, "trajectories, JSON Lines (prompt_ids, response_ids, ...)")
      ->required()
      ->check(CLI::ExistingFile);
  app->add_option("--steps", a->steps, "global steps to reach")->check(CLI::Range(1, 1 << 30));
  app->add_option("--groups-per-step", a->groups_per_step, "prompt groups per step and rank")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--optimizer", c.optimizer.name, "adamw or sgd");
  app->add_option("--lr", c.optimizer.lr, "peak learning rate")->check(CLI::Range(0.0, 10.0));
  app->add_option("--weight-decay", c.optimizer.weight_decay, "decoupled weight decay");
  app->add_option("--grad-clip", c.optimizer.grad_clip, "max global grad norm (0 = off)");
  app->add_option("--lr-schedule", c.optimizer.lr_schedule,
                  "constant, constant_with_warmup or cosine");
  app->add_option("--warmup-steps", c.optimizer.warmup_steps, "linear warm-up steps");
  app->add_option("--total-steps", c.optimizer.total_steps, "cosine: steps until the floor");
  app->add_option("--loss", c.loss.loss, "policy loss: vanilla (PPO clip), gspo or pg");
  app->add_option("--agg", c.loss.agg, "token-mean, seq-mean-token-sum, seq-mean-token-mean");
  app->add_option("--clip-ratio-low", c.loss.clip_ratio_low, "PPO clip below 1");
  app->add_option("--clip-ratio-high", c.loss.clip_ratio_high, "PPO clip above 1 (DAPO)");
  app->add_option("--is-level", c.loss.is_level, "truncated IS weight: token, sequence, none");
  app->add_option("--is-cap", c.loss.is_cap, "truncation C of min(pi_old/mu, C)");
  app->add_option("--kl-coef", c.loss.kl_coef, "KL to the initial policy (0 = off)");
  app->add_option("--kl-estimator", c.loss.kl_estimator, "k1, k2 or k3");
  app->add_option("--entropy-coef", c.loss.entropy_coef, "entropy bonus");
  app->add_option("--adv", c.advantage.estimator, "grpo, dr_grpo, rloo, reinforce_pp, gae");
  app->add_option("--mini-batch-size", c.mini_batch_size, "samples per update (0 = all)");
  app->add_option("--micro-batch-tokens", c.micro_batch_tokens, "tokens per forward/backward");
  app->add_option("--epochs", c.ppo_epochs, "passes over each step's samples");
  app->add_flag("--shuffle", c.shuffle, "shuffle samples before each epoch");
  app->add_option("--seed", c.seed, "shuffle seed")->check(kNonNegative);
  app->add_option("--compute", a->compute, "f32, or bf16 (bf16 GEMM operands, f32 master)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app->add_flag("--recompute", c.graph.recompute_activations, "recompute activations per layer");
  app->add_option("--checkpoint-dir", a->checkpoint_dir, "save checkpoints here");
  app->add_option("--save-every", a->save_every, "steps between checkpoints (0: at the end)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--keep-last", a->keep_last, "checkpoints kept")->check(CLI::Range(0, 1000));
  app->add_flag("--resume", a->resume, "continue from the latest checkpoint in --checkpoint-dir");
  app->add_option("--export-hf", a->export_hf, "write the final policy as a Hugging Face folder");
  app->add_flag("--overwrite-export", a->overwrite_export,
                "replace an existing --export-hf folder");
  app->add_option("--metrics", a->metrics_path, "append metrics as JSON Lines to this file");
  app->add_option("--backend", a->collective.backend, "data parallel: gloo, nccl or local");
  app->add_option("--rank", a->collective.rank, "this process's rank")->check(CLI::Range(0, 65535));
  app->add_option("--world-size", a->collective.world_size, "data-parallel ranks")
      ->check(CLI::Range(1, 65536));
  app->add_option("--rendezvous", a->collective.rendezvous_address,
                  "where ranks meet (rank 0 binds it), e.g. tcp://10.0.0.1:29500");
  app->add_option("--rendezvous-timeout-ms", a->collective.rendezvous_timeout_ms,
                  "how long ranks wait for each other to start")
      ->check(CLI::PositiveNumber);
  app->add_option("--collective-timeout-ms", a->collective.timeout_ms,
                  "how long a gradient all-reduce may wait for the other ranks")
      ->check(CLI::PositiveNumber);
  a->collective.backend = "local";
  return [a] {
    if (a->collective.world_size > 1 && a->collective.backend == "local") {
      a->collective.backend = "gloo";
    }
    return Run(*a);
  };
}

LAMINAR_REGISTER_COMMAND("train",
                         "policy-gradient updates on trajectories (JSONL), checkpoints, data "
                         "parallel ranks",
                         SetupTrain);

}  // namespace
}  // namespace laminar::cli
