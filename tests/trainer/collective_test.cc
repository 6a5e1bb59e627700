// Collectives over real sockets: Gloo ranks as threads of this process and as child processes
// (this binary re-executed), sums against the elementwise sum, broadcast, barrier, a rank that
// never comes, a rank that dies, bad options; NCCL on GPUs when there are any.
#include "trainer/collective.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/cuda/device.h"
#include "core/process.h"
#include "tests/test_util.h"
#include "trainer/collective_gloo.h"
#include "trainer/collective_nccl.h"
#include "trainer/collective_rendezvous.h"

#if LAMINAR_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace laminar::trainer {
namespace {

constexpr int kJoinTimeoutMs = 20000;  // generous: only a broken test waits this long
constexpr int kShortTimeoutMs = 1500;  // for the tests where a rank is missing or dies
constexpr char kChildEnv[] = "LAMINAR_COLLECTIVE_CHILD";

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string LoopbackAddress(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

CollectiveOptions Options(const std::string& address, int rank, int world_size,
                          int timeout_ms = kJoinTimeoutMs) {
  CollectiveOptions o;
  o.backend = "gloo";
  o.rendezvous_address = address;
  o.rank = rank;
  o.world_size = world_size;
  o.rendezvous_timeout_ms = timeout_ms;
  o.timeout_ms = timeout_ms;
  return o;
}

using Group = std::vector<std::unique_ptr<Collective>>;

// Each rank calls CreateCollective(options_for(rank)) on its own thread; their results by rank.
std::vector<StatusOr<std::unique_ptr<Collective>>> JoinThreads(
    int world_size, const std::function<CollectiveOptions(int rank)>& options_for) {
  std::vector<std::optional<StatusOr<std::unique_ptr<Collective>>>> slots(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] { slots[r].emplace(CreateCollective(options_for(r))); });
  }
  for (auto& t : threads) t.join();
  std::vector<StatusOr<std::unique_ptr<Collective>>> out;
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

// `world_size` ranks of `backend` as threads on a fresh loopback port; empty (with a test failure)
// if any rank failed to join.
Group JoinGroup(int world_size, const std::string& backend = "gloo") {
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
    auto results = JoinThreads(world_size, [&](int r) {
      auto o = Options(address, r, world_size);
      o.backend = backend;
      return o;
    });
    if (!results[0].ok() && Contains(results[0].status().message(), "in use")) continue;
    Group group;
    for (int r = 0; r < world_size; ++r) {
      if (!results[r].ok()) {
        ADD_FAILURE() << "rank " << r << " did not join: " << results[r].status();
        return {};
      }
      group.push_back(std::move(*results[r]));
    }
    return group;
  }
  ADD_FAILURE() << "no free port after 5 attempts";
  return {};
}

// Runs fn(rank, collective) on one thread per rank, concurrently (collectives need every rank).
void OnEveryRank(Group& group, const std::function<void(int, Collective&)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r) {
    threads.emplace_back([&, r] { fn(static_cast<int>(r), *group[r]); });
  }
  for (auto& t : threads) t.join();
}

// Values whose sums are exact in f32 in any order (multiples of 1/8 below 2^10), so every rank's
// result must equal the serial sum bit for bit.
float Value(int rank, size_t i) {
  return static_cast<float>((i * 31 + static_cast<size_t>(rank) * 7) % 1024) * 0.125f - 64.0f;
}

constexpr size_t kSizes[] = {1, 7919, 1000003};  // one, a prime, about 1e6 (also prime)

class GlooGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooGroupTest, AllReduceSumEqualsElementwiseSum) {
  const int world = GetParam();
  Group group = JoinGroup(world);
  ASSERT_EQ(group.size(), static_cast<size_t>(world));
  for (size_t n : kSizes) {
    std::vector<float> expected(n, 0.0f);
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < n; ++i) expected[i] += Value(r, i);
    }
    OnEveryRank(group, [&](int rank, Collective& c) {
      EXPECT_EQ(c.rank(), rank);
      EXPECT_EQ(c.world_size(), world);
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = Value(rank, i);
      ASSERT_TRUE(c.AllReduceSum(std::span<float>(data)).ok());
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += data[i] != expected[i];
      EXPECT_EQ(wrong, 0u) << "rank " << rank << ", n " << n << ": first element " << data[0]
                           << " vs " << expected[0];
    });
  }
}

TEST_P(GlooGroupTest, AllReduceSumOfDoublesKeepsF64Precision) {
  const int world = GetParam();
  Group group = JoinGroup(world);
  ASSERT_EQ(group.size(), static_cast<size_t>(world));
  // 2^40 + small integers: exact in f64, rounded away in f32.
  const double base = std::ldexp(1.0, 40);
  for (size_t n : {size_t{1}, size_t{7919}}) {
    OnEveryRank(group, [&](int rank, Collective& c) {
      std::vector<double> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = base + rank + static_cast<double>(i % 5);
      ASSERT_TRUE(c.AllReduceSum(std::span<double>(data)).ok());
      const double rank_sum = world * (world - 1) / 2.0;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(data[i], world * base + rank_sum + world * static_cast<double>(i % 5))
            << "rank " << rank << " element " << i;
      }
    });
  }
}

TEST_P(GlooGroupTest, BroadcastFromRankOneReachesEveryRank) {
  const int world = GetParam();
  Group group = JoinGroup(world);
  ASSERT_EQ(group.size(), static_cast<size_t>(world));
  constexpr int kRoot = 1;
  for (size_t n : kSizes) {
    OnEveryRank(group, [&](int rank, Collective& c) {
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = Value(rank, i);
      ASSERT_TRUE(c.Broadcast(std::span<float>(data), kRoot).ok());
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += data[i] != Value(kRoot, i);
      EXPECT_EQ(wrong, 0u) << "rank " << rank << ", n " << n;
    });
  }
  OnEveryRank(group, [&](int, Collective& c) {
    std::vector<float> data(3);
    EXPECT_EQ(c.Broadcast(std::span<float>(data), world).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c.Broadcast(std::span<float>(data), -1).code(), StatusCode::kInvalidArgument);
  });
}

TEST_P(GlooGroupTest, NoRankLeavesTheBarrierBeforeEveryRankReachedIt) {
  const int world = GetParam();
  Group group = JoinGroup(world);
  ASSERT_EQ(group.size(), static_cast<size_t>(world));
  for (int round = 1; round <= 3; ++round) {
    std::atomic<int> arrived{0};
    OnEveryRank(group, [&](int rank, Collective& c) {
      // The last rank arrives late; a barrier that let anyone through early would show it.
      if (rank == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      arrived.fetch_add(1);
      ASSERT_TRUE(c.Barrier().ok());
      EXPECT_EQ(arrived.load(), world) << "rank " << rank << " left barrier round " << round;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooGroupTest, ::testing::Values(2, 3),
                         [](const auto& p) { return std::to_string(p.param) + "ranks"; });

TEST(GlooCollectiveTest, EmptySpansAndAGroupOfOneAreNoOps) {
  Group group = JoinGroup(1);
  ASSERT_EQ(group.size(), 1u);
  std::vector<float> data = {1.5f, -2.0f};
  EXPECT_TRUE(group[0]->AllReduceSum(std::span<float>(data)).ok());
  EXPECT_TRUE(group[0]->Broadcast(std::span<float>(data), 0).ok());
  EXPECT_TRUE(group[0]->Barrier().ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_TRUE(group[0]->AllReduceSum(std::span<float>()).ok());
  EXPECT_TRUE(group[0]->AllReduceSum(std::span<double>()).ok());
  EXPECT_STREQ(group[0]->backend(), "gloo");
}

TEST(GlooCollectiveTest, ARankThatNeverComesFailsTheRendezvousNamingIt) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  auto rank0 = CreateCollective(Options(address, 0, 3, kShortTimeoutMs));
  ASSERT_FALSE(rank0.ok());
  const std::string msg = rank0.status().message();
  EXPECT_EQ(rank0.status().code(), StatusCode::kDeadlineExceeded) << msg;
  EXPECT_TRUE(Contains(msg, address)) << msg;
  EXPECT_TRUE(Contains(msg, "rank 0 of 3")) << msg;
  EXPECT_TRUE(Contains(msg, "did not publish its Gloo addresses within 1500 ms")) << msg;
  EXPECT_TRUE(Contains(msg, "not joined by the deadline: 1, 2")) << msg;
}

TEST(GlooCollectiveTest, WithoutRankZeroTheOthersFailTheRendezvous) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  auto rank1 = CreateCollective(Options(address, 1, 2, kShortTimeoutMs));
  ASSERT_FALSE(rank1.ok());
  const std::string msg = rank1.status().message();
  EXPECT_EQ(rank1.status().code(), StatusCode::kDeadlineExceeded) << msg;
  EXPECT_TRUE(Contains(msg, "rank 1 of 2")) << msg;
  EXPECT_TRUE(Contains(msg, "rank 0 never answered")) << msg;
}

TEST(GlooCollectiveTest, RankZeroOnAnAddressInUseIsUnavailable) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  auto holder = ZmqReplyServer::Start(
      address, [](std::string_view, std::string_view) { return std::string(); });
  ASSERT_TRUE(holder.ok()) << holder.status();
  auto rank0 = CreateCollective(Options(address, 0, 2, kShortTimeoutMs));
  ASSERT_FALSE(rank0.ok());
  EXPECT_EQ(rank0.status().code(), StatusCode::kUnavailable) << rank0.status();
  EXPECT_TRUE(Contains(rank0.status().message(), address)) << rank0.status();
}

TEST(GlooCollectiveTest, RanksThatDisagreeOnTheWorldSizeAreTold) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  auto results = JoinThreads(2, [&](int r) { return Options(address, r, 2 + r, kShortTimeoutMs); });
  ASSERT_FALSE(results[1].ok());
  EXPECT_EQ(results[1].status().code(), StatusCode::kInvalidArgument) << results[1].status();
  EXPECT_TRUE(Contains(results[1].status().message(), "group of 2 ranks but rank 1 expects 3"))
      << results[1].status();
  EXPECT_FALSE(results[0].ok());  // rank 1 never joined its group
}

TEST(GlooCollectiveTest, TwoClaimantsOfOneRankAreToldApart) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  // Threads 1 and 2 both claim rank 1 of 3 and rank 2 never comes, so rank 0 keeps serving until
  // its deadline: one claimant is refused, the other waits with rank 0 for the missing rank.
  auto results =
      JoinThreads(3, [&](int r) { return Options(address, std::min(r, 1), 3, kShortTimeoutMs); });
  ASSERT_FALSE(results[0].ok());
  EXPECT_TRUE(Contains(results[0].status().message(), "not joined by the deadline: 2"))
      << results[0].status();
  int refused = 0;
  for (int t = 1; t <= 2; ++t) {
    ASSERT_FALSE(results[t].ok());
    if (results[t].status().code() == StatusCode::kInvalidArgument) {
      ++refused;
      EXPECT_TRUE(Contains(results[t].status().message(), "two processes joined as rank 1"))
          << results[t].status();
    }
  }
  EXPECT_EQ(refused, 1) << results[1].status() << " / " << results[2].status();
}

TEST(GlooCollectiveTest, APeerThatLeftFailsTheNextCollectiveAndTheErrorSticks) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  auto results = JoinThreads(2, [&](int r) { return Options(address, r, 2, kShortTimeoutMs); });
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  results[1]->reset();  // rank 1 goes away: its sockets close
  auto& rank0 = *results[0];
  std::vector<float> data(1000, 1.0f);
  Status first = rank0->AllReduceSum(std::span<float>(data));
  ASSERT_FALSE(first.ok());
  EXPECT_TRUE(first.code() == StatusCode::kUnavailable ||
              first.code() == StatusCode::kDeadlineExceeded)
      << first;
  EXPECT_TRUE(Contains(first.message(), "rank 0 of 2")) << first;
  EXPECT_TRUE(Contains(first.message(), address)) << first;
  EXPECT_TRUE(Contains(first.message(), "all-reduce of 1000 f32")) << first;
  Status next = rank0->Barrier();
  EXPECT_EQ(next.code(), StatusCode::kFailedPrecondition) << next;
  EXPECT_TRUE(Contains(next.message(), first.message())) << next;
}

TEST(CollectiveOptionsTest, BadOptionsAreInvalidArguments) {
  const auto invalid = [](const CollectiveOptions& o) {
    auto c = CreateCollective(o);
    return !c.ok() && c.status().code() == StatusCode::kInvalidArgument;
  };
  const std::string ok_address = "tcp://127.0.0.1:29500";
  EXPECT_TRUE(invalid(Options(ok_address, 0, 0)));     // world < 1
  EXPECT_TRUE(invalid(Options(ok_address, 2, 2)));     // rank >= world
  EXPECT_TRUE(invalid(Options(ok_address, -1, 2)));    // rank < 0
  EXPECT_TRUE(invalid(Options(ok_address, 0, 2, 0)));  // timeouts <= 0
  for (const char* address :
       {"127.0.0.1:29500", "tcp://127.0.0.1", "tcp://:29500", "tcp://*:29500", "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:65536", "tcp://127.0.0.1:29x", "udp://h:1", "tcp://[::1]:29500", ""}) {
    auto c = CreateCollective(Options(address, 0, 2));
    ASSERT_FALSE(c.ok()) << address;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << address;
    EXPECT_TRUE(Contains(c.status().message(), "rendezvous address")) << c.status();
  }
  auto unknown = Options(ok_address, 0, 1);
  unknown.backend = "mpi";
  auto c = CreateCollective(unknown);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(c.status().message(), "'mpi'")) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "gloo, local, nccl")) << c.status();

  auto local_of_two = Options(ok_address, 0, 2);
  local_of_two.backend = "local";
  EXPECT_TRUE(invalid(local_of_two));
}

TEST(CollectiveOptionsTest, RendezvousAddressesParse) {
  auto a = ParseRendezvousAddress("tcp://10.1.2.3:29500");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "10.1.2.3");
  EXPECT_EQ(a->port, 29500);
  auto b = ParseRendezvousAddress("tcp://node-7.cluster:1");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->host, "node-7.cluster");
  EXPECT_EQ(b->port, 1);
  auto local = LocalAddressToward("127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
}

TEST(LocalCollectiveTest, OneRankLeavesDataAlone) {
  CollectiveOptions o;
  o.backend = "local";
  auto c = CreateCollective(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->world_size(), 1);
  std::vector<float> data = {3.0f, 4.0f};
  std::vector<double> counts = {7.0};
  EXPECT_TRUE((*c)->AllReduceSum(std::span<float>(data)).ok());
  EXPECT_TRUE((*c)->AllReduceSum(std::span<double>(counts)).ok());
  EXPECT_TRUE((*c)->Broadcast(std::span<float>(data), 0).ok());
  EXPECT_TRUE((*c)->Barrier().ok());
  EXPECT_EQ(data, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(counts[0], 7.0);
  EXPECT_EQ((*c)->Broadcast(std::span<float>(data), 1).code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Ranks as processes: this binary re-executed with kChildEnv = "MODE ADDRESS RANK WORLD" runs
// CollectiveChild.DISABLED_Rank. Modes: "sum" all-reduces [rank + 1] x 1000 and prints the first
// element; "join" prints JOINED and sleeps until killed.

TEST(CollectiveChild, DISABLED_Rank) {
  const char* spec = std::getenv(kChildEnv);
  if (spec == nullptr) GTEST_SKIP() << "only run as a child of the multi-process tests";
  std::istringstream in(spec);
  std::string mode, address;
  int rank = 0, world = 0;
  in >> mode >> address >> rank >> world;
  auto c = CreateCollective(Options(address, rank, world));
  ASSERT_TRUE(c.ok()) << c.status();
  if (mode == "join") {
    std::printf("JOINED\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return;
  }
  std::vector<float> data(1000, static_cast<float>(rank + 1));
  ASSERT_TRUE((*c)->AllReduceSum(std::span<float>(data)).ok());
  ASSERT_TRUE((*c)->Barrier().ok());
  std::printf("RESULT %g\n", static_cast<double>(data[999]));
  std::fflush(stdout);
}

// Starts this binary as rank `rank` of a group; the spec travels in the environment.
Process SpawnRank(const std::string& mode, const std::string& address, int rank, int world) {
  const std::string spec =
      mode + " " + address + " " + std::to_string(rank) + " " + std::to_string(world);
  setenv(kChildEnv, spec.c_str(), 1);
  auto p = Process::Spawn({"/proc/self/exe", "--gtest_filter=CollectiveChild.DISABLED_Rank",
                           "--gtest_also_run_disabled_tests"});
  unsetenv(kChildEnv);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : Process();
}

// The next line of `p` starting with `prefix`, past gtest's own output; "" on timeout or exit.
std::string ReadLineStartingWith(Process& p, const std::string& prefix) {
  while (true) {
    auto line = p.ReadLine(kJoinTimeoutMs);
    if (!line.ok()) return "";
    if (line->starts_with(prefix)) return *line;
  }
}

TEST(GlooProcessTest, RanksInSeparateProcessesSumTogether) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  constexpr int kWorld = 3;
  std::vector<Process> children;
  for (int r = 1; r < kWorld; ++r) children.push_back(SpawnRank("sum", address, r, kWorld));
  auto c = CreateCollective(Options(address, 0, kWorld));
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> data(1000, 1.0f);
  ASSERT_TRUE((*c)->AllReduceSum(std::span<float>(data)).ok());
  ASSERT_TRUE((*c)->Barrier().ok());
  EXPECT_EQ(data[0], 6.0f);  // 1 + 2 + 3
  for (auto& child : children) {
    EXPECT_EQ(ReadLineStartingWith(child, "RESULT "), "RESULT 6");
    auto code = child.Wait(kJoinTimeoutMs);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0);
  }
}

TEST(GlooProcessTest, AKilledRankFailsTheCollectiveInsteadOfHanging) {
  const std::string address = LoopbackAddress(laminar::testing::FreeTcpPort());
  Process child = SpawnRank("join", address, 1, 2);
  auto options = Options(address, 0, 2);
  auto c = CreateCollective(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(ReadLineStartingWith(child, "JOINED"), "JOINED");
  child.Signal(SIGKILL);
  ASSERT_TRUE(child.Wait(kJoinTimeoutMs).ok());
  std::vector<float> data(1000, 1.0f);
  Status s = (*c)->AllReduceSum(std::span<float>(data));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "rank 0 of 2")) << s;
}

// ---------------------------------------------------------------------------------------------
// NCCL (GPU test: skips without a device).

TEST(NcclCollectiveTest, WithoutNcclOrGpuTheBackendSaysWhy) {
  if (BuiltWithNccl() && CudaDeviceCount() > 0) GTEST_SKIP() << "NCCL and a GPU are present";
  auto o = Options("tcp://127.0.0.1:29500", 0, 1, kShortTimeoutMs);
  o.backend = "nccl";
  auto c = CreateCollective(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(),
            BuiltWithNccl() ? StatusCode::kFailedPrecondition : StatusCode::kUnimplemented)
      << c.status();
}

TEST(NcclCollectiveTest, AllReduceAndBroadcastOnGpus) {
  if (!BuiltWithNccl()) GTEST_SKIP() << "built without NCCL";
  const int devices = CudaDeviceCount();
  if (devices == 0) GTEST_SKIP() << "no CUDA device";
  const int world = std::min(devices, 2);  // NCCL puts one rank per GPU
  Group group = JoinGroup(world, "nccl");
  ASSERT_EQ(group.size(), static_cast<size_t>(world));
  for (size_t n : kSizes) {
    std::vector<float> expected(n, 0.0f);
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < n; ++i) expected[i] += Value(r, i);
    }
    OnEveryRank(group, [&](int rank, Collective& c) {
      std::vector<float> host(n);  // host memory: staged through the device
      for (size_t i = 0; i < n; ++i) host[i] = Value(rank, i);
      ASSERT_TRUE(c.AllReduceSum(std::span<float>(host)).ok());
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += host[i] != expected[i];
      EXPECT_EQ(wrong, 0u) << "rank " << rank << ", n " << n;
#if LAMINAR_HAVE_NCCL
      // Device memory: reduced in place.
      for (size_t i = 0; i < n; ++i) host[i] = Value(rank, i);
      float* device = nullptr;
      ASSERT_EQ(cudaMalloc(&device, n * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                cudaSuccess);
      EXPECT_TRUE(c.AllReduceSum(std::span<float>(device, n)).ok());
      ASSERT_EQ(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      cudaFree(device);
      wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += host[i] != expected[i];
      EXPECT_EQ(wrong, 0u) << "device memory, rank " << rank << ", n " << n;
#endif
      std::vector<double> counts = {static_cast<double>(rank + 1)};
      ASSERT_TRUE(c.AllReduceSum(std::span<double>(counts)).ok());
      EXPECT_EQ(counts[0], world * (world + 1) / 2.0);
      const int root = world - 1;
      for (size_t i = 0; i < n; ++i) host[i] = Value(rank, i);
      ASSERT_TRUE(c.Broadcast(std::span<float>(host), root).ok());
      wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += host[i] != Value(root, i);
      EXPECT_EQ(wrong, 0u) << "broadcast, rank " << rank << ", n " << n;
      EXPECT_TRUE(c.Barrier().ok());
    });
  }
}

}  // namespace
}  // namespace laminar::trainer
