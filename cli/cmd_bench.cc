// `laminar bench hw|decode|prefill|gemm|rollout|train|broadcast|publish`: JSON output, reported
// against measured hardware limits (bench/hw_limits.h) or a peer measured in the same run (oneDNN's
// s8 / bf16 matmuls, bench/gemm_bench.h; llama.cpp's
// batched bench, bench/rollout_bench.h; PyTorch, bench/train_bench.h; the relay tier's
// point-to-point transfer, bench/broadcast_bench.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "bench/broadcast_bench.h"
#include "bench/gemm_bench.h"
#include "bench/hw_limits.h"
#include "bench/model_bench.h"
#include "bench/rollout_bench.h"
#include "bench/spec_bench.h"
#include "bench/train_bench.h"
#include "cli/command.h"
#include "engine/llama_model.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/cpu_features.h"
#include "model/chat_format.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer_loader.h"
#include "rollout/manager/prompt_dataset.h"
#include "rollout/speculative.h"

namespace laminar::cli {
namespace {

struct BenchArgs {
  std::string what = "hw";
  std::string model = "smollm2-135m-instruct";
  std::vector<int64_t> batches = {1, 8, 32, 64};
  int64_t steps = 16;
  int64_t prompt_tokens = 512;
  int repeats = 3;
  std::vector<std::string>
      weights;  // engine::WeightFormat names; empty: f32 (rollout: kRolloutWeights)
  std::string transport = "zmq";
  double bytes = 500e6;
  double chunk_bytes = 4 * 1024 * 1024;
  std::vector<int> relays = {1, 2, 4, 8};
  std::string log_dir;
  int64_t seq_len = 512;
  int64_t seqs = 8;
  std::string compute = "both";
  bool recompute = false;
  std::string peer_python;
  // rollout
  int32_t prompts = 16;
  int32_t n = 8;
  int64_t prompt_len = 128;
  int32_t max_tokens = 256;
  float temperature = 1.0f;
  uint64_t seed = 0;
  int64_t kv_cache_mb = 0;  // 0: --num-blocks, else enough for the load
  int32_t num_blocks = 0;   // 0: enough for the whole load without preemption
  int32_t block_size = 16;
  int64_t max_num_seqs = 0;  // 0: every sample of the load at once
  int64_t max_num_batched_tokens = 2048;
  std::string peer_llamacpp;  // empty: DefaultLlamaCppBinDir() when present
  bool no_peer = false;
  std::string peer_model;  // empty: PeerModelFor(the model)
  std::vector<int64_t> peer_npl = {8, 32, 64};
  std::string peer_fa = "both";
  int64_t dram_mb = 1024;  // buffer of the DRAM bandwidth measurement
  // spec (the shared flags --batch, --prompts, --max-tokens take these defaults when not given)
  std::string data;  // JSONL prompts (GSM8K: field "question")
  std::string prompt_key = "question";
  std::vector<std::string> drafters = {"suffix"};
  std::vector<float> temperatures = {0.0f, 1.0f};
  int64_t max_draft_tokens = 8;
  int64_t rounds = 1;          // spec: interleaved rounds of off and every drafter
  int32_t warmup_tokens = 32;  // spec: max_tokens of the warm-up pass
  int32_t tail_tokens = 0;     // spec: max_tokens of the long-tail sample (0: none)
  bool fixed_drafts = false;
  bool control = false;         // spec: a second off lane, the measurement's own noise
  int64_t draft_vocab = 16384;  // spec: the +vocab drafters' draft vocabulary
  double min_confidence = rollout::SpeculativeConfig{}.min_confidence;  // spec: model drafters'
  std::string draft_model;                 // the draft_model drafter's checkpoint
  std::string draft_weights;               // its weight format (default: the policy's)
  std::function<bool(const char*)> given;  // whether a flag was on the command line
};

// The default weight format of `bench rollout`: the trainer's own precision, so the default run
// measures the policy the trainer computes (`--weights bf16,w8a8,w4a8,gguf` for the others).
constexpr const char* kRolloutWeights = "f32";

int Fail(const Status& s) { return CommandFail("bench", s.ToString()); }

std::string SelfPath() {
  char buf[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "laminar";
}

int RunBroadcast(const BenchArgs& a) {
  nlohmann::json out;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string transport : {"zmq", "ucx"}) {
    if (a.transport != "both" && a.transport != transport) continue;
    bench::BroadcastConfig c;
    c.laminar_binary = SelfPath();
    c.transport = transport;
    c.bytes = static_cast<uint64_t>(a.bytes);
    c.chunk_bytes = static_cast<uint64_t>(a.chunk_bytes);
    c.relay_counts = a.relays;
    c.repeats = a.repeats;
    c.log_dir = a.log_dir;
    auto result = bench::BenchBroadcast(c);
    if (!result.ok()) return Fail(result.status());
    for (const auto& r : *result) {
      rows.push_back({{"transport", r.transport},
                      {"topology", r.topology},
                      {"relays", r.relays},
                      {"median_s", r.median_s},
                      {"spread_s", r.spread_s},
                      {"ratio_to_p2p", r.ratio_to_p2p},
                      {"cpu_s", r.cpu_s}});
      std::fprintf(stderr,
                   "%s %-5s to %d relay(s): %7.3f s (spread %.3f)  %.2fx one transfer  "
                   "(%.2f CPU s)\n",
                   r.transport.c_str(), r.topology.c_str(), r.relays, r.median_s, r.spread_s,
                   r.ratio_to_p2p, r.cpu_s);
    }
  }
  out["bytes"] = a.bytes;
  out["chunk_bytes"] = a.chunk_bytes;
  out["cores"] = std::thread::hardware_concurrency();
  out["broadcast"] = rows;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// The actor's stall when publishing a real model, against an estimated training step.
int RunPublish(const BenchArgs& a) {
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status());
  std::vector<relay::TensorBytes> tensors;
  for (const std::string& name : ckpt->weights.Names()) {
    auto t = ckpt->weights.Get(name);
    if (!t.ok()) return Fail(t.status());
    tensors.push_back({name,
                       t->dtype(),
                       t->shape().dims(),
                       {static_cast<const uint8_t*>(t->data()), t->size_bytes()}});
  }
  const std::string transport = a.transport == "both" ? "zmq" : a.transport;
  auto stall = bench::BenchPublishStall(tensors, transport, a.repeats);
  if (!stall.ok()) return Fail(stall.status());
  auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights);
  if (!lm.ok()) return Fail(lm.status());
  // Until the trainer exists (issue 5): a step of one 512-token sequence costs about three
  // forward passes (forward, and backward at twice the forward's FLOPs).
  auto fwd = bench::BenchPrefill(**lm, 512, 1);
  const double step_s = 3 * fwd.median_s;
  nlohmann::json out = {{"model", a.model},
                        {"transport", transport},
                        {"bytes", stall->bytes},
                        {"publish_stall_s", stall->median_stall_s},
                        {"publish_stall_spread_s", stall->spread_s},
                        {"send_to_master_s", stall->send_s},
                        {"estimated_step_s", step_s},
                        {"stall_fraction_of_step", stall->median_stall_s / step_s}};
  std::fprintf(stderr,
               "publish %s (%.1f MB): stall %.4f s, %.2f%% of an estimated %.2f s training step; "
               "the master relay holds it %.3f s later\n",
               a.model.c_str(), stall->bytes / 1e6, stall->median_stall_s,
               100 * stall->median_stall_s / step_s, step_s, stall->send_s);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// Trainer forward + backward throughput against oneDNN's GEMM peak and, when a Python with
// PyTorch is given, against PyTorch's LlamaForCausalLM of the same shape in the same run.
int RunTrain(const BenchArgs& a) {
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status());
  const double gemm = bench::MeasureGemmPeakF32();
  nlohmann::json out = {{"model", a.model},
                        {"seq_len", a.seq_len},
                        {"seqs", a.seqs},
                        {"recompute", a.recompute},
                        {"gemm_f32_gflop_per_s", gemm / 1e9}};
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string compute : {"f32", "bf16"}) {
    if (a.compute != "both" && a.compute != compute) continue;
    bench::TrainBenchConfig c;
    c.seq_len = a.seq_len;
    c.num_seqs = a.seqs;
    c.bf16_compute = compute == "bf16";
    c.recompute = a.recompute;
    c.repeats = a.repeats;
    auto r = bench::BenchTrain(ckpt->config, ckpt->weights, c);
    if (!r.ok()) return Fail(r.status());
    nlohmann::json row = {{"compute", compute},
                          {"tokens", r->tokens},
                          {"median_s", r->median_s},
                          {"spread_s", r->spread_s},
                          {"tokens_per_s", r->tokens_per_s},
                          {"gemm_peak_fraction", r->model_flop_per_s / gemm},
                          {"activation_bytes", r->activation_bytes}};
    std::string peer_note;
    if (!a.peer_python.empty()) {
      auto peer = bench::RunTorchTrainPeer(a.peer_python, ckpt->config, c);
      if (!peer.ok()) return Fail(peer.status());
      row["torch_tokens_per_s"] = *peer;
      row["ratio_to_torch"] = r->tokens_per_s / *peer;
      peer_note = "  PyTorch " + std::to_string(static_cast<int64_t>(*peer)) + " tok/s, ratio " +
                  std::to_string(r->tokens_per_s / *peer);
    }
    std::fprintf(stderr, "train %s %lld x %lld: %8.1f tok/s (%.0f%% of GEMM peak)%s\n",
                 compute.c_str(), static_cast<long long>(a.seqs), static_cast<long long>(a.seq_len),
                 r->tokens_per_s, 100 * r->model_flop_per_s / gemm, peer_note.c_str());
    rows.push_back(row);
  }
  out["train"] = rows;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// getloadavg(3)'s one-minute average; -1 when unavailable.
double LoadAverage1m() {
  double load[1] = {-1};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

nlohmann::json RunJson(const bench::RolloutRun& r) {
  return {{"samples", r.num_samples},
          {"generated_tokens", r.generated_tokens},
          {"steps", r.steps},
          {"wall_s", r.wall_s},
          {"tokens_per_s", r.tokens_per_s},
          {"median_step_s", r.median_step_s},
          {"preemptions", r.preemptions},
          {"peak_kv_blocks_used", r.peak_kv_blocks_used}};
}

// {"npl": tokens/s, ...}.
nlohmann::json BestJson(const std::map<int64_t, double>& best) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [npl, tg] : best) j[std::to_string(npl)] = tg;
  return j;
}

// llama-batched-bench on the same load, once per flash-attention setting. Returns the "llama_cpp"
// JSON (with a "skipped" reason when there is no peer to run) and fills `best` with the best
// S_TG per npl over the settings.
StatusOr<nlohmann::json> RunRolloutPeer(const BenchArgs& a, const std::string& model_path,
                                        std::map<int64_t, double>* best) {
  if (a.no_peer) return nlohmann::json{{"skipped", "--no-peer"}};
  const std::string bin_dir =
      a.peer_llamacpp.empty() ? bench::DefaultLlamaCppBinDir() : a.peer_llamacpp;
  const std::string bin = bin_dir + "/llama-batched-bench";
  if (access(bin.c_str(), X_OK) != 0) {
    if (!a.peer_llamacpp.empty()) return NotFoundError("--peer-llamacpp: no " + bin);
    return nlohmann::json{{"skipped", bin + " not found (scripts/setup.sh --bench builds it)"}};
  }
  const std::string peer_model =
      a.peer_model.empty() ? bench::PeerModelFor(model_path) : a.peer_model;
  if (peer_model.empty()) {
    return nlohmann::json{{"skipped", model_path + " is not a GGUF; give the peer --peer-model"}};
  }
  bench::LlamaCppPeerConfig c;
  c.bin_dir = bin_dir;
  c.model = peer_model;
  c.prompt_len = a.prompt_len;
  c.max_tokens = a.max_tokens;
  c.npl = a.peer_npl;
  c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nlohmann::json runs = nlohmann::json::array();
  for (const bool fa : {true, false}) {
    if (a.peer_fa != "both" && (a.peer_fa == "on") != fa) continue;
    c.flash_attn = fa;
    LAMINAR_ASSIGN_OR_RETURN(std::vector<bench::BatchedBenchRow> rows,
                             bench::RunLlamaCppBatchedBench(c));
    nlohmann::json jrows = nlohmann::json::array();
    for (const bench::BatchedBenchRow& r : rows) {
      jrows.push_back({{"npl", r.npl},
                       {"t_pp_s", r.t_pp_s},
                       {"pp_tokens_per_s", r.pp_tokens_per_s},
                       {"t_tg_s", r.t_tg_s},
                       {"tg_tokens_per_s", r.tg_tokens_per_s}});
      (*best)[r.npl] = std::max((*best)[r.npl], r.tg_tokens_per_s);
      std::fprintf(stderr, "llama.cpp fa %-3s npl %3lld: %8.1f generated tok/s (S_TG)\n",
                   fa ? "on" : "off", static_cast<long long>(r.npl), r.tg_tokens_per_s);
    }
    runs.push_back({{"flash_attn", fa}, {"rows", jrows}});
  }
  return nlohmann::json{{"binary", bin},
                        {"model", peer_model},
                        {"threads", c.threads},
                        {"command", "llama-batched-bench -npp " + std::to_string(c.prompt_len) +
                                        " -ntg " + std::to_string(c.max_tokens) + " -pps"},
                        {"runs", runs},
                        {"best_tg_tokens_per_s", BestJson(*best)}};
}

// The engine sized by the flags: KV blocks from --num-blocks or --kv-cache-mb, else enough for the
// whole load; every sample running at once unless --max-num-seqs.
rollout::RolloutEngineConfig RolloutConfigFor(const BenchArgs& a, const bench::RolloutLoad& load,
                                              const model::ModelConfig& mc) {
  rollout::RolloutEngineConfig config;
  config.block_size = a.block_size;
  int64_t blocks = a.num_blocks > 0 ? a.num_blocks : bench::BlocksForLoad(load, a.block_size);
  if (a.kv_cache_mb > 0) {
    // A size too small for one block leaves one block: the engine then reports the load too big.
    auto fit = rollout::KvBlocksFor(a.kv_cache_mb, rollout::KvBytesPerToken(mc), a.block_size);
    blocks = fit.ok() ? *fit : 1;
  }
  config.num_blocks = static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 30));
  config.scheduler.max_num_seqs = a.max_num_seqs > 0 ? a.max_num_seqs : load.num_samples();
  config.scheduler.max_num_batched_tokens = a.max_num_batched_tokens;
  return config;
}

// One weight dtype's results as JSON, with its human lines on stderr.
nlohmann::json ReportRollout(const std::string& w, const bench::RolloutLoad& load,
                             int32_t num_blocks, const bench::RolloutBenchResult& r) {
  nlohmann::json grpo = RunJson(r.grpo);
  grpo["decode_s"] = r.decode_s;
  grpo["decode_tokens_per_s"] = r.decode_tokens_per_s;
  grpo["dram_fraction"] = r.grpo_dram_fraction;
  nlohmann::json batch1 = RunJson(r.batch1);
  batch1["decode_tokens_per_s"] = r.batch1_decode_tokens_per_s;
  batch1["dram_fraction"] = r.batch1_dram_fraction;
  std::fprintf(stderr,
               "rollout %-4s %dx%d, %lld+%d tokens: %8.1f generated tok/s (decode %.1f), %lld "
               "steps, %lld preemptions, peak %d/%d KV blocks, %.0f%% of DRAM bandwidth\n",
               w.c_str(), load.num_prompts, load.n, static_cast<long long>(load.prompt_len),
               load.max_tokens, r.grpo.tokens_per_s, r.decode_tokens_per_s,
               static_cast<long long>(r.grpo.steps), static_cast<long long>(r.grpo.preemptions),
               r.grpo.peak_kv_blocks_used, num_blocks, 100 * r.grpo_dram_fraction);
  std::fprintf(stderr,
               "rollout %-4s batch 1: %8.1f generated tok/s (decode %.1f), %.0f%% of DRAM "
               "bandwidth\n",
               w.c_str(), r.batch1.tokens_per_s, r.batch1_decode_tokens_per_s,
               100 * r.batch1_dram_fraction);
  return {{"weights", w},
          {"weight_bytes_per_step", r.weight_bytes_per_step},
          {"grpo", grpo},
          {"prefill_only", RunJson(r.prefill)},
          {"batch1", batch1}};
}

// Our generated tokens/s (whole load, and decode phase) over llama.cpp's best S_TG at npl 64 (the
// largest npl run when 64 is not among them), and per npl.
nlohmann::json RolloutRatios(const nlohmann::json& ours, const std::map<int64_t, double>& best) {
  const int64_t ref = best.contains(64) ? 64 : best.rbegin()->first;
  const double peer = best.at(ref);
  nlohmann::json ratios = nlohmann::json::array();
  for (const nlohmann::json& row : ours) {
    const double generated = row["grpo"]["tokens_per_s"].get<double>();
    const double decode = row["grpo"]["decode_tokens_per_s"].get<double>();
    nlohmann::json per_npl;
    for (const auto& [npl, tg] : best) per_npl[std::to_string(npl)] = generated / tg;
    ratios.push_back({{"weights", row["weights"]},
                      {"npl", ref},
                      {"generated", generated / peer},
                      {"decode", decode / peer},
                      {"generated_per_npl", per_npl}});
    std::fprintf(stderr,
                 "ratio %-4s: %.2fx llama.cpp's best S_TG at npl %lld (decode phase %.2fx)\n",
                 row["weights"].get<std::string>().c_str(), generated / peer,
                 static_cast<long long>(ref), decode / peer);
  }
  return ratios;
}

// The rollout engine on a GRPO-shaped load and at batch 1 (bench/rollout_bench.h), for each
// weight dtype asked, against llama-batched-bench in the same run.
int RunRollout(const BenchArgs& a) {
  if (a.kv_cache_mb > 0 && a.num_blocks > 0) {
    return CommandFail("bench", "give --kv-cache-mb or --num-blocks, not both", 2);
  }
  bench::RolloutLoad load{a.prompts, a.n, a.prompt_len, a.max_tokens, a.temperature, a.seed};
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status());
  const rollout::RolloutEngineConfig config = RolloutConfigFor(a, load, ckpt->config);
  // Other work on the machine skews both sides (llama.cpp's spinning threads most): say how busy.
  const double load_before = LoadAverage1m();
  // The peer runs first, so a missing or failing peer is reported before minutes of our runs.
  std::map<int64_t, double> best;
  auto peer = RunRolloutPeer(a, *path, &best);
  if (!peer.ok()) return Fail(peer.status());
  const double bw = bench::MeasureDramReadBandwidth(a.dram_mb << 20);
  nlohmann::json out = {{"model", *path},
                        {"isa", kernels::cpu::IsaName(kernels::cpu::BestIsa())},
                        {"cores", std::thread::hardware_concurrency()},
                        {"dram_read_gb_per_s", bw / 1e9},
                        {"load",
                         {{"prompts", load.num_prompts},
                          {"n", load.n},
                          {"prompt_len", load.prompt_len},
                          {"max_tokens", load.max_tokens},
                          {"temperature", load.temperature},
                          {"seed", load.seed}}},
                        {"engine",
                         {{"block_size", config.block_size},
                          {"num_blocks", config.num_blocks},
                          {"max_num_seqs", config.scheduler.max_num_seqs},
                          {"max_num_batched_tokens", config.scheduler.max_num_batched_tokens},
                          {"kv_dtype", "f32"}}}};
  const std::vector<std::string> formats =
      a.weights.empty() ? std::vector<std::string>{kRolloutWeights} : a.weights;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& w : formats) {
    // What a rollout pays per pulled version: the model built from f32 tensors, quantized.
    const auto t0 = std::chrono::steady_clock::now();
    auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                         *engine::ParseWeightFormat(w));
    const double create_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!lm.ok()) return Fail(lm.status());
    auto r = bench::BenchRollout(**lm, load, config, bw);
    if (!r.ok()) return Fail(r.status());
    out["kv_bytes_per_token"] = r->kv_bytes_per_token;
    rows.push_back(ReportRollout(w, load, config.num_blocks, *r));
    rows.back()["model_create_s"] = create_s;
    std::fprintf(stderr, "rollout %-4s model built (quantized) in %.2f s\n", w.c_str(), create_s);
  }
  out["laminar"] = rows;
  out["llama_cpp"] = *peer;
  out["load_average_1m"] = {{"start", load_before}, {"end", LoadAverage1m()}};
  if (!best.empty()) {
    out["ratio_to_llama_cpp"] = RolloutRatios(rows, best);
  } else {
    std::fprintf(stderr, "llama.cpp peer skipped: %s\n",
                 (*peer)["skipped"].get<std::string>().c_str());
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// Every weight format's decode-shape matmuls next to oneDNN s8 / bf16 (bench/gemm_bench.h).
int RunGemm(const BenchArgs& a) {
  const double bw = bench::MeasureDramReadBandwidth(a.dram_mb << 20);
  auto out = bench::BenchGemm(bench::SmolLM2GemmShapes(), a.batches, bw);
  if (!out.ok()) return Fail(out.status());
  std::printf("%s\n", out->dump(2).c_str());
  return 0;
}

// `bench spec`: each drafter against speculation off, per batch and temperature, on chat-rendered
// prompts of a JSONL dataset (GRPO groups of --n).
int RunSpec(const BenchArgs& a) {
  if (a.data.empty()) {
    return CommandFail("bench",
                       "bench spec needs --data PROMPTS.jsonl (GSM8K: "
                       "../shared/data/datasets/gsm8k/test.jsonl, field 'question')",
                       2);
  }
  if (a.weights.size() > 1) return CommandFail("bench", "bench spec takes one --weights", 2);
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status());
  auto tok = model::LoadTokenizerForModel(*path, "");
  if (!tok.ok()) return Fail(tok.status());
  manager::PromptDatasetOptions d;
  d.prompt_key = a.prompt_key;
  d.ground_truth_key = "";
  d.default_data_source = "bench";
  auto chat = model::ResolveChatFormat("auto", ckpt->chat_template);
  if (!chat.ok()) return Fail(chat.status());
  d.chat = *chat;
  auto set = manager::LoadPromptDataset(a.data, **tok, d);
  if (!set.ok()) return Fail(set.status());
  const int32_t num_prompts = a.given("--prompts") ? a.prompts : 2;
  const std::vector<int64_t> batches =
      a.given("--batch") ? a.batches : std::vector<int64_t>{1, 4, 16};
  // The warm-up pass's prompts follow the timed ones: enough GRPO groups to fill the largest batch.
  const int64_t warmup_prompts = (std::ranges::max(batches) + a.n - 1) / a.n;
  const int64_t tail_prompts = a.tail_tokens > 0 ? 1 : 0;
  if (std::ssize(set->rows) < num_prompts + warmup_prompts + tail_prompts) {
    return CommandFail("bench",
                       a.data + " has " + std::to_string(set->rows.size()) +
                           " prompts, fewer than --prompts " + std::to_string(num_prompts) +
                           " and the " + std::to_string(warmup_prompts) + " of the warm-up pass" +
                           (tail_prompts > 0 ? " and the tail sample's" : ""),
                       2);
  }
  bench::SpecLoad load;
  for (int32_t i = 0; i < num_prompts; ++i) load.prompts.push_back(set->rows[i].prompt_ids);
  for (int64_t i = 0; i < warmup_prompts; ++i) {
    load.warmup_prompts.push_back(set->rows[num_prompts + i].prompt_ids);
  }
  load.warmup_max_tokens = a.warmup_tokens;
  if (a.tail_tokens > 0) {
    load.tail_prompt = set->rows[num_prompts + warmup_prompts].prompt_ids;
    load.tail_max_tokens = a.tail_tokens;
  }
  load.n = a.n;
  load.max_tokens = a.given("--max-tokens") ? a.max_tokens : 128;
  for (int64_t id : ckpt->config.eos_token_ids) load.stop_ids.push_back(static_cast<int32_t>(id));
  if ((*tok)->eos_id() >= 0) load.stop_ids.push_back((*tok)->eos_id());
  load.seed = a.seed;
  load.block_size = a.block_size;
  const std::string weights = a.weights.empty() ? "f32" : a.weights[0];
  auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                       *engine::ParseWeightFormat(weights));
  if (!lm.ok()) return Fail(lm.status());
  std::optional<model::Checkpoint> draft_ckpt;
  std::unique_ptr<engine::LlamaModel> draft;
  if (std::ranges::any_of(
          a.drafters, [](const std::string& name) { return name.starts_with("draft_model"); })) {
    if (a.draft_model.empty())
      return CommandFail("bench", "drafter draft_model needs --draft-model", 2);
    // `policy`: the policy's own checkpoint, as the recipe's draft_model: policy drafts.
    if (a.draft_model != rollout::kPolicyDraftModel) {
      auto dpath = model::ResolveModelPath(a.draft_model);
      if (!dpath.ok()) return Fail(dpath.status());
      auto dc = model::LoadCheckpoint(*dpath);
      if (!dc.ok()) return Fail(dc.status());
      draft_ckpt = std::move(*dc);
    }
    const model::Checkpoint& dck = draft_ckpt ? *draft_ckpt : *ckpt;
    auto dm = engine::LlamaModel::Create(
        dck.config, dck.weights, engine::Backend::kCpu,
        *engine::ParseWeightFormat(a.draft_weights.empty() ? weights : a.draft_weights));
    if (!dm.ok()) return Fail(dm.status());
    draft = std::move(*dm);
  }
  nlohmann::json rows = nlohmann::json::array();
  // Each (temperature, batch) runs `rounds` rounds; a round runs off and every drafter in
  // lockstep (bench::RunSpecCases), and a drafter's speed-up is the median over rounds of its
  // ratio to off in the same round.
  const int64_t rounds = a.rounds;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return 0.0;
    const size_t h = v.size() / 2;
    return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
  };
  for (const float t : a.temperatures) {
    for (const int64_t b : batches) {
      std::vector<std::string> drafters = {"off"};
      for (const std::string& name : a.drafters) {  // each once (a repeat would double its rounds)
        if (std::ranges::find(drafters, name) == drafters.end()) drafters.push_back(name);
      }
      if (a.control) drafters.push_back("off-control");
      std::map<std::string, std::vector<bench::SpecRun>> runs;
      for (int64_t round = 0; round < rounds; ++round) {
        // Odd rounds create the lanes in the reverse order, so that the first-created lane (whose
        // memory placement may differ) is off in one round and the control lane in the next.
        std::vector<std::string> order = drafters;
        if (round % 2 == 1) std::ranges::reverse(order);
        std::vector<bench::SpecCase> cases;
        for (const std::string& drafter : order) {
          cases.push_back({.drafter = drafter == "off-control" ? "off" : drafter,
                           .batch = b,
                           .temperature = t,
                           .max_draft_tokens = a.max_draft_tokens,
                           .adaptive = !a.fixed_drafts,
                           .draft_vocab = a.draft_vocab,
                           .min_confidence = a.min_confidence,
                           .draft_model = draft.get()});
        }
        auto r = bench::RunSpecCases(**lm, load, cases);
        if (!r.ok()) return Fail(r.status());
        for (size_t i = 0; i < order.size(); ++i) runs[order[i]].push_back(std::move((*r)[i]));
      }
      const std::vector<bench::SpecRun>& off = runs.at("off");
      for (const std::string& drafter : drafters) {
        const std::vector<bench::SpecRun>& mine = runs.at(drafter);
        std::vector<double> ratios, tail_ratios, tps;
        for (size_t round = 0; round < mine.size(); ++round) {
          const bench::SpecRun& o = off[round];
          const bench::SpecRun& m = mine[round];
          ratios.push_back(o.tokens_per_s > 0 ? m.tokens_per_s / o.tokens_per_s : 0);
          tail_ratios.push_back(o.tail_tokens_per_s > 0 ? m.tail_tokens_per_s / o.tail_tokens_per_s
                                                        : 0);
          tps.push_back(m.tokens_per_s);
        }
        // The other fields come from the round whose tokens/s is nearest the median.
        const double median_tps = median(tps);
        size_t mid = 0;
        for (size_t k = 1; k < tps.size(); ++k) {
          if (std::abs(tps[k] - median_tps) < std::abs(tps[mid] - median_tps)) mid = k;
        }
        const bench::SpecRun& r = mine[mid];
        const double speedup = median(ratios), tail_speedup = median(tail_ratios);
        rows.push_back({{"drafter", drafter},
                        {"batch", b},
                        {"temperature", t},
                        {"rounds", rounds},
                        {"generated_tokens", r.generated_tokens},
                        {"warmup_s", r.warmup_s},
                        {"steps_s", r.steps_s},
                        {"tokens_per_s", r.tokens_per_s},
                        {"tokens_per_s_each_round", tps},
                        {"speedup_vs_off", speedup},
                        {"speedups_vs_off_each_round", ratios},
                        {"mean_accepted_len", r.mean_accepted_len},
                        {"accept_rate", r.accept_rate},
                        {"enabled_frac", r.enabled_frac},
                        {"decode_steps", r.spec.decode_steps},
                        {"budgeted", r.spec.budgeted},
                        {"empty_drafts", r.spec.empty_drafts},
                        {"rerooted", r.spec.rerooted},
                        {"tail_tokens", r.tail_tokens},
                        {"tail_tokens_per_s", r.tail_tokens_per_s},
                        {"tail_speedup_vs_off", tail_speedup},
                        {"step_fixed_ms", 1e3 * r.step_fixed_s},
                        {"step_per_token_ms", 1e3 * r.step_per_token_s},
                        {"draft_forward_fixed_ms", 1e3 * r.draft_fixed_s},
                        {"draft_forward_per_row_ms", 1e3 * r.draft_per_row_s}});
        std::string each;
        for (double x : ratios) {
          char buf[16];
          std::snprintf(buf, sizeof(buf), "%s%.2f", each.empty() ? "" : " ", x);
          each += buf;
        }
        // No ratio where off ran no step alone (its samples all ended together).
        char tail_ratio[16] = "x -";
        if (tail_speedup > 0) std::snprintf(tail_ratio, sizeof(tail_ratio), "x%.2f", tail_speedup);
        std::fprintf(stderr,
                     "T=%.1f batch %3lld %-17s %7.1f tok/s (x%.2f [%s])  accepted len %.2f  "
                     "enabled %.2f  tail %7.1f tok/s (%s)  step %.1f + %.2f/token ms, "
                     "draft %.2f + %.2f/row ms\n",
                     t, static_cast<long long>(b), drafter.c_str(), r.tokens_per_s, speedup,
                     each.c_str(), r.mean_accepted_len, r.enabled_frac, r.tail_tokens_per_s,
                     tail_ratio, 1e3 * r.step_fixed_s, 1e3 * r.step_per_token_s,
                     1e3 * r.draft_fixed_s, 1e3 * r.draft_per_row_s);
      }
    }
  }
  nlohmann::json out = {{"model", *path},
                        {"weights_dtype", weights},
                        {"data", a.data},
                        {"prompts", num_prompts},
                        {"n", load.n},
                        {"max_tokens", load.max_tokens},
                        {"eos_stops", "at temperature 0 only"},
                        {"warmup_max_tokens", load.warmup_max_tokens},
                        {"tail_max_tokens", load.tail_max_tokens},
                        {"max_draft_tokens", a.max_draft_tokens},
                        {"adaptive", !a.fixed_drafts},
                        {"min_confidence", a.min_confidence},
                        {"cores", std::thread::hardware_concurrency()},
                        {"rows", rows}};
  // The draft vocabulary only where a drafter used one.
  if (std::ranges::any_of(a.drafters, [](const std::string& name) {
        return name.find("+vocab") != std::string::npos;
      })) {
    out["draft_vocab"] = a.draft_vocab;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int RunBench(const BenchArgs& a) {
  if (a.what == "spec") return RunSpec(a);
  if (a.what == "gemm") return RunGemm(a);
  if (a.what == "broadcast") return RunBroadcast(a);
  if (a.what == "train") return RunTrain(a);
  if (a.what == "publish") return RunPublish(a);
  if (a.what == "rollout") return RunRollout(a);
  if (a.weights.size() > 1)
    return CommandFail("bench", "several --weights are for bench rollout", 2);
  nlohmann::json out;
  out["isa"] = kernels::cpu::IsaName(kernels::cpu::BestIsa());
  double bw = bench::MeasureDramReadBandwidth();
  double gemm = bench::MeasureGemmPeakF32();
  out["dram_read_gb_per_s"] = bw / 1e9;
  out["gemm_f32_gflop_per_s"] = gemm / 1e9;
  if (a.what != "hw") {
    auto path = model::ResolveModelPath(a.model);
    if (!path.ok()) return Fail(path.status());
    auto ckpt = model::LoadCheckpoint(*path);
    if (!ckpt.ok()) return Fail(ckpt.status());
    const std::string weights = a.weights.empty() ? "f32" : a.weights[0];
    if (a.what == "prefill" && a.prompt_tokens > ckpt->config.max_position_embeddings) {
      return CommandFail("bench",
                         "--prompt-tokens " + std::to_string(a.prompt_tokens) +
                             " is longer than the model's context of " +
                             std::to_string(ckpt->config.max_position_embeddings) + " positions",
                         2);
    }
    auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                         *engine::ParseWeightFormat(weights));
    if (!lm.ok()) return Fail(lm.status());
    out["model"] = a.model;
    out["weights_dtype"] = weights;
    const double step_bytes = static_cast<double>((*lm)->projection_bytes());
    nlohmann::json rows = nlohmann::json::array();
    if (a.what == "decode") {
      // Weights read per token against the cache that can hold part of them (a DRAM fraction
      // above 1 means some stayed cached between tokens).
      out["weight_bytes_per_token"] = step_bytes;
      out["last_level_cache_bytes"] = bench::LastLevelCacheBytes();
      for (int64_t b : a.batches) {
        auto r = bench::BenchDecode(**lm, b, a.steps);
        double frac = step_bytes / r.median_s / bw;
        rows.push_back({{"batch", b},
                        {"tokens_per_s", r.tokens_per_s},
                        {"median_step_s", r.median_s},
                        {"spread_s", r.spread_s},
                        {"dram_fraction", frac}});
        std::fprintf(stderr, "decode batch %3lld: %8.1f tok/s  (%.0f%% of DRAM bandwidth)\n",
                     static_cast<long long>(b), r.tokens_per_s, 100 * frac);
      }
    } else {
      auto r = bench::BenchPrefill(**lm, a.prompt_tokens, a.repeats);
      double flops = 2.0 * bench::MatmulParams(ckpt->config) * double(r.tokens) / r.median_s;
      // bf16 weights prefill on the bf16 GEMM (AMX here): their limit is oneDNN's bf16 peak. The
      // integer formats are reported against the f32 peak (gemm_peak_dtype says which).
      double peak = gemm;
      std::string peak_dtype = "f32";
      if (weights == "bf16" && kernels::cpu::HasBF16Dot()) {  // else bf16 weights widen to f32
        if (const double bf16 = bench::MeasureGemmPeakBF16(); bf16 > 0) {
          peak = bf16;
          peak_dtype = "bf16";
          out["gemm_bf16_gflop_per_s"] = bf16 / 1e9;
        }
      }
      rows.push_back({{"prompt_tokens", a.prompt_tokens},
                      {"tokens_per_s", r.tokens_per_s},
                      {"median_s", r.median_s},
                      {"spread_s", r.spread_s},
                      {"gemm_peak_fraction", flops / peak},
                      {"gemm_peak_dtype", peak_dtype}});
      std::fprintf(stderr, "prefill %lld tokens: %8.1f tok/s  (%.0f%% of the %s GEMM peak)\n",
                   static_cast<long long>(a.prompt_tokens), r.tokens_per_s, 100 * flops / peak,
                   peak_dtype.c_str());
    }
    out[a.what] = rows;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupBench(CLI::App* app) {
  auto a = std::make_shared<BenchArgs>();
  app->add_option("what", a->what,
                  "hw (limits only), decode, prefill, gemm (quantized matmuls vs oneDNN), rollout "
                  "(rollout engine vs llama.cpp), spec (speculative decoding vs off), train "
                  "(trainer), broadcast (relay tier) or publish (actor stall)")
      ->check(CLI::IsMember(
          {"hw", "decode", "prefill", "gemm", "rollout", "spec", "train", "broadcast", "publish"}));
  app->add_option("--model", a->model, "checkpoint path or model name");
  app->add_option("--batch", a->batches,
                  "decode batch sizes (gemm: the M rows; spec: running sequences, default 1 4 16)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--steps", a->steps, "decode steps timed per batch size")
      ->check(CLI::Range(1, 100000));
  app->add_option("--prompt-tokens", a->prompt_tokens, "prefill length")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--repeats", a->repeats, "prefill, broadcast and publish repetitions")
      ->check(CLI::Range(1, 1000));
  app->add_option("--transport", a->transport, "broadcast/publish: zmq, ucx or both")
      ->check(CLI::IsMember({"zmq", "ucx", "both"}));
  app->add_option("--bytes", a->bytes, "broadcast: bytes in the version")
      ->check(CLI::Range(1.0, 64e9));
  app->add_option("--chunk-bytes", a->chunk_bytes, "broadcast: bytes per chunk")
      ->check(CLI::Range(4096.0, 1e9));
  app->add_option("--relays", a->relays, "broadcast: relay counts (besides the master)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app->add_option("--log-dir", a->log_dir, "broadcast: keep the relays' logs in this folder")
      ->check(CLI::ExistingDirectory);
  app->add_option("--weights", a->weights,
                  std::string(engine::kWeightFormatHelp) +
                      "; rollout: a comma-separated list (default " + std::string(kRolloutWeights) +
                      "); gemm runs every format")
      ->delimiter(',')
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  app->add_option("--seq-len", a->seq_len, "train: tokens per sequence")
      ->check(CLI::Range(2, 1 << 16));
  app->add_option("--seqs", a->seqs, "train: sequences per packed batch")
      ->check(CLI::Range(1, 4096));
  app->add_option("--compute", a->compute, "train: f32, bf16 or both")
      ->check(CLI::IsMember({"f32", "bf16", "both"}));
  app->add_option("--recompute", a->recompute, "train: recompute activations per layer");
  app->add_option("--peer-python", a->peer_python,
                  "train: a Python with torch and transformers (scripts/setup.sh --bench) to "
                  "measure PyTorch on the same shape")
      ->check(CLI::ExistingFile);
  app->add_option("--prompts", a->prompts, "rollout: prompts (GRPO groups; spec: default 2)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--n", a->n, "rollout: samples per prompt")->check(CLI::Range(1, 1 << 16));
  app->add_option("--prompt-len", a->prompt_len, "rollout: tokens per prompt")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--max-tokens", a->max_tokens,
                  "rollout: tokens generated by every sample (spec: default 128)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--temperature", a->temperature, "rollout: sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--seed", a->seed, "rollout: prompt ids and sampling seed")->check(kNonNegative);
  app->add_option("--kv-cache-mb", a->kv_cache_mb,
                  "rollout: KV pool in MiB (default: enough for the whole load)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app->add_option("--num-blocks", a->num_blocks,
                  "rollout: KV blocks (default: enough for the whole load)")
      ->check(CLI::Range(1, 1 << 30));
  app->add_option("--block-size", a->block_size, "rollout: tokens per KV block")
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--max-num-seqs", a->max_num_seqs,
                  "rollout: running sequences at most (default: every sample)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                  "rollout: tokens per engine step at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app->add_option("--peer-llamacpp", a->peer_llamacpp,
                  "rollout: folder with llama-batched-bench (default: the one scripts/setup.sh "
                  "--bench builds, when present)");
  app->add_flag("--no-peer", a->no_peer, "rollout: skip the llama.cpp peer");
  app->add_option("--peer-model", a->peer_model,
                  "rollout: GGUF for the peer (default: the model's .BF16.gguf sibling if present, "
                  "else the model)")
      ->check(CLI::ExistingFile);
  app->add_option("--peer-npl", a->peer_npl, "rollout: the peer's parallel sequence counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app->add_option("--dram-mb", a->dram_mb,
                  "rollout: MiB read by the DRAM bandwidth measurement (far above the LLC)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app->add_option("--peer-fa", a->peer_fa, "rollout: the peer's flash attention: on, off or both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app->add_option("--data", a->data, "spec: JSONL prompts (e.g. GSM8K's test.jsonl)")
      ->check(CLI::ExistingFile);
  app->add_option("--prompt-key", a->prompt_key, "spec: the prompt field of --data");
  app->add_option(
         "--drafters", a->drafters,
         "spec: drafters measured against off (+async: drafting ahead on its own thread; +vocab: "
         "a draft vocabulary of --draft-vocab tokens)")
      ->delimiter(',')
      ->check(CLI::IsMember({"suffix", "layer_skip", "draft_model", "layer_skip+async",
                             "draft_model+async", "layer_skip+vocab", "draft_model+vocab",
                             "layer_skip+async+vocab", "draft_model+async+vocab"}));
  app->add_option("--draft-model", a->draft_model,
                  "spec: the draft_model drafter's checkpoint (same vocabulary as --model), or "
                  "policy: the policy's own (in --draft-weights)");
  app->add_option("--draft-weights", a->draft_weights,
                  "spec: the draft model's weight format (default: --weights); the policy's own "
                  "checkpoint at a cheaper format is a draft model with the same vocabulary")
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  app->add_option("--temperatures", a->temperatures, "spec: sampling temperatures")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--max-draft-tokens", a->max_draft_tokens, "spec: drafted tokens per tree")
      ->check(CLI::Range(1, 63));
  app->add_option("--rounds", a->rounds,
                  "spec: rounds of off and every drafter, interleaved; speed-ups are the median of "
                  "each round's ratio")
      ->check(CLI::Range(1, 100));
  app->add_option(
         "--warmup-tokens", a->warmup_tokens,
         "spec: max_tokens of the untimed warm-up pass that runs other prompts on the same "
         "engine first (it learns its costs there, as a worker does on its first batch)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--tail-tokens", a->tail_tokens,
                  "spec: the long-tail case: one more sample with this max_tokens starts with the "
                  "first batch and runs alone once the groups are done (0: none)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--draft-vocab", a->draft_vocab,
                  "spec: the +vocab drafters' head computes this many lowest token ids plus the "
                  "tokens seen (rollout.speculative.draft_vocab; the others compute all)")
      ->check(CLI::PositiveNumber);
  app->add_option("--min-confidence", a->min_confidence,
                  "spec: model drafters stop a chain once the product of its tokens' draft "
                  "probabilities falls below this (rollout.speculative.min_confidence)")
      ->check(CLI::Range(0.0, 0.999999));
  app->add_flag("--fixed-drafts", a->fixed_drafts,
                "spec: always draft --max-draft-tokens (no adaptive budgets)");
  app->add_flag("--control", a->control,
                "spec: a second speculation-off lane (off-control) in every round: its ratio to "
                "off is what the measurement itself varies by");
  a->given = [app](const char* flag) { return app->count(flag) > 0; };
  return [a] { return RunBench(*a); };
}
LAMINAR_REGISTER_COMMAND(
    "bench",
    "benchmarks with JSON output: hw, decode, prefill, gemm, rollout, spec, train, broadcast, "
    "publish",
    SetupBench);

}  // namespace
}  // namespace laminar::cli
