// ZeroMQ bulk transport and the fault-injecting wrapper.
#include "core/bulk_transport.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace laminar {

StatusOr<std::unique_ptr<ZmqBulkTransport>> ZmqBulkTransport::Create(
    const std::string& bind_endpoint) {
  std::unique_ptr<ZmqBulkTransport> t(new ZmqBulkTransport());
  LAMINAR_ASSIGN_OR_RETURN(t->pull_, ZmqPull::Bind(bind_endpoint));
  return t;
}

Status ZmqBulkTransport::Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
                              int timeout_ms) {
  ZmqPush* push = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = pushes_[peer];
    if (!slot) {
      auto created = ZmqPush::Connect(peer);
      if (!created.ok()) {
        pushes_.erase(peer);
        return created.status();
      }
      slot = std::move(*created);
    }
    push = slot.get();
  }
  std::string frame(sizeof(tag) + bytes.size(), '\0');
  std::memcpy(frame.data(), &tag, sizeof(tag));
  if (!bytes.empty()) std::memcpy(frame.data() + sizeof(tag), bytes.data(), bytes.size());
  return push->Send(frame, timeout_ms);
}

StatusOr<BulkMessage> ZmqBulkTransport::Receive(int timeout_ms) {
  auto received = pull_->Receive(timeout_ms);
  if (!received.ok()) return received.status();
  const std::string& frame = *received;
  if (frame.size() < sizeof(uint64_t)) {
    return DataLossError("bulk message on " + address() + " of " + std::to_string(frame.size()) +
                         " bytes has no tag");
  }
  BulkMessage m;
  std::memcpy(&m.tag, frame.data(), sizeof(m.tag));
  m.bytes = frame.substr(sizeof(m.tag));
  return m;
}

FaultyTransport::FaultyTransport(std::unique_ptr<BulkTransport> inner, FaultOptions options)
    : inner_(std::move(inner)), options_(options), rng_(options.seed) {}

Status FaultyTransport::Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
                             int timeout_ms) {
  if (killed_) return UnavailableError(address() + " was killed (FaultyTransport)");
  if (options_.delay_ms > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.delay_ms));
  std::uniform_real_distribution<double> u(0, 1);
  if (u(rng_) < options_.drop_probability) {
    ++dropped_;
    return OkStatus();  // lost on the wire: the sender does not know
  }
  if (!bytes.empty() && u(rng_) < options_.corrupt_probability) {
    std::string copy(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    copy[rng_() % copy.size()] ^= 0x5a;
    ++corrupted_;
    return inner_->Send(peer, tag, {reinterpret_cast<const uint8_t*>(copy.data()), copy.size()},
                        timeout_ms);
  }
  return inner_->Send(peer, tag, bytes, timeout_ms);
}

StatusOr<BulkMessage> FaultyTransport::Receive(int timeout_ms) {
  if (killed_) return UnavailableError(address() + " was killed (FaultyTransport)");
  return inner_->Receive(timeout_ms);
}

void FaultyTransport::Kill() { killed_ = true; }

StatusOr<std::unique_ptr<BulkTransport>> CreateBulkTransport(std::string_view kind,
                                                             const std::string& host) {
  if (kind == "zmq") {
    LAMINAR_ASSIGN_OR_RETURN(auto t, ZmqBulkTransport::Create("tcp://" + host + ":*"));
    return std::unique_ptr<BulkTransport>(std::move(t));
  }
  return InvalidArgumentError("bulk transport '" + std::string(kind) + "'; choices: zmq");
}

}  // namespace laminar
