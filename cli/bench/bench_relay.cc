// `laminar bench broadcast|publish`: the relay tier's chain and star against one point-to-point
// transfer, and the actor's stall when it publishes a real model (bench/broadcast_bench.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/broadcast_bench.h"
#include "bench/model_bench.h"
#include "cli/bench/bench_command.h"
#include "engine/llama_model.h"
#include "model/checkpoint.h"
#include "model/model_path.h"

namespace laminar::cli {
namespace {

struct BroadcastArgs {
  std::string transport = "zmq";  // zmq, ucx or both
  double bytes = 500e6;
  double chunk_bytes = 4 * 1024 * 1024;
  std::vector<int> relays = {1, 2, 4, 8};
  int repeats = 3;
  std::string log_dir;
};

int RunBroadcast(const BroadcastArgs& a) {
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
    if (!result.ok()) return BenchFail(result.status());
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
  nlohmann::json out = {{"bytes", a.bytes},
                        {"chunk_bytes", a.chunk_bytes},
                        {"cores", std::thread::hardware_concurrency()},
                        {"broadcast", rows}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupBroadcast(CLI::App* app) {
  auto a = std::make_shared<BroadcastArgs>();
  app->add_option("--transport", a->transport, "zmq, ucx or both")
      ->check(CLI::IsMember({"zmq", "ucx", "both"}));
  app->add_option("--bytes", a->bytes, "bytes in the version")->check(CLI::Range(1.0, 64e9));
  app->add_option("--chunk-bytes", a->chunk_bytes, "bytes per chunk")
      ->check(CLI::Range(4096.0, 1e9));
  app->add_option("--relays", a->relays, "relay counts (besides the master)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app->add_option("--repeats", a->repeats, "repetitions")->check(CLI::Range(1, 1000));
  app->add_option("--log-dir", a->log_dir, "keep the relays' logs in this folder")
      ->check(CLI::ExistingDirectory);
  return [a] { return RunBroadcast(*a); };
}

struct PublishArgs {
  std::string model = "smollm2-135m-instruct";
  std::string transport = "zmq";  // zmq or ucx
  int repeats = 3;
};

// The actor's stall when publishing a real model, against an estimated training step.
int RunPublish(const PublishArgs& a) {
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return BenchFail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return BenchFail(ckpt.status());
  std::vector<relay::TensorBytes> tensors;
  for (const std::string& name : ckpt->weights.Names()) {
    auto t = ckpt->weights.Get(name);
    if (!t.ok()) return BenchFail(t.status());
    tensors.push_back({name,
                       t->dtype(),
                       t->shape().dims(),
                       {static_cast<const uint8_t*>(t->data()), t->size_bytes()}});
  }
  auto stall = bench::BenchPublishStall(tensors, a.transport, a.repeats);
  if (!stall.ok()) return BenchFail(stall.status());
  auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights);
  if (!lm.ok()) return BenchFail(lm.status());
  // A training step of one 512-token sequence costs about three forward passes (forward, and
  // backward at twice the forward's FLOPs).
  auto fwd = bench::BenchPrefill(**lm, 512, 1);
  const double step_s = 3 * fwd.median_s;
  nlohmann::json out = {{"model", a.model},
                        {"transport", a.transport},
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

std::function<int()> SetupPublish(CLI::App* app) {
  auto a = std::make_shared<PublishArgs>();
  AddModelOption(app, &a->model);
  app->add_option("--transport", a->transport, "zmq or ucx")->check(CLI::IsMember({"zmq", "ucx"}));
  app->add_option("--repeats", a->repeats, "repetitions")->check(CLI::Range(1, 1000));
  return [a] { return RunPublish(*a); };
}

}  // namespace

LAMINAR_REGISTER_BENCH("broadcast", "the relay chain and star vs one point-to-point transfer",
                       SetupBroadcast);
LAMINAR_REGISTER_BENCH("publish", "the actor's stall when publishing a version", SetupPublish);

}  // namespace laminar::cli
