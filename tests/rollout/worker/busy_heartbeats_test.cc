#include "rollout/worker/busy_heartbeats.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/zmq_transport.h"

namespace laminar::rollout {
namespace {

using std::chrono::milliseconds;

// A manager stand-in over a real socket that keeps what it was sent.
class Recorder {
 public:
  Recorder() {
    auto server = ZmqReplyServer::Start("tcp://127.0.0.1:*", [this](std::string_view r, auto) {
      MutexLock lock(&mu_);
      got_.emplace_back(r);
      return std::string("ok");
    });
    EXPECT_TRUE(server.ok()) << server.status();
    if (server.ok()) server_ = std::move(*server);
  }
  std::string endpoint() const { return server_ ? server_->endpoint() : "tcp://127.0.0.1:1"; }
  std::vector<std::string> got() const {
    MutexLock lock(&mu_);
    return got_;
  }

 private:
  mutable Mutex mu_;
  std::vector<std::string> got_ LAMINAR_GUARDED_BY(mu_);
  std::unique_ptr<ZmqReplyServer> server_;
};

// During a call the heartbeat given at its start goes out every interval, the first one interval
// in; none between calls; a call shorter than an interval sends none.
TEST(BusyHeartbeatsTest, RepeatTheCallsHeartbeatOnlyWhileItLasts) {
  Recorder manager;
  BusyHeartbeats beats(manager.endpoint(), /*interval_ms=*/50, /*request_timeout_ms=*/2000,
                       /*max_busy_s=*/60);
  {
    BusyHeartbeats::Scope busy(&beats, "first");
    std::this_thread::sleep_for(milliseconds(20));
  }
  std::this_thread::sleep_for(milliseconds(150));
  EXPECT_TRUE(manager.got().empty());
  const auto start = std::chrono::steady_clock::now();
  {
    BusyHeartbeats::Scope busy(&beats, "second");
    std::this_thread::sleep_for(milliseconds(400));
  }
  const double busy_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const size_t after_call = manager.got().size();
  std::this_thread::sleep_for(milliseconds(200));
  const std::vector<std::string> got = manager.got();
  EXPECT_LE(got.size(), after_call + 1);  // one on its way when the call ended, at most
  // At most one per interval of the call; on a loaded machine fewer, but some.
  EXPECT_GE(got.size(), 1u);
  EXPECT_LE(static_cast<double>(got.size()), busy_s / 0.05 + 1);
  for (const std::string& r : got) EXPECT_EQ(r, "second");
  EXPECT_EQ(beats.sent(), static_cast<int64_t>(got.size()));
  ASSERT_TRUE(beats.last_answered().has_value());
  EXPECT_GE(*beats.last_answered(), start);
}

// A call that outlasts max_busy_s gets no more heartbeats (it is stuck: the manager must find
// the rollout hung); the next call gets them again.
TEST(BusyHeartbeatsTest, StopAfterMaxBusySeconds) {
  Recorder manager;
  BusyHeartbeats beats(manager.endpoint(), /*interval_ms=*/20, /*request_timeout_ms=*/2000,
                       /*max_busy_s=*/0.1);
  {
    BusyHeartbeats::Scope busy(&beats, "stuck");
    std::this_thread::sleep_for(milliseconds(200));
    const size_t at_limit = manager.got().size();
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(manager.got().size(), at_limit);
    EXPECT_LE(at_limit, 6u);  // at most one per interval until the limit, and one on its way
  }
  const size_t before = manager.got().size();
  {
    BusyHeartbeats::Scope busy(&beats, "next");
    for (int i = 0; i < 200 && manager.got().size() == before; ++i) {
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  ASSERT_GT(manager.got().size(), before);
  EXPECT_EQ(manager.got().back(), "next");
}

// No manager answering: the heartbeats are tried (one attempt each), nothing blocks, and the
// destructor returns.
TEST(BusyHeartbeatsTest, AnUnreachableManagerBlocksNothing) {
  auto beats = std::make_unique<BusyHeartbeats>("tcp://127.0.0.1:1", 10, 50, 60);
  {
    BusyHeartbeats::Scope busy(beats.get(), "x");
    std::this_thread::sleep_for(milliseconds(150));
  }
  EXPECT_FALSE(beats->last_answered().has_value());
  EXPECT_GE(beats->sent(), 1);
  beats.reset();
}

}  // namespace
}  // namespace laminar::rollout
