// Every server a run's roles open, under the run's CURVE keys (run.keys; core/zmq_transport.h):
// the master relay's control socket and bulk plane, the manager, the actor's publisher and the
// cluster coordinator, in one process that enabled CURVE before it made a socket (as each role's
// process does). A rogue client, without CURVE or with a key of its own, gets no answer from any of
// them and each refusal is logged with a reason; a client holding the run's keys is served,
// including a weight pull over the bulk plane.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "core/zmq_transport.h"
#include "launch/cluster.h"
#include "proto/codec.h"
#include "proto/control.pb.h"
#include "proto/relay.pb.h"
#include "relay/publisher.h"
#include "relay/relay.h"
#include "relay/relay_client.h"
#include "rollout/manager/manager_server.h"
#include "tests/test_util.h"

namespace laminar {
namespace {

using ::laminar::testing::TempDir;
using ::laminar::testing::WaitFor;

enum class Rogue { kPlain, kOwnKey, kRunKey };

// Gives `s` the security `how` names: none, a key of its own, or the run's key (for a server
// whose public key is the run's).
void SecureAs(zmq::socket_t& s, Rogue how, const CurveKeys& run) {
  if (how == Rogue::kPlain) return;
  const CurveKeys own = how == Rogue::kRunKey ? run : *GenerateCurveKeys();
  s.set(zmq::sockopt::curve_serverkey, run.public_key);
  s.set(zmq::sockopt::curve_publickey, own.public_key);
  s.set(zmq::sockopt::curve_secretkey, own.secret_key);
}

// One request over a socket made by hand (not through core/zmq_transport.h, so the process-wide
// keys do not apply): `how` picks its security. True when a reply came within `timeout_ms`.
bool RawCall(const std::string& endpoint, const std::string& body, Rogue how, const CurveKeys& run,
             int timeout_ms = 700) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  SecureAs(s, how, run);
  s.connect(endpoint);
  const uint64_t id = 7;
  s.send(zmq::buffer(&id, sizeof id), zmq::send_flags::sndmore);
  s.send(zmq::buffer(body), zmq::send_flags::none);
  zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
  return (item.revents & ZMQ_POLLIN) != 0;
}

// A PUSH made by hand that tries to send one message to a PULL socket; true when it went out over a
// connection that completed its handshake (ZMQ_IMMEDIATE: nothing is queued for one that did not).
bool RawPush(const std::string& endpoint, Rogue how, const CurveKeys& run) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::push);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndtimeo, 5000);
  s.set(zmq::sockopt::immediate, 1);
  SecureAs(s, how, run);
  s.connect(endpoint);
  return s.send(zmq::str_buffer("forged chunk"), zmq::send_flags::none).has_value();
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto keys = GenerateCurveKeys();
    ASSERT_TRUE(keys.ok()) << keys.status();
    keys_ = new CurveKeys(*keys);
    ASSERT_TRUE(EnableCurve(*keys_).ok());
  }
  static CurveKeys* keys_;
};
CurveKeys* SecurityTest::keys_ = nullptr;

TEST_F(SecurityTest, ARogueClientIsRefusedByEveryRoleAndTheRunsKeysAreServed) {
  relay::RelayOptions ro;
  ro.id = "master";
  ro.shm_prefix = "lt" + std::to_string(getpid()) + "sec";
  auto relay = relay::Relay::Start(std::move(ro));
  ASSERT_TRUE(relay.ok()) << relay.status();
  relay::PublisherOptions po;
  po.master_endpoint = (*relay)->info().control_endpoint();
  po.chunk_bytes = 4096;
  auto publisher = relay::Publisher::Create(std::move(po));
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  std::vector<uint8_t> weights(20000);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<uint8_t>(i * 7);
  ASSERT_TRUE((*publisher)
                  ->Publish(1, {{"w", DType::kU8, {static_cast<int64_t>(weights.size())}, weights}})
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return (*relay)->latest_complete_version() == 1; }, 10000));

  auto dataset = manager::MakePromptDataset("sec", {{.id = "0",
                                                     .prompt_ids = {1, 2, 3},
                                                     .ground_truth = "",
                                                     .data_source = "sec",
                                                     .extra_info_json = "",
                                                     .source = "row 0"}});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  manager::ManagerConfig mc;
  mc.num_samples = 1;
  mc.sampling.set_max_tokens(4);
  auto manager = manager::ManagerServer::Start(
      std::make_shared<const manager::PromptDataset>(std::move(*dataset)), mc, {});
  ASSERT_TRUE(manager.ok()) << manager.status();

  std::unique_ptr<launch::CoordinatorServer> coordinator;
  for (int port = 20000 + getpid() % 20000, i = 0; !coordinator && i < 20; ++i, ++port) {
    auto c = launch::CoordinatorServer::Start({"127.0.0.1", port}, "plan");
    if (c.ok()) coordinator = std::move(*c);
  }
  ASSERT_TRUE(coordinator);

  proto::RelayRequest pull;
  pull.mutable_header()->set_sender("rollout/rogue");
  pull.mutable_pull()->set_version(1);
  pull.mutable_pull()->set_bulk_address("tcp://127.0.0.1:1");
  proto::ManagerRequest work;
  work.mutable_header()->set_sender("rollout/rogue");
  work.mutable_work()->set_rollout_id("rollout/rogue");
  work.mutable_work()->set_max_groups(1);
  const std::vector<std::pair<std::string, std::string>> servers = {
      {(*relay)->info().control_endpoint(), proto::Encode(pull)},
      {(*manager)->endpoint(), proto::Encode(work)},
      {(*publisher)->control_endpoint(), "resend"},
      {coordinator->endpoint(), "{}"}};

  ::testing::internal::CaptureStderr();
  for (const auto& [endpoint, body] : servers) {
    EXPECT_FALSE(RawCall(endpoint, body, Rogue::kPlain, *keys_)) << endpoint << " served plain";
    EXPECT_FALSE(RawCall(endpoint, body, Rogue::kOwnKey, *keys_))
        << endpoint << " served a key that is not the run's";
  }
  // The relay's bulk plane takes no chunk from a rogue either.
  EXPECT_FALSE(RawPush((*relay)->info().bulk_address(), Rogue::kPlain, *keys_));
  EXPECT_FALSE(RawPush((*relay)->info().bulk_address(), Rogue::kOwnKey, *keys_));
  EXPECT_TRUE(RawPush((*relay)->info().bulk_address(), Rogue::kRunKey, *keys_));
  const std::string log = ::testing::internal::GetCapturedStderr();
  // Each refusal says why: the handler names the key it refused and where it came from, the
  // server the handshake a plain client failed.
  EXPECT_NE(log.find("refused a ZeroMQ connection from 127.0.0.1"), std::string::npos) << log;
  EXPECT_NE(log.find("is not this run's"), std::string::npos) << log;
  EXPECT_NE(log.find("handshake failed"), std::string::npos) << log;
  // Nothing the rogue sent reached the roles: no rollout is known, no pull was served.
  EXPECT_EQ((*manager)->Metrics().at("manager/rollouts_alive"), 0);
  EXPECT_EQ((*relay)->pulls_served(), 0u);

  // The run's keys are served, by hand and through the project's own clients.
  for (const auto& [endpoint, body] : servers) {
    EXPECT_TRUE(RawCall(endpoint, body, Rogue::kRunKey, *keys_, 5000)) << endpoint;
  }
  ZmqRequestClient client((*manager)->endpoint());
  auto reply = client.Call(proto::Encode(work), 3000);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ((*manager)->Metrics().at("manager/rollouts_alive"), 1);
  relay::RelayClientOptions co;
  co.relays = {(*relay)->info().control_endpoint()};
  co.allow_shm = false;  // over the bulk plane, as from another machine
  auto relay_client = relay::RelayClient::Create(std::move(co));
  ASSERT_TRUE(relay_client.ok()) << relay_client.status();
  auto v = (*relay_client)->PullLatest();
  ASSERT_TRUE(v.ok()) << v.status();
  auto w = (*v)->Tensor("w");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(std::vector<uint8_t>(w->begin(), w->end()), weights);
}

TEST_F(SecurityTest, KeyFilesAreCheckedAndNeverOverwritten) {
  const auto dir = TempDir("keys");
  const std::string path = (dir / "run.keys").string();
  ASSERT_TRUE(WriteCurveKeys(*keys_, path).ok());
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto back = ReadCurveKeys(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->public_key, keys_->public_key);
  EXPECT_EQ(back->secret_key, keys_->secret_key);
  EXPECT_EQ(WriteCurveKeys(*keys_, path).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ReadCurveKeys((dir / "none").string()).status().code(), StatusCode::kNotFound);
  auto bad = [&](const std::string& name, const std::string& text) {
    std::ofstream((dir / name).string()) << text;
    return std::string(ReadCurveKeys((dir / name).string()).status().message());
  };
  EXPECT_NE(bad("garbage", "hello\n").find("line 1"), std::string::npos);
  EXPECT_NE(bad("half", "public = " + keys_->public_key + "\n").find("both"), std::string::npos);
  EXPECT_NE(bad("short", "public = abc\nsecret = " + keys_->secret_key + "\n").find("Z85"),
            std::string::npos);
  const CurveKeys other = *GenerateCurveKeys();
  EXPECT_NE(
      bad("mismatch", "public = " + other.public_key + "\nsecret = " + keys_->secret_key + "\n")
          .find("not the secret key's"),
      std::string::npos);
  // Another process-wide key set is refused; the same one again is fine.
  EXPECT_TRUE(EnableCurve(*keys_).ok());
  EXPECT_EQ(EnableCurve(other).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace laminar
