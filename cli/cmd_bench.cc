// `laminar bench hw|decode|prefill|train|broadcast|publish`: JSON output, reported against measured
// hardware limits (bench/hw_limits.h) or a peer measured in the same run (the relay tier's
// point-to-point transfer, bench/broadcast_bench.h).
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "bench/broadcast_bench.h"
#include "bench/hw_limits.h"
#include "bench/model_bench.h"
#include "bench/train_bench.h"
#include "cli/command.h"
#include "engine/llama_model.h"
#include "kernels/cpu/cpu_features.h"
#include "model/checkpoint.h"
#include "model/model_path.h"

namespace laminar::cli {
namespace {

struct BenchArgs {
  std::string what = "hw";
  std::string model = "smollm2-135m-instruct";
  std::vector<int64_t> batches = {1, 8, 32, 64};
  int64_t steps = 16;
  int64_t prompt_tokens = 512;
  int repeats = 3;
  std::string weights = "f32";
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
};

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
  auto lm =
      engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu, DType::kF32);
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

int RunBench(const BenchArgs& a) {
  if (a.what == "broadcast") return RunBroadcast(a);
  if (a.what == "train") return RunTrain(a);
  if (a.what == "publish") return RunPublish(a);
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
    DType wdtype = a.weights == "bf16" ? DType::kBF16 : DType::kF32;
    auto lm =
        engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu, wdtype);
    if (!lm.ok()) return Fail(lm.status());
    out["model"] = a.model;
    out["weights_dtype"] = a.weights;
    double step_bytes = bench::WeightBytesPerStep(ckpt->config, wdtype == DType::kBF16 ? 2.0 : 4.0);
    nlohmann::json rows = nlohmann::json::array();
    if (a.what == "decode") {
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
      rows.push_back({{"prompt_tokens", a.prompt_tokens},
                      {"tokens_per_s", r.tokens_per_s},
                      {"median_s", r.median_s},
                      {"spread_s", r.spread_s},
                      {"gemm_peak_fraction", flops / gemm}});
      std::fprintf(stderr, "prefill %lld tokens: %8.1f tok/s  (%.0f%% of GEMM peak)\n",
                   static_cast<long long>(a.prompt_tokens), r.tokens_per_s, 100 * flops / gemm);
    }
    out[a.what] = rows;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupBench(CLI::App* app) {
  auto a = std::make_shared<BenchArgs>();
  app->add_option("what", a->what,
                  "hw (limits only), decode, prefill, train (trainer), broadcast (relay tier) or "
                  "publish (actor stall)")
      ->check(CLI::IsMember({"hw", "decode", "prefill", "train", "broadcast", "publish"}));
  app->add_option("--model", a->model, "checkpoint path or model name");
  app->add_option("--batch", a->batches, "decode batch sizes")->check(CLI::Range(1, 4096));
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
  app->add_option("--weights", a->weights, "projection weights in f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}));
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
  return [a] { return RunBench(*a); };
}
LAMINAR_REGISTER_COMMAND(
    "bench", "benchmarks with JSON output: hw, decode, prefill, train, broadcast, publish",
    SetupBench);

}  // namespace
}  // namespace laminar::cli
