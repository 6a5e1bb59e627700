// `laminar bench manager` as a process: a thousand simulated rollouts over the manager's real
// endpoint, each heartbeating, finishing groups and taking new ones; the manager tracks every
// one, declares none dead and drops nothing. Latencies are reported, not checked.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_util.h"

namespace laminar {
namespace {

using testing::RunLaminar;

TEST(CliBenchManager, AThousandRolloutsAreAllTrackedAndNothingIsLost) {
  // A generous heartbeat timeout: the test shares two cores with others; the bench's own default
  // (5 s, the manager's) is what the benchmark reports against.
  auto r = RunLaminar(
      "bench manager --rollouts 1000 --threads 4 --seconds 2 --samples 2 "
      "--heartbeats-per-group 3 --timeout-s 60");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["rollouts_alive"], 1000);
  EXPECT_EQ(out["rollouts_dead"], 0);
  EXPECT_EQ(out["groups_reissued"], 0);
  EXPECT_EQ(out["trajectories_dropped"], 0);
  EXPECT_GT(out["heartbeats"].get<int64_t>(), 1000);
  EXPECT_GT(out["groups_completed"].get<int64_t>(), 0);
  // Every group finished was taken by a work request, and each of its samples arrived.
  EXPECT_EQ(out["trajectories"].get<int64_t>(), 2 * out["groups_completed"].get<int64_t>());
  for (const char* k : {"heartbeat_round_trip", "echo_round_trip"}) {
    EXPECT_GT(out[k]["p99_ms"].get<double>(), 0) << k;
  }
}

TEST(CliBenchManager, BadArgumentsAreRefused) {
  EXPECT_NE(RunLaminar("bench manager --rollouts 0").exit_code, 0);
  auto r = RunLaminar("bench manager --rollouts 4 --threads 8 --seconds 0.2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("client_threads"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace laminar
