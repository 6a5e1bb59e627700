// The recipe schema: every key with its type, default and meaning, and loading; see recipe.h.
// The defaults here are the recipe's; tests/cli/recipe_test.cc checks that each role's builder
// turns a recipe that sets nothing into that role's own defaults.
#include "recipe/recipe.h"

#include <utility>

namespace laminar::recipe {
namespace {

// One statement per recipe key, in the order configs/reference.yaml lists them: kept as one
// table (the reference reader and the schema are the same text).
ConfigSchema BuildSchema() {
  ConfigSchema s;
  s.AddString("mode", "async",
              "sync: generate a batch, train, update every rollout (verl's baseline); "
              "one_step_off: generation of step k+1 overlaps training of step k; async: "
              "trajectory-level asynchrony with relay pulls and repack (Laminar)",
              {"sync", "one_step_off", "async"});
  s.AddString("run.dir", "",
              "laminar run and scripts/launch_slurm.sh: where metrics.jsonl, trajectories.jsonl, "
              "faults.jsonl, checkpoints/, model/, tensorboard/ and logs/ go (empty: "
              "runs/<recipe file name>)");
  s.AddString("run.faults", "",
              "faults.jsonl: each fault the supervisor, manager and actor see (crash, hang, "
              "non_finite, straggler, disk_full, lost_link) with its role, host and detection and "
              "recovery times (laminar run: <run.dir>/faults.jsonl; empty elsewhere: none)");
  s.AddString("run.keys", "",
              "the run's ZeroMQ CURVE key file (`laminar keys FILE`): every role authenticates and "
              "encrypts its connections with it and refuses clients without it (empty: no "
              "authentication; a multi-machine run needs keys or run.insecure)");
  s.AddBool("run.insecure", false,
            "let a multi-machine run (cluster.nodes > 1) go without run.keys: any client that "
            "reaches a role's port is served");
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
           "ground_truth, extra_info=None) -> float | dict; each worker is sandboxed "
           "(cpu_time_s: 30 per call, memory_mb: 4096, max_open_files: 256, max_processes: 128, "
           "network: false; 0: no limit)");
  s.AddMap("reward.c",
           "a C ABI reward plug-in instead of reward.name, run in sandboxed worker processes as "
           "reward.python is (same limits and params): {path: libmy_reward.so, "
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
  s.AddInt("rollout.max_groups", 4,
           "prompt groups in flight per rollout at most (fewer while its KV pool is full)", 1);
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
  s.AddFloat("rollout.speculative.min_confidence", 0.0,
             "model drafters stop a chain once the product of its tokens' draft probabilities "
             "falls below this (0: never; chains run to their planned length)",
             0.0, 0.999);
  s.AddInt("rollout.speculative.layer_skip_keep", 0,
           "drafter layer_skip: policy layers kept, evenly spaced (0: half)", 0);
  s.AddInt("rollout.speculative.draft_vocab", 0,
           "model drafters: their output head computes only this many lowest token ids plus "
           "every token of the prompts and responses seen (FR-Spec; exact, fewer bytes per "
           "drafted token); 0: the whole vocabulary",
           0);
  s.AddInt("rollout.speculative.max_draft_tokens", 8,
           "drafted tokens per sequence and step at most", 1, 63);
  s.AddBool("rollout.speculative.async_draft", false,
            "model drafters draft ahead on their own thread while the policy verifies "
            "(SwiftSpec); for machines with cores to spare");
  s.AddInt("rollout.speculative.suffix.max_match", 8,
           "drafter suffix: longest suffix of a sequence looked up in the index, in tokens", 1, 64);
  s.AddInt("rollout.speculative.suffix.min_match", 2,
           "drafter suffix: shorter matches propose nothing", 1, 64);
  s.AddInt("rollout.speculative.suffix.max_continuations", 16,
           "drafter suffix: occurrences of the longest match followed, most recent first", 1,
           std::numeric_limits<int32_t>::max());
  s.AddInt("rollout.speculative.suffix.recent_responses", 64,
           "drafter suffix: finished responses kept for every sequence to draft from", 0,
           std::numeric_limits<int32_t>::max());
  s.AddFloat("rollout.speculative.suffix.min_share", 0.1,
             "drafter suffix: a tree node is drafted only when at least this share of the "
             "followed continuations pass through it",
             0.0, 1.0);
  s.AddBool("rollout.speculative.adaptive", true,
            "size drafts from each sequence's acceptance and the measured step costs (off when "
            "it does not pay); false: always max_draft_tokens");
  s.AddInt("rollout.kv_cache_mb", 256, "KV cache per rollout, MiB", 1);
  s.AddInt("rollout.block_size", 16, "KV tokens per block", 1, 4096);
  s.AddInt("rollout.max_num_seqs", 256, "running sequences at most", 1);
  s.AddInt("rollout.max_num_batched_tokens", 2048,
           "tokens per engine step (decodes + prefill chunks)", 1);
  s.AddInt("rollout.partial_every_tokens", 16,
           "stream a sample's progress every K tokens (0: never)", 0);
  s.AddInt("rollout.heartbeat_interval_ms", 200, "heartbeat period", 1);
  s.AddFloat("rollout.manager_timeout_s", 30.0,
             "a rollout stops when the manager has not answered for this long", 0.001);
  s.AddFloat("rollout.relay_timeout_s", 60.0,
             "a rollout stops when no relay has answered for this long", 0.001);
  s.AddFloat("rollout.heartbeat_timeout_s", 5.0,
             "a rollout silent this long is dead and its groups are re-issued (laminar run: a "
             "manager or relay that answers no ping, or an actor stopped, for twice this long "
             "(within 4-10 s) is hung, and killed)",
             0.01);
  s.AddInt("actor.groups_per_step", 4, "prompt groups per training step (B)", 1);
  s.AddInt("actor.world_size", 1,
           "data-parallel actor ranks (Gloo): each trains on its share of every step's groups, "
           "balanced by tokens; rank 0 talks to the manager and the relay",
           1, 1024);
  s.AddInt("actor.zero_stage", 0,
           "0: every actor rank keeps the whole optimizer state; 1 (ZeRO-1): each of the "
           "world_size ranks keeps and updates 1/world_size of it (checkpoints hold all of it)",
           0, 1);
  s.AddString("actor.rendezvous", "",
              "where actor ranks meet, tcp://HOST:PORT on rank 0's machine (empty: laminar run "
              "picks a loopback port)");
  s.AddInt("actor.max_steps", 0, "global steps to train (0: until the data runs out)", 0);
  s.AddInt("actor.max_staleness", -1,
           "groups older than this many versions are dropped or counted (-1: no bound)", -1);
  s.AddBool("actor.drop_stale", true, "drop groups above max_staleness (false: keep, count)");
  s.AddString("actor.optimizer", "adamw", "adamw or sgd");
  s.AddFloat("actor.lr", 1e-6, "peak learning rate", 0.0, 10.0);
  s.AddFloat("actor.weight_decay", 0.01, "decoupled weight decay", 0.0);
  s.AddFloat("actor.grad_clip", 1.0, "max global gradient norm (0: off)", 0.0);
  s.AddString("actor.lr_schedule", "constant", "constant, constant_with_warmup or cosine");
  s.AddInt("actor.warmup_steps", 0, "linear warm-up steps", 0);
  s.AddString("actor.loss", "vanilla", "policy loss: vanilla (PPO clip), gspo or pg");
  s.AddString("actor.loss_agg_mode", "token-mean",
              "token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm");
  s.AddFloat("actor.clip_ratio_low", 0.2, "PPO clip below 1", 0.0);
  s.AddFloat("actor.clip_ratio_high", 0.28, "PPO clip above 1 (DAPO)", 0.0);
  s.AddString("actor.is_level", "token",
              "truncated IS weight min(pi_old/mu, C): token, sequence, geometric or none");
  s.AddFloat("actor.is_cap", 2.0, "the truncation C", 0.0);
  s.AddFloat("actor.kl_coef", 0.0, "KL to the initial policy (0: off)", 0.0);
  s.AddString("actor.kl_estimator", "k3", "k1, k2 or k3");
  s.AddFloat("actor.entropy_coef", 0.0, "entropy bonus");
  s.AddString("actor.adv_estimator", "grpo", "grpo, dr_grpo, rloo, reinforce_pp or gae");
  s.AddInt("actor.mini_batch_size", 0, "samples per update (0: all)", 0);
  s.AddInt("actor.micro_batch_tokens", 8192, "tokens per forward/backward", 1);
  s.AddInt("actor.ppo_epochs", 1, "passes over each step's samples", 1);
  s.AddBool("actor.share_prompts", true,
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
              "append one JSON line per trained sample (ids, versions, reward) to this file, "
              "which `laminar audit` checks against the checkpoint's ledger (laminar run: "
              "<run.dir>/trajectories.jsonl; empty elsewhere: none)");
  s.AddBool("repack.enabled", true,
            "move long-tail trajectories to free rollouts (docs/architecture.md)");
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
  s.AddFloat("cluster.stop_grace_s", 25.0,
             "stopped while the actor still runs (scancel signals every role at once), the manager "
             "and the master relay on the actor's node keep serving for up to this long so that "
             "the actor can save its checkpoint; keep it below Slurm's KillWait (default 30 s)",
             0.0);
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

}  // namespace laminar::recipe
