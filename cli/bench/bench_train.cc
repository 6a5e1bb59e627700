// `laminar bench train`: trainer forward + backward throughput against oneDNN's GEMM peak and, when
// a Python with PyTorch is given, against PyTorch's LlamaForCausalLM of the same shape in the same
// run (bench/train_bench.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/hw_limits.h"
#include "bench/train_bench.h"
#include "cli/bench/bench_command.h"
#include "model/checkpoint.h"
#include "model/model_path.h"

namespace laminar::cli {
namespace {

struct TrainBenchArgs {
  std::string model = "smollm2-135m-instruct";
  int64_t seq_len = 512;
  int64_t seqs = 8;
  std::string compute = "both";  // f32, bf16 or both
  bool recompute = false;
  int repeats = 3;
  std::string peer_python;
};

int RunTrain(const TrainBenchArgs& a) {
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return BenchFail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return BenchFail(ckpt.status());
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
    if (!r.ok()) return BenchFail(r.status());
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
      if (!peer.ok()) return BenchFail(peer.status());
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

std::function<int()> SetupTrain(CLI::App* app) {
  auto a = std::make_shared<TrainBenchArgs>();
  AddModelOption(app, &a->model);
  app->add_option("--seq-len", a->seq_len, "tokens per sequence")->check(CLI::Range(2, 1 << 16));
  app->add_option("--seqs", a->seqs, "sequences per packed batch")->check(CLI::Range(1, 4096));
  app->add_option("--compute", a->compute, "f32, bf16 or both")
      ->check(CLI::IsMember({"f32", "bf16", "both"}));
  app->add_option("--recompute", a->recompute, "recompute activations per layer");
  app->add_option("--repeats", a->repeats, "timed steps")->check(CLI::Range(1, 1000));
  app->add_option("--peer-python", a->peer_python,
                  "a Python with torch and transformers (scripts/setup.sh --bench) to measure "
                  "PyTorch on the same shape")
      ->check(CLI::ExistingFile);
  return [a] { return RunTrain(*a); };
}

}  // namespace

LAMINAR_REGISTER_BENCH("train", "trainer tokens/s vs the GEMM peak and PyTorch", SetupTrain);

}  // namespace laminar::cli
