// `laminar bench broadcast|pull|publish`: the relay tier's chain and star against one
// point-to-point transfer (on this machine, or across hosts against the shaped link), a rollout's
// pulls from its host's relay, and the actor's stall when it publishes a real model
// (bench/broadcast_bench.h).
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
  // Across hosts: the master relay's endpoint (the relays run already), this host's address,
  // each host's link rate in bits/s and the rollouts' pull logs.
  std::string master;
  std::string host;
  double link_rate = 0;
  std::vector<std::string> pull_logs;
  int timeout_s = 120;
};

int RunBroadcastAcrossHosts(const BroadcastArgs& a) {
  if (a.relays.size() != 1) {
    return BenchFail(
        InvalidArgumentError("with --master, --relays is one count: the relays "
                             "that run in the master's chain"));
  }
  if (a.transport == "both") {
    return BenchFail(InvalidArgumentError("with --master, --transport is the relays' own"));
  }
  bench::HostsBroadcastConfig c;
  c.master = a.master;
  c.relays = a.relays[0];
  c.transport = a.transport;
  c.host = a.host;
  c.bytes = static_cast<uint64_t>(a.bytes);
  c.chunk_bytes = static_cast<uint64_t>(a.chunk_bytes);
  c.repeats = a.repeats;
  c.link_bits_per_s = a.link_rate;
  c.pull_logs = a.pull_logs;
  c.timeout_s = a.timeout_s;
  auto r = bench::BenchBroadcastAcrossHosts(c);
  if (!r.ok()) return BenchFail(r.status());
  std::fprintf(stderr,
               "%s chain to %d relay(s) on their hosts: %.3f s (spread %.3f), %.2fx the link's "
               "%.3f s; %.2f cores busy; %d pulls %.3f s median, %.3f s max; the last rollout "
               "held a version %.3f s after publish\n",
               c.transport.c_str(), r->relays, r->median_s, r->spread_s, r->ratio_to_link,
               r->link_s, r->busy_cores, r->pulls, r->pull_median_s, r->pull_max_s, r->held_max_s);
  nlohmann::json out = {{"transport", c.transport},
                        {"bytes", a.bytes},
                        {"chunk_bytes", a.chunk_bytes},
                        {"link_bits_per_s", a.link_rate},
                        {"relays", r->relays},
                        {"median_s", r->median_s},
                        {"spread_s", r->spread_s},
                        {"link_s", r->link_s},
                        {"ratio_to_link", r->ratio_to_link},
                        {"busy_cores", r->busy_cores},
                        {"cores", std::thread::hardware_concurrency()},
                        {"pulls", r->pulls},
                        {"pull_median_s", r->pull_median_s},
                        {"pull_max_s", r->pull_max_s},
                        {"held_max_s", r->held_max_s}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int RunBroadcast(const BroadcastArgs& a) {
  if (!a.master.empty()) return RunBroadcastAcrossHosts(a);
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
  auto* master = app->add_option("--master", a->master,
                                 "across hosts: the running master relay's control endpoint "
                                 "(bench/relay_hosts.sh starts the relays on their hosts)");
  app->add_option("--host", a->host, "across hosts: this host's address")->needs(master);
  app->add_option("--link-rate", a->link_rate, "across hosts: each host's link rate in bits/s")
      ->check(CLI::Range(1e3, 1e13))
      ->needs(master);
  app->add_option("--pull-logs", a->pull_logs, "across hosts: the rollouts' `bench pull` logs")
      ->delimiter(',')
      ->needs(master);
  app->add_option("--timeout", a->timeout_s,
                  "across hosts: seconds for the chain to form and for each version")
      ->check(CLI::Range(1, 3600))
      ->needs(master);
  return [a] { return RunBroadcast(*a); };
}

std::function<int()> SetupPull(CLI::App* app) {
  auto c = std::make_shared<bench::PullConfig>();
  app->add_option("--relay", c->relay, "this host's relay (control endpoint)")->required();
  app->add_option("--host", c->host, "this host's address");
  app->add_option("--transport", c->transport, "zmq or ucx")->check(CLI::IsMember({"zmq", "ucx"}));
  app->add_option("--versions", c->versions, "return once version N is held")
      ->check(CLI::Range(1, 1000000));
  app->add_option("--timeout", c->timeout_s, "seconds")->check(CLI::Range(1, 86400));
  app->add_option("--out", c->out, "JSON lines, one per version pulled")->required();
  return [c] {
    const Status s = bench::RunPuller(*c);
    return s.ok() ? 0 : BenchFail(s);
  };
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
LAMINAR_REGISTER_BENCH("pull", "a rollout's pulls from its host's relay (with broadcast --master)",
                       SetupPull);
LAMINAR_REGISTER_BENCH("publish", "the actor's stall when publishing a version", SetupPublish);

}  // namespace laminar::cli
