// The relay tier in one process over real sockets: wire framing, shared-memory versions, chunk
// reassembly, a chain of relays fed by the publisher, rollout pulls, and injected faults.
#include "relay/relay.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <thread>

#include "core/bulk_transport.h"
#include "proto/codec.h"
#include "relay/chunk_assembler.h"
#include "relay/policy_weights.h"
#include "relay/publisher.h"
#include "relay/relay_client.h"
#include "relay/send_worker.h"
#include "relay/shm_version.h"
#include "relay/wire.h"
#include "tests/model/random_weights.h"
#include "tests/test_util.h"

namespace laminar::relay {
namespace {

using ::laminar::testing::WaitFor;

// Tensors whose bytes are a function of (version, tensor index), so any mix-up shows.
struct FakeWeights {
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<TensorBytes> tensors;
};

FakeWeights MakeWeights(int64_t version, const std::vector<int64_t>& rows, int64_t cols = 1000) {
  FakeWeights w;
  w.buffers.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::mt19937 rng(static_cast<uint32_t>(version * 131 + static_cast<int64_t>(i)));
    w.buffers[i].resize(static_cast<size_t>(rows[i] * cols) * 2);
    for (auto& b : w.buffers[i]) b = static_cast<uint8_t>(rng());
    w.tensors.push_back(
        {"layers." + std::to_string(i) + ".weight", DType::kBF16, {rows[i], cols}, w.buffers[i]});
  }
  return w;
}

// Every tensor of `v` equals MakeWeights(v.version(), rows).
void ExpectWeights(const PulledVersion& v, const std::vector<int64_t>& rows) {
  FakeWeights want = MakeWeights(v.version(), rows);
  for (const auto& t : want.tensors) {
    auto got = v.Tensor(t.name);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), t.bytes.size());
    ASSERT_EQ(0, std::memcmp(got->data(), t.bytes.data(), t.bytes.size())) << t.name;
  }
}

size_t ShmSegmentsWithPrefix(const std::string& prefix) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  }
  return n;
}

TEST(RelayWireTest, TagsRoundTripAndUnknownKindsAreRefused) {
  for (BulkTag t : {BulkTag{BulkKind::kChunk, kMaxVersion, kMaxChunks - 1},
                    BulkTag{BulkKind::kBroadcast, 0, 0}, BulkTag{BulkKind::kChunk, 12345, 77}}) {
    auto back = DecodeTag(EncodeTag(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->kind, t.kind);
    EXPECT_EQ(back->version, t.version);
    EXPECT_EQ(back->index, t.index);
  }
  EXPECT_FALSE(DecodeTag(uint64_t{7} << 60).ok());
}

TEST(RelayWireTest, LayoutManifestChecksItsInput) {
  FakeWeights w = MakeWeights(1, {3, 5});
  auto m = LayoutManifest(1, w.tensors, 4096);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tensors(1).offset() % 64, 0u);
  FillChecksums(std::vector<uint8_t>(m->total_bytes()), &*m);
  EXPECT_TRUE(proto::Validate(*m).ok());
  auto dup = w.tensors;
  dup[1].name = dup[0].name;
  EXPECT_NE(LayoutManifest(1, dup, 4096).status().message().find("given twice"), std::string::npos);
  auto bad = w.tensors;
  bad[0].shape = {4, 1000};
  EXPECT_NE(LayoutManifest(1, bad, 4096).status().message().find("layers.0.weight"),
            std::string::npos);
  EXPECT_FALSE(LayoutManifest(-1, w.tensors, 4096).ok());
  EXPECT_FALSE(LayoutManifest(1, w.tensors, 0).ok());
  std::vector<uint8_t> big(kMaxChunks + 1);
  auto too_many = LayoutManifest(1, {{"big", DType::kU8, {kMaxChunks + 1}, big}}, 1);
  EXPECT_NE(too_many.status().message().find("chunks"), std::string::npos);
}

proto::WeightManifest ManifestFor(int64_t version, const std::vector<uint8_t>& data,
                                  uint64_t chunk_bytes) {
  TensorBytes t{"w", DType::kU8, {static_cast<int64_t>(data.size())}, data};
  auto m = LayoutManifest(version, {t}, chunk_bytes);
  EXPECT_TRUE(m.ok()) << m.status();
  FillChecksums(data, &*m);
  return *m;
}

TEST(ChunkAssemblerTest, AcceptsAnyOrderOnceAndRefusesBadChunks) {
  std::vector<uint8_t> data(10000);
  std::iota(data.begin(), data.end(), 0);
  proto::WeightManifest m = ManifestFor(3, data, 1024);
  std::vector<uint8_t> dest(data.size());
  ChunkAssembler a(m, dest);
  std::vector<uint32_t> order(m.num_chunks());
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  std::vector<uint8_t> corrupt(data.begin(), data.begin() + 1024);
  corrupt[17] ^= 1;
  auto c = a.Accept(0, corrupt);
  EXPECT_EQ(c.status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(a.has(0));
  EXPECT_EQ(a.Accept(99, corrupt).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Accept(1, {data.data(), 5}).status().code(), StatusCode::kInvalidArgument);
  for (uint32_t i : order) {
    ChunkRange r = ChunkAt(m, i);
    auto ok = a.Accept(i, {data.data() + r.offset, static_cast<size_t>(r.size)});
    ASSERT_TRUE(ok.ok() && *ok) << i;
    EXPECT_FALSE(*a.Accept(i, {data.data() + r.offset, static_cast<size_t>(r.size)}));
  }
  EXPECT_TRUE(a.complete());
  EXPECT_TRUE(a.Missing().empty());
  EXPECT_EQ(dest, data);
}

TEST(ShmVersionTest, ReadersKeepAnUnlinkedVersionIntact) {
  const std::string name = "/laminar-test-" + std::to_string(getpid()) + "-v1";
  std::vector<uint8_t> data(100000, 7);
  proto::WeightManifest m = ManifestFor(1, data, 4096);
  auto w = ShmVersion::Create(name, m);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(ShmVersion::Create(name, m).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ShmVersion::OpenReadOnly(name).status().code(), StatusCode::kFailedPrecondition);
  std::memcpy((*w)->mutable_data().data(), data.data(), data.size());
  (*w)->MarkComplete();
  auto r = ShmVersion::OpenReadOnly(name);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->Verify().ok());
  w->reset();  // the writer unmaps and unlinks
  EXPECT_EQ(ShmVersion::OpenReadOnly(name).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE((*r)->Verify().ok());  // the reader's mapping still holds the bytes
  EXPECT_EQ((*r)->data()[99999], 7);
  EXPECT_EQ(ShmVersion::Create("no-slash", m).status().code(), StatusCode::kInvalidArgument);
}

// A master and `n` relays in this process, fed by a publisher.
struct Tier {
  std::unique_ptr<Relay> master;
  std::vector<std::unique_ptr<Relay>> relays;
  std::unique_ptr<Publisher> publisher;

  static Tier Start(int n, Topology topology = Topology::kChain,
                    std::unique_ptr<BulkTransport> publisher_transport = nullptr) {
    Tier t;
    RelayOptions mo;
    mo.id = "m";
    mo.topology = topology;
    mo.ping_interval_ms = 50;
    mo.ping_timeout_ms = 200;
    mo.rebroadcast_after_ms = 600;
    mo.stall_resend_ms = 300;
    auto m = Relay::Start(std::move(mo));
    EXPECT_TRUE(m.ok()) << m.status();
    t.master = std::move(*m);
    for (int i = 0; i < n; ++i) {
      RelayOptions o;
      o.id = "r" + std::to_string(i + 1);
      o.master_endpoint = t.master->info().control_endpoint();
      o.ping_interval_ms = 50;
      o.stall_resend_ms = 300;
      auto r = Relay::Start(std::move(o));
      EXPECT_TRUE(r.ok()) << r.status();
      t.relays.push_back(std::move(*r));
    }
    PublisherOptions po;
    po.master_endpoint = t.master->info().control_endpoint();
    po.chunk_bytes = 64 * 1024;
    po.transport = std::move(publisher_transport);
    auto p = Publisher::Create(std::move(po));
    EXPECT_TRUE(p.ok()) << p.status();
    t.publisher = std::move(*p);
    return t;
  }

  bool AllHave(int64_t version) const {
    if (master->latest_complete_version() != version) return false;
    for (const auto& r : relays) {
      if (r->latest_complete_version() != version) return false;
    }
    return true;
  }
};

std::unique_ptr<RelayClient> ClientOf(const std::vector<const Relay*>& relays, bool allow_shm) {
  RelayClientOptions o;
  for (const Relay* r : relays) o.relays.push_back(r->info().control_endpoint());
  o.allow_shm = allow_shm;
  o.request_timeout_ms = 300;
  auto c = RelayClient::Create(std::move(o));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

const std::vector<int64_t> kRows = {300, 17, 1, 250};  // ~1.1 MB in 18 chunks

TEST(RelayTierTest, ChainDeliversEveryVersionBitIdenticalToEveryRelay) {
  Tier t = Tier::Start(3);
  ASSERT_EQ(t.master->Chain().size(), 3u);
  FakeWeights w = MakeWeights(1, kRows);
  auto stall = t.publisher->Publish(1, w.tensors);
  ASSERT_TRUE(stall.ok()) << stall.status();
  EXPECT_GE(*stall, 0.0);
  EXPECT_EQ(t.publisher->stats().publish_stall_s, *stall);
  EXPECT_EQ(t.publisher->stats().bytes, 1136096u);
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(1); }, 10000));
  for (const auto& r : t.relays) {
    auto c = ClientOf({r.get()}, /*allow_shm=*/true);
    auto v = c->PullLatest();
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ((*v)->source(), "shm");
    EXPECT_GT((*v)->pull_wait_s(), 0.0);
    ExpectWeights(**v, kRows);
  }
  auto bulk = ClientOf({t.relays.back().get()}, /*allow_shm=*/false)->PullLatest();
  ASSERT_TRUE(bulk.ok()) << bulk.status();
  EXPECT_EQ((*bulk)->source(), "bulk");
  ExpectWeights(**bulk, kRows);
  EXPECT_EQ(ClientOf({t.master.get()}, true)->PullLatest(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.publisher->Publish(1, w.tensors).status().code(), StatusCode::kInvalidArgument);
}

// Every tensor of `want` is in `got`, bit for bit, and nothing else.
void ExpectSameStore(const model::WeightStore& got, const model::WeightStore& want) {
  EXPECT_EQ(got.Names(), want.Names());
  for (const std::string& name : want.Names()) {
    auto w = want.Get(name);
    auto g = got.Get(name);
    ASSERT_TRUE(w.ok() && g.ok()) << name;
    EXPECT_EQ(g->dtype(), w->dtype()) << name;
    EXPECT_EQ(g->shape().dims(), w->shape().dims()) << name;
    ASSERT_EQ(g->size_bytes(), w->size_bytes()) << name;
    EXPECT_EQ(std::memcmp(g->data(), w->data(), g->size_bytes()), 0) << name;
  }
}

TEST(RelayTierTest, APolicyWeightStoreAndItsDraftModelArriveBitIdentical) {
  const model::ModelConfig config = testing::TinyLlamaConfig();
  const model::WeightStore weights = testing::RandomWeights(config, 11, 0.5f);
  model::ModelConfig small = config;
  small.num_hidden_layers = 1;
  const model::WeightStore draft = testing::RandomWeights(small, 12, 0.5f);
  auto tensors = TensorsOf(weights);
  auto draft_tensors = TensorsOf(draft, kDraftModelPrefix);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_TRUE(draft_tensors.ok()) << draft_tensors.status();
  ASSERT_EQ(tensors->size(), weights.size());
  EXPECT_EQ(draft_tensors->front().name.substr(0, kDraftModelPrefix.size()), kDraftModelPrefix);
  Tier t = Tier::Start(1);
  ASSERT_TRUE(t.publisher->Publish(3, *tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(3); }, 10000));
  auto pulled = ClientOf({t.relays.front().get()}, /*allow_shm=*/true)->PullLatest();
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  auto store = WeightStoreOf(**pulled);
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectSameStore(*store, weights);
  auto none = WeightStoreOf(**pulled, kDraftModelPrefix);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->size(), 0u);
  // A version with the draft model: the policy's tensors and the draft's come apart again.
  tensors->insert(tensors->end(), draft_tensors->begin(), draft_tensors->end());
  ASSERT_TRUE(t.publisher->Publish(4, *tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(4); }, 10000));
  pulled = ClientOf({t.relays.front().get()}, /*allow_shm=*/false)->PullLatest(3);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  store = WeightStoreOf(**pulled);
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectSameStore(*store, weights);
  auto got_draft = WeightStoreOf(**pulled, kDraftModelPrefix);
  ASSERT_TRUE(got_draft.ok()) << got_draft.status();
  ExpectSameStore(*got_draft, draft);
}

TEST(RelayTierTest, StarTopologyDeliversToo) {
  Tier t = Tier::Start(2, Topology::kStar);
  FakeWeights w = MakeWeights(4, kRows);
  ASSERT_TRUE(t.publisher->Publish(4, w.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(4); }, 10000));
  auto v = ClientOf({t.relays[1].get()}, false)->PullLatest();
  ASSERT_TRUE(v.ok()) << v.status();
  ExpectWeights(**v, kRows);
}

TEST(RelayTierTest, PullsWhileNewerVersionsArriveAreAlwaysCompleteAndOldOnesAreFreed) {
  Tier t = Tier::Start(2);
  std::atomic<bool> done{false};
  std::atomic<int> pulls{0};
  std::atomic<int64_t> newest_seen{-1};
  std::thread reader([&] {
    auto c = ClientOf({t.relays[1].get(), t.relays[0].get()}, true);
    while (!done) {
      auto v = c->PullLatest();
      if (v.status().code() == StatusCode::kNotFound) continue;  // before the first version
      if (!v.ok()) {
        ADD_FAILURE() << v.status();  // a pull that fails, or fails its checksums, is a bug
        continue;
      }
      ExpectWeights(**v, kRows);  // checks every byte of the version it names
      newest_seen = std::max<int64_t>(newest_seen, (*v)->version());
      ++pulls;
    }
  });
  for (int64_t version = 1; version <= 6; ++version) {
    FakeWeights w = MakeWeights(version, kRows);
    ASSERT_TRUE(t.publisher->Publish(version, w.tensors).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(6); }, 15000));
  ASSERT_TRUE(WaitFor([&] { return newest_seen == 6; }, 5000));
  done = true;
  reader.join();
  EXPECT_GT(pulls.load(), 0);
  // Each relay keeps only its newest version (and none in flight now).
  for (const Relay* r : {t.master.get(), t.relays[0].get(), t.relays[1].get()}) {
    const std::string prefix = "laminar-" + r->info().id() + "-" + std::to_string(getpid());
    EXPECT_TRUE(WaitFor([&] { return ShmSegmentsWithPrefix(prefix) == 1; }, 3000)) << prefix;
  }
  const std::string m_prefix = "laminar-m-" + std::to_string(getpid());
  t = Tier();  // stopping unlinks the rest
  EXPECT_EQ(ShmSegmentsWithPrefix(m_prefix), 0u);
}

TEST(RelayTierTest, CorruptedChunksFromThePublisherAreDetectedAndSentAgain) {
  auto inner = CreateBulkTransport("zmq");
  ASSERT_TRUE(inner.ok());
  auto* faulty = new FaultyTransport(std::move(*inner), {.corrupt_probability = 0.3, .seed = 3});
  Tier t = Tier::Start(2, Topology::kChain, std::unique_ptr<BulkTransport>(faulty));
  FakeWeights w = MakeWeights(2, kRows);
  ASSERT_TRUE(t.publisher->Publish(2, w.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(2); }, 15000));
  EXPECT_GT(faulty->corrupted(), 0);
  auto v = ClientOf({t.relays[1].get()}, true)->PullLatest();
  ASSERT_TRUE(v.ok()) << v.status();
  ExpectWeights(**v, kRows);
}

TEST(RelayTierTest, ChunksLostInsideTheChainAreRecovered) {
  Tier t = Tier::Start(0);
  // A relay whose outgoing messages are lost at random: its downstream must still complete.
  RelayOptions lossy;
  lossy.id = "lossy";
  lossy.master_endpoint = t.master->info().control_endpoint();
  lossy.stall_resend_ms = 300;
  auto inner = CreateBulkTransport("zmq");
  ASSERT_TRUE(inner.ok());
  auto* faulty = new FaultyTransport(std::move(*inner), {.drop_probability = 0.2, .seed = 9});
  lossy.transport.reset(faulty);
  auto r1 = Relay::Start(std::move(lossy));
  ASSERT_TRUE(r1.ok()) << r1.status();
  RelayOptions o;
  o.id = "after";
  o.master_endpoint = t.master->info().control_endpoint();
  o.stall_resend_ms = 300;
  auto r2 = Relay::Start(std::move(o));
  ASSERT_TRUE(r2.ok()) << r2.status();
  FakeWeights w = MakeWeights(5, kRows);
  ASSERT_TRUE(t.publisher->Publish(5, w.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return (*r2)->latest_complete_version() == 5; }, 20000));
  EXPECT_GT(faulty->dropped(), 0);
  auto v = ClientOf({r2->get()}, false)->PullLatest();
  ASSERT_TRUE(v.ok()) << v.status();
  ExpectWeights(**v, kRows);
}

TEST(RelayTierTest, ARelayThatStopsIsDroppedAndTheRestStillGetTheVersion) {
  Tier t = Tier::Start(3);
  FakeWeights w1 = MakeWeights(1, kRows);
  ASSERT_TRUE(t.publisher->Publish(1, w1.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(1); }, 10000));
  t.relays[0]->Stop();  // the head of the chain after the master; it leaves at once
  EXPECT_EQ(t.master->Chain().size(), 2u);
  FakeWeights w2 = MakeWeights(2, kRows);
  ASSERT_TRUE(t.publisher->Publish(2, w2.tensors).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return t.relays[1]->latest_complete_version() == 2 &&
               t.relays[2]->latest_complete_version() == 2;
      },
      10000));
  EXPECT_EQ(t.master->Chain().size(), 2u);
  EXPECT_EQ(t.master->chain_rebuilds(), 1u);
  // A rollout whose local relay is gone pulls from the next one.
  auto c = ClientOf({t.relays[0].get(), t.relays[2].get()}, true);
  auto v = c->PullLatest();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->version(), 2);
  EXPECT_EQ((*v)->relay(), t.relays[2]->info().control_endpoint());
  ExpectWeights(**v, kRows);
}

TEST(RelayTierTest, ARemovedSegmentFallsBackToTheBulkPlane) {
  Tier t = Tier::Start(1);
  FakeWeights w = MakeWeights(3, kRows);
  ASSERT_TRUE(t.publisher->Publish(3, w.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(3); }, 10000));
  const std::string name = "/laminar-r1-" + std::to_string(getpid()) + "-v3";
  ASSERT_EQ(shm_unlink(name.c_str()), 0) << name;
  auto v = ClientOf({t.relays[0].get()}, true)->PullLatest();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->source(), "bulk");
  ExpectWeights(**v, kRows);
}

TEST(RelayTierTest, JoinRefusesATakenIdAndAnotherTransport) {
  Tier t = Tier::Start(1);
  RelayOptions twin;
  twin.id = "r1";
  twin.master_endpoint = t.master->info().control_endpoint();
  twin.join_timeout_ms = 500;
  auto r = Relay::Start(std::move(twin));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("relay id r1 is taken"), std::string::npos) << r.status();
  RelayOptions other;
  other.id = "u1";
  other.bulk_kind = "ucx";
  other.master_endpoint = t.master->info().control_endpoint();
  other.join_timeout_ms = 500;
  r = Relay::Start(std::move(other));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("same --transport"), std::string::npos) << r.status();
  EXPECT_EQ(t.master->Chain().size(), 1u);
}

TEST(RelayTierTest, ABusyRelayRefusesPullsInsteadOfQueueingThemForever) {
  RelayOptions mo;
  mo.id = "m";
  mo.max_queued_pulls = 0;  // refuse a pull while anything is queued
  mo.send_timeout_ms = 300;
  auto master = Relay::Start(std::move(mo));
  ASSERT_TRUE(master.ok()) << master.status();
  PublisherOptions po;
  po.master_endpoint = (*master)->info().control_endpoint();
  po.chunk_bytes = 64 * 1024;
  auto publisher = Publisher::Create(std::move(po));
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  FakeWeights w = MakeWeights(1, kRows);
  ASSERT_TRUE((*publisher)->Publish(1, w.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return (*master)->latest_complete_version() == 1; }, 10000));
  // A rollout that asks and is gone: its chunks wait on a peer that never reads them.
  ZmqRequestClient client((*master)->info().control_endpoint());
  proto::RelayRequest pull;
  pull.mutable_pull()->set_bulk_address("tcp://127.0.0.1:1");
  auto first_bytes = client.Call(proto::Encode(pull), 1000);
  ASSERT_TRUE(first_bytes.ok()) << first_bytes.status();
  auto first = proto::Decode<proto::RelayReply>(*first_bytes, "m");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->error(), "");
  auto second_bytes = client.Call(proto::Encode(pull), 1000);
  ASSERT_TRUE(second_bytes.ok()) << second_bytes.status();
  auto second = proto::Decode<proto::RelayReply>(*second_bytes, "m");
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->error().find("busy"), std::string::npos) << second->error();
}

// 64 rollouts on other machines pull one version at once, over the bulk plane: the relay queues
// a bounded number of whole versions (RelayOptions::max_queued_pulls) and refuses the rest as
// busy with a retry hint; every client gets the whole version, bit-identical, in the end.
TEST(RelayTierTest, SixtyFourConcurrentPullsOfOneVersionAreAllServed) {
  Tier t = Tier::Start(0);
  FakeWeights w = MakeWeights(1, kRows);
  ASSERT_TRUE(t.publisher->Publish(1, w.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return t.AllHave(1); }, 10000));
  constexpr int kClients = 64;
  std::vector<std::unique_ptr<RelayClient>> clients;
  for (int i = 0; i < kClients; ++i) {
    RelayClientOptions o;
    o.id = "pull" + std::to_string(i);
    o.relays = {t.master->info().control_endpoint()};
    o.allow_shm = false;  // as from another machine
    o.request_timeout_ms = 2000;
    o.stall_resend_ms = 500;
    o.busy_wait_ms = 60000;  // a client that waits its turn (a rollout asks again instead)
    auto c = RelayClient::Create(std::move(o));
    ASSERT_TRUE(c.ok()) << c.status();
    clients.push_back(std::move(*c));
  }
  std::atomic<int> ready{0}, served{0};
  std::atomic<int64_t> busy_waits{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kClients) std::this_thread::yield();  // all at once
      auto v = clients[i]->PullLatest();
      if (!v.ok()) {
        ADD_FAILURE() << "client " << i << ": " << v.status();
        return;
      }
      EXPECT_EQ((*v)->source(), "bulk");
      ExpectWeights(**v, kRows);
      busy_waits += (*v)->busy_waits();
      ++served;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(served.load(), kClients);
  EXPECT_GE(t.master->pulls_served(), static_cast<uint64_t>(kClients));
  std::cout << kClients << " pulls served, " << t.master->pulls_refused_busy()
            << " refused as busy first, " << busy_waits.load() << " waits in the clients\n";
}

// The master relay dies and a new one starts on its control endpoint (what `laminar run` does):
// it starts empty, on another bulk address; the publisher sees the version gone, asks for the new
// bulk address and sends the version again, and rollouts pull it from the new master.
TEST(RelayTierTest, AMasterRestartedInPlaceGetsTheNewestVersionAgain) {
  RelayOptions mo;
  mo.id = "m";
  auto first = Relay::Start(std::move(mo));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string control = (*first)->info().control_endpoint();
  const std::string first_bulk = (*first)->info().bulk_address();
  PublisherOptions po;
  po.master_endpoint = control;
  po.chunk_bytes = 64 * 1024;
  po.watch_interval_ms = 50;
  po.keep_watch_interval_ms = 100;
  auto publisher = Publisher::Create(std::move(po));
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  FakeWeights w = MakeWeights(3, kRows);
  ASSERT_TRUE((*publisher)->Publish(3, w.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return (*first)->latest_complete_version() == 3; }, 10000));
  first->reset();  // the master is gone

  // ZeroMQ closes the old listener in the background: the port may take a moment to be free.
  StatusOr<std::unique_ptr<Relay>> second = UnavailableError("not started");
  ASSERT_TRUE(WaitFor(
      [&] {
        RelayOptions again;
        again.id = "m";
        again.control_endpoint = control;
        second = Relay::Start(std::move(again));
        return second.ok();
      },
      10000))
      << second.status();
  EXPECT_NE((*second)->info().bulk_address(), first_bulk);
  ASSERT_TRUE(WaitFor([&] { return (*second)->latest_complete_version() == 3; }, 20000))
      << "the publisher did not send the newest version to the restarted master";
  auto v = ClientOf({second->get()}, /*allow_shm=*/false)->PullLatest();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)->version(), 3);
  ExpectWeights(**v, kRows);
  // Versions published later reach it as before.
  FakeWeights w4 = MakeWeights(4, kRows);
  ASSERT_TRUE((*publisher)->Publish(4, w4.tensors).ok());
  ASSERT_TRUE(WaitFor([&] { return (*second)->latest_complete_version() == 4; }, 10000));
}

TEST(SendWorkerTest, AFailedDestinationIsSkippedForItsGenerationOnly) {
  auto transport = CreateBulkTransport("ucx");
  ASSERT_TRUE(transport.ok()) << transport.status();
  Mutex send_mu;
  SendWorker worker("test", transport->get(), &send_mu, 500);
  const std::string nobody = "ucx://127.0.0.1:1";  // nothing listens there
  for (uint64_t generation : {1, 1, 1, 2}) {
    worker.Push(SendItem::Owned(nobody, 0, "x", generation));
  }
  ASSERT_TRUE(worker.WaitIdle(10000));
  EXPECT_EQ(worker.failures(), 2u);  // one per generation, not one per item
}

TEST(RelayTierTest, BadOptionsAndPeersGiveClearErrors) {
  RelayOptions o;
  o.id = "x";
  o.master_endpoint = "tcp://127.0.0.1:1";  // nobody listens
  o.join_timeout_ms = 250;
  auto r = Relay::Start(std::move(o));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tcp://127.0.0.1:1"), std::string::npos);
  RelayOptions bad;
  bad.shm_prefix = "a/b";
  EXPECT_EQ(Relay::Start(std::move(bad)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseTopology("ring").ok());
  EXPECT_EQ(RelayClient::Create({}).status().code(), StatusCode::kInvalidArgument);
  PublisherOptions po;
  po.master_endpoint = "tcp://127.0.0.1:1";
  po.connect_timeout_ms = 250;
  EXPECT_FALSE(Publisher::Create(std::move(po)).ok());
  // A relay answers garbage with an error, not a crash.
  Tier t = Tier::Start(0);
  ZmqRequestClient client(t.master->info().control_endpoint());
  auto reply = client.Call("\xff\xff garbage", 1000);
  ASSERT_TRUE(reply.ok());
  auto decoded = proto::Decode<proto::RelayReply>(*reply, "master");
  ASSERT_TRUE(decoded.ok());
  EXPECT_NE(decoded->error().find("malformed"), std::string::npos);
  auto none = ClientOf({t.master.get()}, true)->PullLatest();
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace laminar::relay
