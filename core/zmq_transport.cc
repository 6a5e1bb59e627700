// ZeroMQ helpers over cppzmq.
#include "core/zmq_transport.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <vector>
#include <zmq.hpp>

#include "core/logging.h"

namespace laminar {
namespace {

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

}  // namespace

zmq::context_t& ZmqContext() {
  static zmq::context_t context(1);
  return context;
}

ZmqRequestClient::ZmqRequestClient(std::string endpoint) : endpoint_(std::move(endpoint)) {}
ZmqRequestClient::~ZmqRequestClient() = default;

Status ZmqRequestClient::Connect() {
  try {
    socket_ = std::make_unique<zmq::socket_t>(ZmqContext(), zmq::socket_type::dealer);
    socket_->set(zmq::sockopt::linger, 0);
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
}

void ZmqReplyServer::Loop() {
  while (!stop_) {
    try {
      zmq::pollitem_t item{static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(kPollSliceMs));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      auto frames = RecvMultipart(*socket_);
      if (frames.size() != 3) {
        LAMINAR_LOG(WARN, NET) << endpoint_ << ": dropped a request of " << frames.size()
                               << " frames (expected identity, id, body)";
        continue;
      }
      std::string peer = "zmq-peer-";  // the routing id, printable (it names peers in errors)
      for (uint8_t b : frames[0].to_string_view()) peer += fmt::format("{:02x}", b);
      std::string reply = handler_(frames[2].to_string_view(), peer);
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
    return msg.to_string();
  } catch (const zmq::error_t& e) {
    return ZmqError("receive on " + endpoint_, e);
  }
}

}  // namespace laminar
