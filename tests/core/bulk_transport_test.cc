// Bulk transport over real ZeroMQ sockets, and the faults FaultyTransport injects.
#include "core/bulk_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

namespace laminar {
namespace {

std::vector<uint8_t> Payload(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(BulkTransportTest, DeliversTaggedBuffersIntact) {
  auto a = ZmqBulkTransport::Create("tcp://127.0.0.1:*");
  auto b = ZmqBulkTransport::Create("tcp://127.0.0.1:*");
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint64_t tag = 0; tag < 8; ++tag) {
    auto p = Payload(256 * 1024 + tag, static_cast<uint32_t>(tag));
    ASSERT_TRUE((*a)->Send((*b)->address(), tag, p, 2000).ok());
  }
  for (uint64_t tag = 0; tag < 8; ++tag) {
    auto m = (*b)->Receive(2000);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->tag, tag);
    auto want = Payload(256 * 1024 + tag, static_cast<uint32_t>(tag));
    ASSERT_EQ(m->bytes.size(), want.size());
    EXPECT_EQ(0, std::memcmp(m->bytes.data(), want.data(), want.size()));
  }
  auto empty = (*b)->Receive(20);
  EXPECT_EQ(empty.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(BulkTransportTest, FaultyTransportDropsCorruptsAndDies) {
  auto sink = ZmqBulkTransport::Create("tcp://127.0.0.1:*");
  auto src = ZmqBulkTransport::Create("tcp://127.0.0.1:*");
  ASSERT_TRUE(sink.ok() && src.ok());
  FaultyTransport faulty(std::move(*src),
                         {.drop_probability = 0.3, .corrupt_probability = 0.3, .seed = 7});
  const int n = 60;
  auto p = Payload(4096, 1);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(faulty.Send((*sink)->address(), i, p, 2000).ok());
  int received = 0, intact = 0;
  std::set<uint64_t> tags;
  while (true) {
    auto m = (*sink)->Receive(200);
    if (!m.ok()) break;
    ++received;
    tags.insert(m->tag);
    intact += std::memcmp(m->bytes.data(), p.data(), p.size()) == 0;
  }
  EXPECT_EQ(received, n - faulty.dropped());
  EXPECT_EQ(received - intact, faulty.corrupted());
  EXPECT_GT(faulty.dropped(), 0);
  EXPECT_GT(faulty.corrupted(), 0);
  faulty.Kill();
  EXPECT_EQ(faulty.Send((*sink)->address(), 0, p, 100).code(), StatusCode::kUnavailable);
  EXPECT_EQ(faulty.Receive(10).status().code(), StatusCode::kUnavailable);
}

// A held-back message goes out right after its successor; FlushHeld sends the last one.
TEST(BulkTransportTest, FaultyTransportReordersAdjacentMessages) {
  auto sink = ZmqBulkTransport::Create("tcp://127.0.0.1:*");
  auto src = ZmqBulkTransport::Create("tcp://127.0.0.1:*");
  ASSERT_TRUE(sink.ok() && src.ok());
  FaultyTransport faulty(std::move(*src), {.reorder_probability = 0.5, .seed = 3});
  const int n = 40;
  auto p = Payload(100, 2);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(faulty.Send((*sink)->address(), i, p, 2000).ok());
  ASSERT_TRUE(faulty.FlushHeld(2000).ok());
  std::vector<uint64_t> tags;
  for (int i = 0; i < n; ++i) {
    auto m = (*sink)->Receive(2000);
    ASSERT_TRUE(m.ok()) << m.status();
    tags.push_back(m->tag);
  }
  // Model: a held message is one that arrives below its predecessor; replaying those holds on a
  // plain list (emit i, then the held one) must give exactly the arrival order.
  std::set<uint64_t> held;
  for (int k = 1; k < n; ++k) {
    if (tags[k] < tags[k - 1]) held.insert(tags[k]);
  }
  std::vector<uint64_t> want;
  int64_t holding = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (held.count(i) && holding < 0) {
      holding = i;
      continue;
    }
    want.push_back(i);
    if (holding >= 0) want.push_back(holding);
    holding = -1;
  }
  if (holding >= 0) want.push_back(holding);
  EXPECT_EQ(tags, want);
  EXPECT_GT(faulty.reordered(), 0);
  EXPECT_EQ(static_cast<int>(held.size()), faulty.reordered());
}

}  // namespace
}  // namespace laminar
