// ZeroMQ transport helpers (docs/architecture.md): request/reply with timeouts and retries
// (DEALER -> ROUTER) and one-way streams (PUSH -> PULL), over inproc://, ipc:// or tcp://.
// Exceptions from cppzmq are caught here and returned as Status naming the endpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "core/status.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace laminar {

// The process-wide ZeroMQ context (inproc:// endpoints only connect within one context).
zmq::context_t& ZmqContext();

// A run's CURVE keys (ZeroMQ's elliptic-curve security: every connection encrypted and
// authenticated), as Z85 text of 40 characters each. Every role of a run holds the same pair: it
// serves with the secret key and connects with the pair, so a client proves it holds the run's
// secret.
struct CurveKeys {
  std::string public_key;
  std::string secret_key;
};

// A fresh pair. Errors: Internal when ZeroMQ was built without CURVE.
StatusOr<CurveKeys> GenerateCurveKeys();
// Writes `keys` to `path`, readable by its owner only. Errors: AlreadyExists (an existing key file
// is never overwritten), Unavailable naming the path when it cannot be written.
Status WriteCurveKeys(const CurveKeys& keys, const std::string& path);
// Reads a key file WriteCurveKeys wrote. Errors: NotFound, or InvalidArgument naming the file and
// what is wrong (a missing or malformed key, a public key that is not the secret key's).
StatusOr<CurveKeys> ReadCurveKeys(const std::string& path);

// From now on every ZeroMQ socket this process makes uses CURVE with `keys`: reply servers and
// pull sockets accept only clients holding the same keys (a ZAP handler refuses any other key and
// logs the refusal with the client's address; a client without CURVE fails its handshake, which
// the reply servers log), and request clients and push sockets connect with them. Call before
// making sockets; sockets made earlier stay as they are. Errors: FailedPrecondition when enabled
// already with other keys; InvalidArgument for malformed keys.
Status EnableCurve(const CurveKeys& keys);
// Whether EnableCurve was called in this process.
bool CurveEnabled();

// Client side of request/reply. Each call carries a request id, so a reply to an earlier,
// timed-out attempt is recognised and dropped. Not thread-safe: one caller at a time.
class ZmqRequestClient {
 public:
  explicit ZmqRequestClient(std::string endpoint);
  ~ZmqRequestClient();
  ZmqRequestClient(const ZmqRequestClient&) = delete;
  ZmqRequestClient& operator=(const ZmqRequestClient&) = delete;

  // Sends `request` and waits up to `timeout_ms` for the reply; on timeout reconnects and tries
  // again, `attempts` times in all. Errors: DeadlineExceeded naming the endpoint and the attempts,
  // Unavailable for a socket error.
  StatusOr<std::string> Call(std::string_view request, int timeout_ms, int attempts = 1);

 private:
  Status Connect();
  std::string endpoint_;
  std::unique_ptr<zmq::socket_t> socket_;
  uint64_t next_id_ = 1;
};

// Server side: a thread that answers each request with handler(request, peer), where peer is
// the client's routing id in hex and its address ("zmq-peer-00a1b2c3d4 at 10.78.0.3", with
// " (CURVE)" once the client authenticated with the run's keys). The handler runs
// on the server thread, one request at a time. Stop() (or the destructor) ends it.
class ZmqReplyServer {
 public:
  using Handler = std::function<std::string(std::string_view request, std::string_view peer)>;

  // Binds `endpoint` ("tcp://127.0.0.1:*" picks a free port; see endpoint()). Errors:
  // Unavailable naming the endpoint (in use, bad address).
  static StatusOr<std::unique_ptr<ZmqReplyServer>> Start(const std::string& endpoint,
                                                         Handler handler);
  ~ZmqReplyServer();
  ZmqReplyServer(const ZmqReplyServer&) = delete;
  ZmqReplyServer& operator=(const ZmqReplyServer&) = delete;

  // The bound endpoint, with the port filled in.
  const std::string& endpoint() const { return endpoint_; }
  void Stop();

 private:
  ZmqReplyServer() = default;
  void Loop();
  void LogHandshakeFailure();
  std::string endpoint_;
  Handler handler_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::unique_ptr<zmq::socket_t> monitor_;  // handshake failures (with CURVE only)
  int64_t handshake_failures_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One-way stream: PUSH connects, PULL binds. Send blocks at most `timeout_ms` when the peer's
// queue is full; Receive waits at most `timeout_ms`. Not thread-safe.
class ZmqPush {
 public:
  // `queue_messages`: ZeroMQ's high-water mark, messages queued before Send blocks.
  static StatusOr<std::unique_ptr<ZmqPush>> Connect(const std::string& endpoint,
                                                    int queue_messages = 1000);
  ~ZmqPush();
  Status Send(std::string_view message, int timeout_ms);
  // One message made of `parts` back to back, copied once (no joined string in between).
  Status SendGather(std::initializer_list<std::string_view> parts, int timeout_ms);

 private:
  ZmqPush() = default;
  std::string endpoint_;
  std::unique_ptr<zmq::socket_t> socket_;
};

class ZmqPull {
 public:
  static StatusOr<std::unique_ptr<ZmqPull>> Bind(const std::string& endpoint,
                                                 int queue_messages = 1000);
  ~ZmqPull();
  const std::string& endpoint() const { return endpoint_; }
  // DeadlineExceeded when nothing arrived within `timeout_ms`.
  StatusOr<std::string> Receive(int timeout_ms);

 private:
  ZmqPull() = default;
  std::string endpoint_;
  std::unique_ptr<zmq::socket_t> socket_;
};

}  // namespace laminar
