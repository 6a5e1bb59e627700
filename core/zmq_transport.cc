// ZeroMQ helpers over cppzmq.
#include "core/zmq_transport.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>
#include <zmq.hpp>

#include "core/logging.h"
#include "core/mutex.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LAMINAR_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define LAMINAR_TSAN 1
#endif
#ifdef LAMINAR_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace laminar {
namespace {

// A message sent over ZeroMQ is seen whole by its receiver: everything the sender did before the
// send happens before what the receiver does after it. libzmq is not built with ThreadSanitizer,
// so its queues carry no such edge for it; these mark one at every send and receive (all sockets
// share one marker, which orders more than the messages do, never less).
#ifdef LAMINAR_TSAN
char g_message_order;
void MessageSent() { __tsan_release(&g_message_order); }
void MessageReceived() { __tsan_acquire(&g_message_order); }
#else
void MessageSent() {}
void MessageReceived() {}
#endif

constexpr int kPollSliceMs = 50;  // the server checks for Stop() this often

Status ZmqError(const std::string& what, const zmq::error_t& e) {
  return UnavailableError(what + ": " + e.what());
}

std::string IdBytes(uint64_t id) {
  std::string s(sizeof(id), '\0');
  std::memcpy(s.data(), &id, sizeof(id));
  return s;
}

// Receives all frames of one multipart message (non-blocking: call after poll said ready).
std::vector<zmq::message_t> RecvMultipart(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t msg;
    if (!socket.recv(msg, zmq::recv_flags::dontwait)) break;
    bool more = msg.more();
    frames.push_back(std::move(msg));
    if (!more) break;
  }
  return frames;
}

// The keys EnableCurve set (null: none). Set once, never freed: sockets read it as they are made.
std::atomic<const CurveKeys*> g_curve{nullptr};
constexpr char kZapDomain[] = "laminar";
constexpr size_t kZ85KeyChars = 40;

// Sets CURVE on a socket before it binds (server) or connects (client), when enabled.
void SecureServer(zmq::socket_t& s) {
  if (const CurveKeys* k = g_curve.load()) {
    s.set(zmq::sockopt::curve_server, 1);
    s.set(zmq::sockopt::curve_secretkey, k->secret_key);
    s.set(zmq::sockopt::zap_domain, kZapDomain);
  }
}

void SecureClient(zmq::socket_t& s) {
  if (const CurveKeys* k = g_curve.load()) {
    s.set(zmq::sockopt::curve_serverkey, k->public_key);
    s.set(zmq::sockopt::curve_publickey, k->public_key);
    s.set(zmq::sockopt::curve_secretkey, k->secret_key);
  }
}

// "10.78.0.3" from a message's metadata ("" when it has none).
std::string PeerAddress(zmq::message_t& m) {
  const char* a = zmq_msg_gets(m.handle(), "Peer-Address");
  return a ? a : "";
}

// ZeroMQ's authentication handler (RFC 27, ZAP) for domain "laminar" on `rep`, bound by the caller
// before any socket could ask (libzmq lets every key in while nothing listens there): accepts a
// CURVE client whose key is the run's, refuses any other with a log line naming its address. It
// answers every request, and a handler that fails ends the process: without it the keys would no
// longer be checked.
void ZapLoop(std::unique_ptr<zmq::socket_t> socket, std::string public_key) {
  uint8_t want[32];
  zmq_z85_decode(want, public_key.c_str());
  std::map<std::string, int64_t> refusals;  // by address: the log says the first few of each
  try {
    zmq::socket_t& rep = *socket;
    while (true) {
      std::vector<zmq::message_t> f;
      do {
        zmq::message_t m;
        (void)rep.recv(m, zmq::recv_flags::none);
        f.push_back(std::move(m));
      } while (f.back().more());
      if (f.size() < 6) {  // not a ZAP request: refused, and answered (REP must)
        rep.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
        rep.send(zmq::buffer(f.size() > 1 ? f[1].to_string() : std::string()),
                 zmq::send_flags::sndmore);
        rep.send(zmq::str_buffer("400"), zmq::send_flags::sndmore);
        rep.send(zmq::str_buffer("malformed request"), zmq::send_flags::sndmore);
        rep.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
        rep.send(zmq::str_buffer(""), zmq::send_flags::none);
        continue;
      }
      const std::string address = f[3].to_string();
      const std::string mechanism = f[5].to_string();
      const bool ok = mechanism == "CURVE" && f.size() >= 7 && f[6].size() == 32 &&
                      std::memcmp(f[6].data(), want, 32) == 0;
      std::string why;
      if (!ok) {
        char key[41] = {};
        if (mechanism == "CURVE" && f.size() >= 7 && f[6].size() == 32) {
          zmq_z85_encode(key, static_cast<const uint8_t*>(f[6].data()), 32);
          why = std::string("its CURVE key ") + key + " is not this run's";
        } else {
          why = "mechanism " + mechanism + " instead of CURVE";
        }
        const int64_t n = ++refusals[address];
        if (n <= 3 || n % 100 == 0) {
          LAMINAR_LOG(WARN, NET) << "refused a ZeroMQ connection from " << address << ": " << why
                                 << " (run.keys; " << n << " refusal(s) from it so far)";
        }
      }
      rep.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
      rep.send(f[1], zmq::send_flags::sndmore);
      rep.send(zmq::buffer(std::string(ok ? "200" : "400")), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(ok ? std::string("OK") : why), zmq::send_flags::sndmore);
      rep.send(zmq::buffer(std::string(ok ? "run" : "")), zmq::send_flags::sndmore);
      rep.send(zmq::str_buffer(""), zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == ETERM) return;  // the process is exiting
    LAMINAR_LOG(ERROR, NET) << "ZeroMQ authentication handler failed: " << e.what()
                            << "; stopping, since clients could no longer be checked";
    std::abort();
  }
}

Status CheckKeys(const CurveKeys& k, const std::string& where) {
  for (const auto& [name, key] : {std::pair{"public", &k.public_key}, {"secret", &k.secret_key}}) {
    uint8_t bin[32];
    if (key->size() != kZ85KeyChars || zmq_z85_decode(bin, key->c_str()) == nullptr) {
      return InvalidArgumentError(where + ": the " + name + " key is not " +
                                  std::to_string(kZ85KeyChars) + " characters of Z85");
    }
  }
  char derived[41] = {};
  if (zmq_curve_public(derived, k.secret_key.c_str()) != 0 || k.public_key != derived) {
    return InvalidArgumentError(where + ": the public key is not the secret key's");
  }
  return OkStatus();
}

}  // namespace

zmq::context_t& ZmqContext() {
  static zmq::context_t context(1);
  return context;
}

StatusOr<CurveKeys> GenerateCurveKeys() {
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return InternalError(std::string("cannot make CURVE keys: ") + zmq_strerror(zmq_errno()) +
                         " (ZeroMQ built without CURVE?)");
  }
  return CurveKeys{.public_key = pub, .secret_key = sec};
}

Status WriteCurveKeys(const CurveKeys& keys, const std::string& path) {
  LAMINAR_RETURN_IF_ERROR(CheckKeys(keys, path));
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return AlreadyExistsError(path + " exists; keys are never overwritten");
    return UnavailableError("cannot write " + path + ": " + std::strerror(errno));
  }
  const std::string text =
      "# laminar run keys (ZeroMQ CURVE, Z85): every role of the run reads this file (run.keys).\n"
      "# Keep it secret: whoever holds it can join the run.\n"
      "public = " +
      keys.public_key + "\nsecret = " + keys.secret_key + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = close(fd) == 0;
  if (!ok || !closed) return UnavailableError("cannot write " + path + ": " + std::strerror(errno));
  return OkStatus();
}

StatusOr<CurveKeys> ReadCurveKeys(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("run keys " + path + ": cannot open it");
  CurveKeys k;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(" \t\r"));
      s.erase(s.find_last_not_of(" \t\r") + 1);
      return s;
    };
    const std::string name = trim(line.substr(0, eq));
    if (eq == std::string::npos || (name != "public" && name != "secret")) {
      return InvalidArgumentError("run keys " + path + " line " + std::to_string(n) +
                                  ": expected 'public = KEY' or 'secret = KEY'");
    }
    (name == "public" ? k.public_key : k.secret_key) = trim(line.substr(eq + 1));
  }
  if (k.public_key.empty() || k.secret_key.empty()) {
    return InvalidArgumentError("run keys " + path + ": needs both a public and a secret key " +
                                "(make them with `laminar keys FILE`)");
  }
  LAMINAR_RETURN_IF_ERROR(CheckKeys(k, "run keys " + path));
  return k;
}

Status EnableCurve(const CurveKeys& keys) {
  LAMINAR_RETURN_IF_ERROR(CheckKeys(keys, "run keys"));
  static Mutex mu;
  MutexLock lock(&mu);
  if (const CurveKeys* k = g_curve.load()) {
    if (k->public_key == keys.public_key && k->secret_key == keys.secret_key) return OkStatus();
    return FailedPreconditionError("CURVE is enabled already, with other keys");
  }
  // Bound here, before any socket uses the keys; the thread takes the socket over.
  auto rep = std::make_unique<zmq::socket_t>(ZmqContext(), zmq::socket_type::rep);
  try {
    rep->set(zmq::sockopt::linger, 0);
    rep->bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return ZmqError("cannot start the authentication handler", e);
  }
  std::thread(ZapLoop, std::move(rep), keys.public_key).detach();
  g_curve.store(new CurveKeys(keys));
  LAMINAR_LOG(INFO, NET) << "ZeroMQ connections are authenticated and encrypted with CURVE (public "
                         << "key " << keys.public_key << ")";
  return OkStatus();
}

bool CurveEnabled() { return g_curve.load() != nullptr; }

ZmqRequestClient::ZmqRequestClient(std::string endpoint) : endpoint_(std::move(endpoint)) {}
ZmqRequestClient::~ZmqRequestClient() = default;

Status ZmqRequestClient::Connect() {
  try {
    socket_ = std::make_unique<zmq::socket_t>(ZmqContext(), zmq::socket_type::dealer);
    socket_->set(zmq::sockopt::linger, 0);
    SecureClient(*socket_);
    socket_->connect(endpoint_);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return ZmqError("cannot connect to " + endpoint_, e);
  }
  return OkStatus();
}

StatusOr<std::string> ZmqRequestClient::Call(std::string_view request, int timeout_ms,
                                             int attempts) {
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (!socket_) LAMINAR_RETURN_IF_ERROR(Connect());
    const std::string id = IdBytes(next_id_++);
    try {
      MessageSent();
      socket_->send(zmq::buffer(id), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(request.data(), request.size()), zmq::send_flags::none);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
      while (true) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        if (left <= 0) break;
        zmq::pollitem_t item{static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(left));
        if (!(item.revents & ZMQ_POLLIN)) continue;
        auto frames = RecvMultipart(*socket_);
        MessageReceived();
        if (frames.size() == 2 && frames[0].to_string_view() == id) return frames[1].to_string();
        // A late reply to an earlier attempt, or junk: drop it and keep waiting.
      }
    } catch (const zmq::error_t& e) {
      socket_.reset();
      return ZmqError("request to " + endpoint_, e);
    }
    // Timed out: a fresh socket, so that nothing queued for a dead peer is resent later.
    socket_.reset();
  }
  return DeadlineExceededError("no reply from " + endpoint_ + " within " +
                               std::to_string(timeout_ms) + " ms, " + std::to_string(attempts) +
                               " attempt(s)");
}

StatusOr<std::unique_ptr<ZmqReplyServer>> ZmqReplyServer::Start(const std::string& endpoint,
                                                                Handler handler) {
  std::unique_ptr<ZmqReplyServer> s(new ZmqReplyServer());
  s->handler_ = std::move(handler);
  try {
    s->socket_ = std::make_unique<zmq::socket_t>(ZmqContext(), zmq::socket_type::router);
    s->socket_->set(zmq::sockopt::linger, 0);
    SecureServer(*s->socket_);
    if (CurveEnabled()) {
      // Handshakes that fail (a client without CURVE, or with a key the handler refuses) are
      // reported on a monitor socket, read by the server loop and logged.
      static std::atomic<uint64_t> next_monitor{0};
      const std::string monitor = "inproc://laminar-zmq-monitor-" + std::to_string(next_monitor++);
      if (zmq_socket_monitor(s->socket_->handle(), monitor.c_str(),
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0) {
        s->monitor_ = std::make_unique<zmq::socket_t>(ZmqContext(), zmq::socket_type::pair);
        s->monitor_->set(zmq::sockopt::linger, 0);
        s->monitor_->connect(monitor);
      }
    }
    s->socket_->bind(endpoint);
    s->endpoint_ = s->socket_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError("cannot bind " + endpoint, e);
  }
  s->thread_ = std::thread([raw = s.get()] { raw->Loop(); });
  return s;
}

ZmqReplyServer::~ZmqReplyServer() { Stop(); }

void ZmqReplyServer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (monitor_ && socket_) {
    zmq_socket_monitor(socket_->handle(), nullptr, 0);
    monitor_.reset();
  }
}

void ZmqReplyServer::LogHandshakeFailure() {
  // ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH (zmq.h): the peer greeted with another mechanism.
  constexpr uint32_t kMechanismMismatch = 0x11000002;
  auto frames = RecvMultipart(*monitor_);
  if (frames.size() < 2 || frames[0].size() < 6) return;
  uint16_t event = 0;
  uint32_t value = 0;
  std::memcpy(&event, frames[0].data(), 2);
  std::memcpy(&value, static_cast<const char*>(frames[0].data()) + 2, 4);
  const int64_t n = ++handshake_failures_;
  if (n > 3 && n % 100 != 0) return;
  LAMINAR_LOG(WARN, NET) << endpoint_ << ": refused a connection whose ZeroMQ handshake failed ("
                         << (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ? "authentication refused"
                             : event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL
                                 ? (value == kMechanismMismatch
                                        ? std::string("the client does not use CURVE")
                                        : "protocol error " + std::to_string(value))
                                 : std::string("no detail"))
                         << "; " << n << " so far; run.keys)";
}

void ZmqReplyServer::Loop() {
  while (!stop_) {
    try {
      zmq::pollitem_t items[2] = {
          {static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0},
          {monitor_ ? static_cast<void*>(*monitor_) : nullptr, 0, ZMQ_POLLIN, 0}};
      zmq::poll(items, monitor_ ? 2 : 1, std::chrono::milliseconds(kPollSliceMs));
      if (monitor_ && (items[1].revents & ZMQ_POLLIN)) LogHandshakeFailure();
      if (!(items[0].revents & ZMQ_POLLIN)) continue;
      auto frames = RecvMultipart(*socket_);
      MessageReceived();
      if (frames.size() != 3) {
        LAMINAR_LOG(WARN, NET) << endpoint_ << ": dropped a request of " << frames.size()
                               << " frames (expected identity, id, body)";
        continue;
      }
      std::string peer = "zmq-peer-";  // the routing id, printable (it names peers in errors)
      for (uint8_t b : frames[0].to_string_view()) peer += fmt::format("{:02x}", b);
      if (const std::string address = PeerAddress(frames[2]); !address.empty()) {
        peer += " at " + address;
      }
      if (CurveEnabled()) peer += " (CURVE)";  // it passed the handshake with the run's key
      std::string reply = handler_(frames[2].to_string_view(), peer);
      MessageSent();
      socket_->send(zmq::buffer(frames[0].to_string_view()), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(frames[1].to_string_view()), zmq::send_flags::sndmore);
      socket_->send(zmq::buffer(reply), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      LAMINAR_LOG(ERROR, NET) << endpoint_ << ": " << e.what();
    }
  }
}

StatusOr<std::unique_ptr<ZmqPush>> ZmqPush::Connect(const std::string& endpoint,
                                                    int queue_messages) {
  std::unique_ptr<ZmqPush> p(new ZmqPush());
  p->endpoint_ = endpoint;
  try {
    p->socket_ = std::make_unique<zmq::socket_t>(ZmqContext(), zmq::socket_type::push);
    p->socket_->set(zmq::sockopt::sndhwm, queue_messages);
    p->socket_->set(zmq::sockopt::linger, 0);
    SecureClient(*p->socket_);
    p->socket_->connect(endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError("cannot connect to " + endpoint, e);
  }
  return p;
}

ZmqPush::~ZmqPush() = default;

Status ZmqPush::Send(std::string_view message, int timeout_ms) {
  return SendGather({message}, timeout_ms);
}

Status ZmqPush::SendGather(std::initializer_list<std::string_view> parts, int timeout_ms) {
  size_t total = 0;
  for (std::string_view p : parts) total += p.size();
  try {
    zmq::message_t msg(total);  // the one copy: ZeroMQ owns the message from here on
    auto* out = static_cast<char*>(msg.data());
    for (std::string_view p : parts) {
      if (!p.empty()) std::memcpy(out, p.data(), p.size());
      out += p.size();
    }
    socket_->set(zmq::sockopt::sndtimeo, timeout_ms);
    MessageSent();
    if (!socket_->send(msg, zmq::send_flags::none)) {
      return DeadlineExceededError("send to " + endpoint_ + " blocked for " +
                                   std::to_string(timeout_ms) + " ms");
    }
  } catch (const zmq::error_t& e) {
    return ZmqError("send to " + endpoint_, e);
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<ZmqPull>> ZmqPull::Bind(const std::string& endpoint, int queue_messages) {
  std::unique_ptr<ZmqPull> p(new ZmqPull());
  try {
    p->socket_ = std::make_unique<zmq::socket_t>(ZmqContext(), zmq::socket_type::pull);
    p->socket_->set(zmq::sockopt::rcvhwm, queue_messages);
    p->socket_->set(zmq::sockopt::linger, 0);
    SecureServer(*p->socket_);
    p->socket_->bind(endpoint);
    p->endpoint_ = p->socket_->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return ZmqError("cannot bind " + endpoint, e);
  }
  return p;
}

ZmqPull::~ZmqPull() = default;

StatusOr<std::string> ZmqPull::Receive(int timeout_ms) {
  try {
    socket_->set(zmq::sockopt::rcvtimeo, timeout_ms);
    zmq::message_t msg;
    if (!socket_->recv(msg, zmq::recv_flags::none)) {
      return DeadlineExceededError("nothing on " + endpoint_ + " within " +
                                   std::to_string(timeout_ms) + " ms");
    }
    MessageReceived();
    return msg.to_string();
  } catch (const zmq::error_t& e) {
    return ZmqError("receive on " + endpoint_, e);
  }
}

}  // namespace laminar
