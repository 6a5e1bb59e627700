// The recipe schema and the per-role builders; see recipe.h.
#include "actor/recipe.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "model/chat_format.h"

namespace laminar::actor {
namespace {

ConfigSchema BuildSchema() {
  ConfigSchema s;
  const trainer::TrainerConfig t;
  const rollout::RolloutWorkerOptions w;
  s.AddString("mode", "async",
              "sync: generate a batch, train, update every rollout (verl's baseline); "
              "one_step_off: generation of step k+1 overlaps training of step k; async: "
              "trajectory-level asynchrony with relay pulls and repack (Laminar)",
              {"sync", "one_step_off", "async"});
  s.AddString("run.dir", "",
              "laminar run: where metrics.jsonl, checkpoints/, tensorboard/ and logs/ go (empty: "
              "runs/<recipe file name>)");
  s.AddRequired("model.path", ConfigType::kString,
                "policy checkpoint: a Hugging Face folder, GGUF or llama2.c file");
  s.AddString("model.tokenizer", "", "tokenizer file overriding the checkpoint's");
  s.AddRequired("data.path", ConfigType::kString, "prompt dataset, JSON Lines");
  s.AddString("data.prompt_key", "prompt", "field holding the prompt (text or chat messages)");
  s.AddString("data.ground_truth_key", "ground_truth",
              "field holding the reference answer (dotted paths reach nested fields)");
  s.AddString("data.data_source_key", "data_source", "field naming the reward's data source");
  s.AddString("data.default_data_source", "", "data source of rows without one");
  s.AddString("data.id_key", "", "field holding a unique row id (empty: the line index)");
  s.AddString("data.max_tokens_key", "",
              "field holding a row's own max_tokens (empty: rollout.max_tokens for every row)");
  s.AddString("data.chat_format", "",
              "render prompts with this chat format: auto (the checkpoint's own template), "
              "chatml, qwen2, smollm2, llama3, llama3.1, llama2; empty: plain text");
  s.AddString("data.system_message", "", "system turn added to chat prompts without one");
  s.AddInt("data.max_prompt_tokens", 0, "prompts longer than this are skipped (0: no limit)", 0);
  s.AddBool("data.shuffle", true, "shuffle the prompts each epoch");
  s.AddInt("data.seed", 1, "seed of the data order and of every group's sampling seed", 0);
  s.AddInt("data.num_epochs", 0, "passes over the dataset (0: unlimited)", 0);
  s.AddString("reward.name", "exact_match",
              "built-in reward: gsm8k, math, countdown, format, exact_match, contains, or auto "
              "(chosen by each row's data_source as verl's default_compute_score)");
  s.AddMap("reward.params",
           "the built-in's parameters, e.g. {pattern: '^<think>', "
           "partial_credit: 0.1} for format (docs/rewards.md)");
  s.AddMap("reward.python",
           "a Python reward instead of reward.name: {path: my_reward.py, function: compute_score, "
           "timeout_s: 10, num_workers: 2}, verl's compute_score(data_source, solution_str, "
           "ground_truth, extra_info=None) -> float | dict");
  s.AddMap("reward.c",
           "a C ABI reward plug-in instead of reward.name: {path: libmy_reward.so, "
           "symbol: laminar_compute_score} (reward/laminar_reward_plugin.h)");
  s.AddList("reward.components",
            "a weighted sum instead of one reward: a list of names or maps such as "
            "{name: gsm8k, weight: 1.0} or {python: {path: r.py}, weight: 0.5}; each "
            "component's score is reported as reward/<name>");
  s.AddFloat("reward.failure_score", 0.0,
             "score of a sample whose reward failed, timed out or was not finite (counted in "
             "reward/error_count, reward/timeout_count)");
  s.AddInt("rollout.num_workers", 2, "rollout workers", 1, 4096);
  s.AddInt("rollout.n", 8, "samples per prompt (the GRPO group)", 1, 65536);
  s.AddFloat("rollout.temperature", 1.0, "sampling temperature (0: greedy)", 0.0, 100.0);
  s.AddFloat("rollout.top_p", 1.0, "nucleus mass (1: off)", 0.0, 1.0);
  s.AddInt("rollout.top_k", 0, "top-k (0: off)", 0);
  s.AddFloat("rollout.min_p", 0.0, "min-p (0: off)", 0.0, 1.0);
  s.AddInt("rollout.max_tokens", 256, "new tokens per response at most", 1);
  s.AddStringList("rollout.stop", {}, "stop strings");
  s.AddBool("rollout.stop_at_eos", true, "stop on the model's EOS tokens");
  s.AddInt("rollout.max_groups", w.max_groups, "prompt groups in flight per rollout", 1);
  s.AddString("rollout.weight_dtype", "f32",
              "the rollout's projection weights, quantized from each pulled version: f32, bf16, "
              "w8a8 (int8), w4a8 (4-bit groups over int8), q8_0 or q4_1 (ggml's blocks of 32)",
              {"f32", "bf16", "w8a8", "w4a8", "q8_0", "q4_1"});
  s.AddString("rollout.speculative.drafter", "off",
              "speculative decoding's drafter (exact: the policy's distribution and logprobs): "
              "off; suffix (drafts from the sequence, its GRPO group and recent responses; no "
              "model); layer_skip (the policy with a subset of its layers); draft_model (a small "
              "model with the policy's vocabulary, or the policy in a cheaper format)",
              {"off", "suffix", "layer_skip", "draft_model"});
  s.AddString(
      "rollout.speculative.draft_model", "",
      "drafter draft_model: a checkpoint (path or model name) of a small model with the "
      "policy's vocabulary; the actor publishes its weights with every version and rollouts "
      "pull them from their relay. 'policy': the policy itself in draft_weight_dtype, rebuilt "
      "by each rollout from every version it pulls (QSpec)");
  s.AddString("rollout.speculative.draft_weight_dtype", "auto",
              "drafter draft_model: its projection weights, quantized from each pulled version "
              "(auto: as rollout.weight_dtype); a cheaper format than the policy's drafts "
              "faster (draft_model: policy with q8_0 or q4_1 under an f32 or bf16 policy)",
              {"auto", "f32", "bf16", "w8a8", "w4a8", "q8_0", "q4_1"});
  s.AddFloat("rollout.speculative.min_confidence", w.engine.speculative.min_confidence,
             "model drafters stop a chain once the product of its tokens' draft probabilities "
             "falls below this (0: never; chains run to their planned length)",
             0.0, 0.999);
  s.AddInt("rollout.speculative.layer_skip_keep", 0,
           "drafter layer_skip: policy layers kept, evenly spaced (0: half)", 0);
  s.AddInt("rollout.speculative.draft_vocab", w.engine.speculative.draft_vocab,
           "model drafters: their output head computes only this many lowest token ids plus "
           "every token of the prompts and responses seen (FR-Spec; exact, fewer bytes per "
           "drafted token); 0: the whole vocabulary",
           0);
  s.AddInt("rollout.speculative.max_draft_tokens", w.engine.speculative.max_draft_tokens,
           "drafted tokens per sequence and step at most", 1, 63);
  s.AddBool("rollout.speculative.async_draft", w.engine.speculative.async_draft,
            "model drafters draft ahead on their own thread while the policy verifies "
            "(SwiftSpec); for machines with cores to spare");
  const rollout::SuffixDrafterConfig& sx = w.engine.speculative.suffix;
  s.AddInt("rollout.speculative.suffix.max_match", sx.max_match,
           "drafter suffix: longest suffix of a sequence looked up in the index, in tokens", 1, 64);
  s.AddInt("rollout.speculative.suffix.min_match", sx.min_match,
           "drafter suffix: shorter matches propose nothing", 1, 64);
  s.AddInt("rollout.speculative.suffix.max_continuations", sx.max_continuations,
           "drafter suffix: occurrences of the longest match followed, most recent first", 1,
           std::numeric_limits<int32_t>::max());
  s.AddInt("rollout.speculative.suffix.recent_responses", sx.recent_responses,
           "drafter suffix: finished responses kept for every sequence to draft from", 0,
           std::numeric_limits<int32_t>::max());
  s.AddFloat("rollout.speculative.suffix.min_share", sx.min_share,
             "drafter suffix: a tree node is drafted only when at least this share of the "
             "followed continuations pass through it",
             0.0, 1.0);
  s.AddBool("rollout.speculative.adaptive", w.engine.speculative.adaptive,
            "size drafts from each sequence's acceptance and the measured step costs (off when "
            "it does not pay); false: always max_draft_tokens");
  s.AddInt("rollout.kv_cache_mb", 256, "KV cache per rollout, MiB", 1);
  s.AddInt("rollout.block_size", w.engine.block_size, "KV tokens per block", 1, 4096);
  s.AddInt("rollout.max_num_seqs", w.engine.scheduler.max_num_seqs, "running sequences at most", 1);
  s.AddInt("rollout.max_num_batched_tokens", w.engine.scheduler.max_num_batched_tokens,
           "tokens per engine step (decodes + prefill chunks)", 1);
  s.AddInt("rollout.partial_every_tokens", w.partial_every_tokens,
           "stream a sample's progress every K tokens (0: never)", 0);
  s.AddInt("rollout.heartbeat_interval_ms", w.heartbeat_interval_ms, "heartbeat period", 1);
  s.AddFloat("rollout.manager_timeout_s", w.manager_timeout_s,
             "a rollout stops when the manager has not answered for this long", 0.001);
  s.AddFloat("rollout.relay_timeout_s", w.relay_timeout_s,
             "a rollout stops when no relay has answered for this long", 0.001);
  s.AddFloat("rollout.heartbeat_timeout_s", 5.0,
             "a rollout silent this long is dead and its groups are re-issued", 0.01);
  s.AddInt("actor.groups_per_step", 4, "prompt groups per training step (B)", 1);
  s.AddInt("actor.max_steps", 0, "global steps to train (0: until the data runs out)", 0);
  s.AddInt("actor.max_staleness", -1,
           "groups older than this many versions are dropped or counted (-1: no bound)", -1);
  s.AddBool("actor.drop_stale", true, "drop groups above max_staleness (false: keep, count)");
  s.AddString("actor.optimizer", t.optimizer.name, "adamw or sgd");
  s.AddFloat("actor.lr", t.optimizer.lr, "peak learning rate", 0.0, 10.0);
  s.AddFloat("actor.weight_decay", t.optimizer.weight_decay, "decoupled weight decay", 0.0);
  s.AddFloat("actor.grad_clip", t.optimizer.grad_clip, "max global gradient norm (0: off)", 0.0);
  s.AddString("actor.lr_schedule", t.optimizer.lr_schedule,
              "constant, constant_with_warmup or cosine");
  s.AddInt("actor.warmup_steps", t.optimizer.warmup_steps, "linear warm-up steps", 0);
  s.AddString("actor.loss", t.loss.loss, "policy loss: vanilla (PPO clip), gspo or pg");
  s.AddString("actor.loss_agg_mode", t.loss.agg,
              "token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm");
  s.AddFloat("actor.clip_ratio_low", t.loss.clip_ratio_low, "PPO clip below 1", 0.0);
  s.AddFloat("actor.clip_ratio_high", t.loss.clip_ratio_high, "PPO clip above 1 (DAPO)", 0.0);
  s.AddString("actor.is_level", t.loss.is_level,
              "truncated IS weight min(pi_old/mu, C): token, sequence, geometric or none");
  s.AddFloat("actor.is_cap", t.loss.is_cap, "the truncation C", 0.0);
  s.AddFloat("actor.kl_coef", t.loss.kl_coef, "KL to the initial policy (0: off)", 0.0);
  s.AddString("actor.kl_estimator", t.loss.kl_estimator, "k1, k2 or k3");
  s.AddFloat("actor.entropy_coef", t.loss.entropy_coef, "entropy bonus");
  s.AddString("actor.adv_estimator", t.advantage.estimator,
              "grpo, dr_grpo, rloo, reinforce_pp or gae");
  s.AddInt("actor.mini_batch_size", t.mini_batch_size, "samples per update (0: all)", 0);
  s.AddInt("actor.micro_batch_tokens", t.micro_batch_tokens, "tokens per forward/backward", 1);
  s.AddInt("actor.ppo_epochs", t.ppo_epochs, "passes over each step's samples", 1);
  s.AddBool("actor.share_prompts", t.share_prompts,
            "compute a group's shared prompt once per micro-batch instead of once per sample");
  s.AddString("actor.compute", "f32", "f32, or bf16 GEMM operands with f32 master weights",
              {"f32", "bf16"});
  s.AddString("actor.checkpoint_dir", "", "save checkpoints here (empty: none)");
  s.AddInt("actor.save_every", 0, "steps between checkpoints (0: only at the end)", 0);
  s.AddInt("actor.keep_last", 2, "checkpoints kept", 1);
  s.AddString("actor.export_dir", "",
              "with each checkpoint, write the policy here as a Hugging Face folder that "
              "`laminar generate` and transformers load (empty: none)");
  s.AddString("actor.metrics", "", "append one JSON line of metrics per step to this file");
  s.AddString("actor.progress_file", "",
              "keep where the actor is within its step here as one JSON object (laminar run: "
              "RUN_DIR/progress.json, its progress bar)");
  s.AddString("actor.tensorboard_dir", "",
              "write TensorBoard event files of the per-step metrics here (empty: none)");
  s.AddString("actor.trajectory_log", "",
              "append one JSON line per trained sample (ids, versions, reward) to this file");
  s.AddBool("repack.enabled", true, "move long-tail trajectories to free rollouts (DESIGN.md §5)");
  s.AddInt("repack.max_batch", 64,
           "running sequences per rollout beyond which decode stops "
           "getting faster",
           1);
  s.AddFloat("repack.interval_s", 5.0, "seconds between repack checks", 0.0);
  s.AddInt("cluster.nodes", 1,
           "machines of a multi-machine launch (`laminar cluster-plan`, scripts/launch_slurm.sh); "
           "node 0, the head, runs the manager (which serves the coordinator), the actor and the "
           "master relay",
           1, 4096);
  s.AddInt("cluster.rollout_nodes", 0,
           "nodes that run rollouts: the last rollout_nodes nodes, each besides the head with a "
           "relay of its own; rollout.num_workers are spread evenly over them in rank order (0: "
           "every node, the head included)",
           0, 4096);
  s.AddInt("cluster.coordinator_port", 29555,
           "port of the coordinator on the head: roles started with --coordinator "
           "tcp://HEAD:PORT find each other there",
           1, 65535);
  s.AddFloat("cluster.connect_timeout_s", 600.0,
             "a role started with --coordinator fails, naming the coordinator, when it or a peer "
             "the role needs has not answered for this long",
             0.001);
  return s;
}

}  // namespace

const ConfigSchema& RecipeSchema() {
  static const ConfigSchema* schema = new ConfigSchema(BuildSchema());
  return *schema;
}

StatusOr<Config> LoadRecipe(const std::string& path, const std::vector<std::string>& overrides) {
  return Config::Load(path, overrides, RecipeSchema());
}

StatusOr<trainer::TrainerConfig> TrainerConfigOf(const Config& r) {
  trainer::TrainerConfig t;
  // pi_old and pi_theta are of the distribution the rollouts sample from (greedy: the plain one).
  const double temperature = r.GetFloat("rollout.temperature");
  t.graph.temperature = temperature > 0 ? temperature : 1.0;
  t.optimizer.name = r.GetString("actor.optimizer");
  t.optimizer.lr = r.GetFloat("actor.lr");
  t.optimizer.weight_decay = r.GetFloat("actor.weight_decay");
  t.optimizer.grad_clip = r.GetFloat("actor.grad_clip");
  t.optimizer.lr_schedule = r.GetString("actor.lr_schedule");
  t.optimizer.warmup_steps = r.GetInt("actor.warmup_steps");
  t.loss.loss = r.GetString("actor.loss");
  t.loss.agg = r.GetString("actor.loss_agg_mode");
  t.loss.clip_ratio_low = r.GetFloat("actor.clip_ratio_low");
  t.loss.clip_ratio_high = r.GetFloat("actor.clip_ratio_high");
  t.loss.is_level = r.GetString("actor.is_level");
  t.loss.is_cap = r.GetFloat("actor.is_cap");
  t.loss.kl_coef = r.GetFloat("actor.kl_coef");
  t.loss.kl_estimator = r.GetString("actor.kl_estimator");
  t.loss.entropy_coef = r.GetFloat("actor.entropy_coef");
  t.advantage.estimator = r.GetString("actor.adv_estimator");
  t.mini_batch_size = r.GetInt("actor.mini_batch_size");
  t.micro_batch_tokens = r.GetInt("actor.micro_batch_tokens");
  t.ppo_epochs = static_cast<int>(r.GetInt("actor.ppo_epochs"));
  t.share_prompts = r.GetBool("actor.share_prompts");
  t.graph.bf16_compute = r.GetString("actor.compute") == "bf16";
  t.seed = static_cast<uint64_t>(r.GetInt("data.seed"));
  LAMINAR_RETURN_IF_ERROR(trainer::ValidatePolicyLossConfig(t.loss), "recipe actor.*");
  return t;
}

StatusOr<ActorOptions> ActorOptionsOf(const Config& r) {
  ActorOptions a;
  LAMINAR_ASSIGN_OR_RETURN(a.trainer, TrainerConfigOf(r));
  a.groups_per_step = static_cast<int32_t>(r.GetInt("actor.groups_per_step"));
  a.max_steps = r.GetInt("actor.max_steps");
  if (r.GetInt("actor.max_staleness") >= 0) a.max_staleness = r.GetInt("actor.max_staleness");
  a.drop_stale = r.GetBool("actor.drop_stale");
  a.checkpoint_dir = r.GetString("actor.checkpoint_dir");
  a.save_every = r.GetInt("actor.save_every");
  a.keep_last = static_cast<int>(r.GetInt("actor.keep_last"));
  a.export_dir = r.GetString("actor.export_dir");
  a.metrics_path = r.GetString("actor.metrics");
  a.tensorboard_dir = r.GetString("actor.tensorboard_dir");
  a.progress_path = r.GetString("actor.progress_file");
  a.trajectory_log = r.GetString("actor.trajectory_log");
  return a;
}

StatusOr<rollout::RolloutWorkerOptions> RolloutWorkerOptionsOf(const Config& r,
                                                               int64_t kv_bytes_per_token) {
  if (kv_bytes_per_token <= 0) {
    return InvalidArgumentError("recipe: kv_bytes_per_token must be > 0");
  }
  rollout::RolloutWorkerOptions w;
  w.engine.block_size = static_cast<int32_t>(r.GetInt("rollout.block_size"));
  LAMINAR_ASSIGN_OR_RETURN(w.engine.num_blocks,
                           rollout::KvBlocksFor(r.GetInt("rollout.kv_cache_mb"), kv_bytes_per_token,
                                                w.engine.block_size),
                           "recipe rollout.kv_cache_mb");
  w.engine.scheduler.max_num_seqs = r.GetInt("rollout.max_num_seqs");
  w.engine.scheduler.max_num_batched_tokens = r.GetInt("rollout.max_num_batched_tokens");
  LAMINAR_ASSIGN_OR_RETURN(w.weight_format,
                           engine::ParseWeightFormat(r.GetString("rollout.weight_dtype")));
  w.engine.speculative.drafter = r.GetString("rollout.speculative.drafter");
  w.engine.speculative.max_draft_tokens = r.GetInt("rollout.speculative.max_draft_tokens");
  w.engine.speculative.adaptive = r.GetBool("rollout.speculative.adaptive");
  w.engine.speculative.async_draft = r.GetBool("rollout.speculative.async_draft");
  w.engine.speculative.layer_skip_keep = r.GetInt("rollout.speculative.layer_skip_keep");
  w.engine.speculative.draft_vocab = r.GetInt("rollout.speculative.draft_vocab");
  rollout::SuffixDrafterConfig& sx = w.engine.speculative.suffix;
  sx.max_match = static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.max_match"));
  sx.min_match = static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.min_match"));
  sx.max_continuations =
      static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.max_continuations"));
  sx.recent_responses =
      static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.recent_responses"));
  sx.min_share = r.GetFloat("rollout.speculative.suffix.min_share");
  w.draft_model_path = r.GetString("rollout.speculative.draft_model");
  w.engine.speculative.min_confidence = r.GetFloat("rollout.speculative.min_confidence");
  w.draft_weight_format = w.weight_format;
  if (const std::string dtype = r.GetString("rollout.speculative.draft_weight_dtype");
      dtype != "auto") {
    LAMINAR_ASSIGN_OR_RETURN(w.draft_weight_format, engine::ParseWeightFormat(dtype),
                             "recipe rollout.speculative.draft_weight_dtype");
  }
  if (w.engine.speculative.drafter == "draft_model") {
    if (w.draft_model_path.empty()) {
      return InvalidArgumentError(
          "recipe rollout.speculative.drafter: draft_model needs rollout.speculative.draft_model "
          "(a checkpoint)");
    }
  }
  LAMINAR_RETURN_IF_ERROR(w.engine.speculative.Validate(), "recipe");
  w.max_groups = static_cast<int32_t>(r.GetInt("rollout.max_groups"));
  w.partial_every_tokens = static_cast<int32_t>(r.GetInt("rollout.partial_every_tokens"));
  w.heartbeat_interval_ms = static_cast<int>(r.GetInt("rollout.heartbeat_interval_ms"));
  w.reward_failure_score = r.GetFloat("reward.failure_score");
  w.manager_timeout_s = r.GetFloat("rollout.manager_timeout_s");
  w.relay_timeout_s = r.GetFloat("rollout.relay_timeout_s");
  return w;
}

StatusOr<manager::PromptDatasetOptions> PromptDatasetOptionsOf(
    const Config& r, std::optional<std::string_view> checkpoint_chat_template) {
  manager::PromptDatasetOptions d;
  d.prompt_key = r.GetString("data.prompt_key");
  d.ground_truth_key = r.GetString("data.ground_truth_key");
  d.data_source_key = r.GetString("data.data_source_key");
  d.default_data_source = r.GetString("data.default_data_source");
  d.id_key = r.GetString("data.id_key");
  d.max_tokens_key = r.GetString("data.max_tokens_key");
  if (checkpoint_chat_template) {
    LAMINAR_ASSIGN_OR_RETURN(
        d.chat,
        model::ResolveChatFormat(r.GetString("data.chat_format"), *checkpoint_chat_template),
        "recipe data.chat_format");
  }
  d.system_message = r.GetString("data.system_message");
  d.max_prompt_tokens = r.GetInt("data.max_prompt_tokens");
  return d;
}

StatusOr<reward::RewardFn> RewardOf(const Config& r) {
  const YAML::Node components = r.GetNode("reward.components");
  const YAML::Node python = r.GetNode("reward.python"), c = r.GetNode("reward.c");
  const bool has_python = python.IsMap() && python.size() > 0;
  const bool has_c = c.IsMap() && c.size() > 0;
  if (components.IsSequence() && components.size() > 0) {
    if (has_python || has_c || r.IsSet("reward.name")) {
      return InvalidArgumentError(
          "recipe reward: set reward.components or one of reward.name, reward.python, reward.c");
    }
    LAMINAR_ASSIGN_OR_RETURN(auto specs, reward::ParseRewardSpecs(components, "reward.components"));
    return reward::CombineRewards(specs);
  }
  const YAML::Node params = r.GetNode("reward.params");
  if ((has_python || has_c) && params.IsMap() && params.size() > 0) {
    return InvalidArgumentError(
        "recipe reward.params: parameters of reward.name; a plug-in takes none");
  }
  if (has_python + has_c + r.IsSet("reward.name") > 1) {
    return InvalidArgumentError(
        "recipe reward: set only one of reward.name, reward.python, reward.c");
  }
  // One spec in ParseRewardSpecs' map form: {name: N, <params>...}, {python: {...}} or {c: {...}}.
  YAML::Node spec(YAML::NodeType::Map);
  if (has_python) {
    spec["python"] = python;
  } else if (has_c) {
    spec["c"] = c;
  } else {
    spec["name"] = r.GetString("reward.name");
    if (params.IsMap()) {
      for (auto it = params.begin(); it != params.end(); ++it) {
        const std::string key = it->first.Scalar();
        if (key == "name" || key == "weight") {
          return InvalidArgumentError("recipe reward.params." + key +
                                      ": not a parameter (set reward." + key + ")");
        }
        spec[key] = it->second;
      }
    }
  }
  LAMINAR_ASSIGN_OR_RETURN(auto specs, reward::ParseRewardSpecs(spec, "reward"));
  return reward::MakeReward(specs.front());
}

}  // namespace laminar::actor
