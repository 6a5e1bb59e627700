// `laminar bench manager`: the rollout manager with many simulated rollouts over its real
// endpoint; heartbeat round trips against a bare ZeroMQ echo measured in the same run
// (bench/manager_bench.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/manager_bench.h"
#include "cli/bench/bench_command.h"

namespace laminar::cli {
namespace {

nlohmann::json JsonOf(const bench::Percentiles& p) {
  return {{"p50_ms", p.p50_ms}, {"p99_ms", p.p99_ms}, {"max_ms", p.max_ms}};
}

int RunManager(const bench::ManagerLoadConfig& c) {
  std::fprintf(stderr,
               "%d simulated rollouts on %d client threads, a heartbeat every %d ms, %.0f s\n",
               c.rollouts, c.client_threads, c.heartbeat_interval_ms, c.seconds);
  auto r = bench::BenchManagerLoad(c);
  if (!r.ok()) return BenchFail(r.status());
  std::fprintf(
      stderr,
      "heartbeats: %.0f/s of %.0f/s offered; round trip p50 %.2f ms, p99 %.2f ms, max "
      "%.2f ms (bare ZeroMQ echo: p50 %.2f ms, p99 %.2f ms); sent late by p99 %.2f ms\n"
      "manager: %lld alive, %lld declared dead, %lld groups completed, %lld re-issued, "
      "%lld trajectories dropped, %lld repack rounds; %.1f CPU s in this process\n",
      r->heartbeats_per_s, r->offered_heartbeats_per_s, r->heartbeat.p50_ms, r->heartbeat.p99_ms,
      r->heartbeat.max_ms, r->echo.p50_ms, r->echo.p99_ms, r->lateness.p99_ms,
      static_cast<long long>(r->rollouts_alive), static_cast<long long>(r->rollouts_dead),
      static_cast<long long>(r->groups_completed), static_cast<long long>(r->groups_reissued),
      static_cast<long long>(r->trajectories_dropped), static_cast<long long>(r->repack_rounds),
      r->manager_cpu_s);
  const nlohmann::json out = {
      {"rollouts", c.rollouts},
      {"client_threads", c.client_threads},
      {"heartbeat_interval_ms", c.heartbeat_interval_ms},
      {"seconds", c.seconds},
      {"cores", std::thread::hardware_concurrency()},
      {"load_average_1m", LoadAverage1m()},
      {"heartbeats", r->heartbeats},
      {"heartbeats_per_s", r->heartbeats_per_s},
      {"offered_heartbeats_per_s", r->offered_heartbeats_per_s},
      {"work_requests", r->work_requests},
      {"trajectories", r->trajectories},
      {"heartbeat_round_trip", JsonOf(r->heartbeat)},
      {"echo_round_trip", JsonOf(r->echo)},
      {"p99_ratio_to_echo", r->echo.p99_ms > 0 ? r->heartbeat.p99_ms / r->echo.p99_ms : 0},
      {"lateness", JsonOf(r->lateness)},
      {"cpu_s", r->manager_cpu_s},
      {"rollouts_alive", r->rollouts_alive},
      {"rollouts_dead", r->rollouts_dead},
      {"groups_completed", r->groups_completed},
      {"groups_reissued", r->groups_reissued},
      {"trajectories_dropped", r->trajectories_dropped},
      {"repack_rounds", r->repack_rounds}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupManager(CLI::App* app) {
  auto c = std::make_shared<bench::ManagerLoadConfig>();
  app->add_option("--rollouts", c->rollouts, "simulated rollouts")->check(CLI::Range(1, 100000));
  app->add_option("--threads", c->client_threads, "client threads driving them")
      ->check(CLI::Range(1, 256));
  app->add_option("--seconds", c->seconds, "seconds of load")->check(CLI::Range(0.1, 3600.0));
  app->add_option("--interval-ms", c->heartbeat_interval_ms, "each rollout's heartbeat interval")
      ->check(CLI::Range(1, 60000));
  app->add_option("--samples", c->samples, "samples per group")->check(CLI::Range(1, 1024));
  app->add_option("--heartbeats-per-group", c->heartbeats_per_group,
                  "heartbeats a simulated rollout holds a group for")
      ->check(CLI::Range(1, 10000));
  app->add_option("--timeout-s", c->heartbeat_timeout_s,
                  "the manager's heartbeat timeout (a rollout silent this long is dead)")
      ->check(CLI::Range(0.1, 3600.0));
  app->add_flag("!--no-repack", c->repack, "no repack rounds");
  return [c] { return RunManager(*c); };
}

}  // namespace

LAMINAR_REGISTER_BENCH("manager", "the rollout manager under many simulated rollouts",
                       SetupManager);

}  // namespace laminar::cli
