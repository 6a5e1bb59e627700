// ZeroMQ request/reply and streams on real sockets: inproc, ipc and tcp on loopback; timeouts,
// retries past a slow server, and late replies to abandoned attempts.
#include "core/zmq_transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/test_util.h"

namespace laminar {
namespace {

std::string Echo(std::string_view request, std::string_view) {
  return "re:" + std::string(request);
}

TEST(ZmqTransportTest, RequestReplyOnEveryTransport) {
  std::string ipc = "ipc://" + (testing::TempDir("zmq") / "rr.sock").string();
  for (std::string endpoint :
       {std::string("inproc://rr-test"), ipc, std::string("tcp://127.0.0.1:*")}) {
    auto server = ZmqReplyServer::Start(endpoint, Echo);
    ASSERT_TRUE(server.ok()) << server.status();
    ZmqRequestClient client((*server)->endpoint());
    for (int i = 0; i < 20; ++i) {
      auto reply = client.Call("m" + std::to_string(i), 2000);
      ASSERT_TRUE(reply.ok()) << reply.status() << " on " << endpoint;
      EXPECT_EQ(*reply, "re:m" + std::to_string(i));
    }
    std::string big(1 << 20, 'x');
    auto reply = client.Call(big, 5000);
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->size(), big.size() + 3);
  }
}

TEST(ZmqTransportTest, TimeoutNamesTheEndpoint) {
  // A bound PULL socket never answers requests: the client's attempts all time out.
  auto silent = ZmqPull::Bind("tcp://127.0.0.1:*");
  ASSERT_TRUE(silent.ok());
  ZmqRequestClient client((*silent)->endpoint());
  auto start = std::chrono::steady_clock::now();
  auto reply = client.Call("hello", 100, 2);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                  start)
                .count();
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(reply.status().message().find((*silent)->endpoint()), std::string::npos)
      << reply.status();
  EXPECT_GE(ms, 150);  // both attempts waited (a lower bound, not a timing threshold on speed)
}

TEST(ZmqTransportTest, RetriesPastASlowServerAndDropsLateReplies) {
  std::atomic<int> calls{0};
  auto server =
      ZmqReplyServer::Start("tcp://127.0.0.1:*", [&](std::string_view req, std::string_view) {
        if (calls++ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return std::string(req);
      });
  ASSERT_TRUE(server.ok());
  ZmqRequestClient client((*server)->endpoint());
  auto reply = client.Call("once", 100, 10);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(*reply, "once");
  // The next call gets its own reply, not a stale one.
  auto second = client.Call("twice", 1000, 1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, "twice");
}

TEST(ZmqTransportTest, PushPullKeepsOrder) {
  auto pull = ZmqPull::Bind("tcp://127.0.0.1:*");
  ASSERT_TRUE(pull.ok());
  auto push = ZmqPush::Connect((*pull)->endpoint());
  ASSERT_TRUE(push.ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE((*push)->Send(std::to_string(i), 1000).ok());
  for (int i = 0; i < 100; ++i) {
    auto m = (*pull)->Receive(2000);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, std::to_string(i));
  }
  auto none = (*pull)->Receive(50);
  EXPECT_EQ(none.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(ZmqTransportTest, BadEndpointsAreErrors) {
  EXPECT_FALSE(ZmqReplyServer::Start("tcp://not-an-address", Echo).ok());
  auto a = ZmqReplyServer::Start("tcp://127.0.0.1:*", Echo);
  ASSERT_TRUE(a.ok());
  auto b = ZmqReplyServer::Start((*a)->endpoint(), Echo);  // port in use
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find((*a)->endpoint()), std::string::npos) << b.status();
  EXPECT_FALSE(ZmqPull::Bind("bogus://x").ok());
}

}  // namespace
}  // namespace laminar
