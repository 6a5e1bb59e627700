// ZeroMQ bulk transport, the factory by name, and the fault-injecting wrapper.
#include "core/bulk_transport.h"

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/ucx_transport.h"

namespace laminar {

namespace {

struct BulkTransportKind {
  std::string_view name;
  StatusOr<std::unique_ptr<BulkTransport>> (*create)(const std::string& host);
};

template <typename T>
StatusOr<std::unique_ptr<BulkTransport>> Upcast(StatusOr<std::unique_ptr<T>> created) {
  if (!created.ok()) return created.status();
  return std::unique_ptr<BulkTransport>(std::move(*created));
}

constexpr std::array<BulkTransportKind, 2> kBulkTransportKinds = {{
    {"ucx", [](const std::string& host) { return Upcast(UcxBulkTransport::Create(host)); }},
    {"zmq",
     [](const std::string& host) {
       bool v6 = host.find(':') != std::string::npos;
       return Upcast(ZmqBulkTransport::Create("tcp://" + (v6 ? "[" + host + "]" : host) + ":*"));
     }},
}};

}  // namespace

StatusOr<std::unique_ptr<BulkTransport>> CreateBulkTransport(std::string_view kind,
                                                             const std::string& host) {
  std::string choices;
  for (const auto& k : kBulkTransportKinds) {
    if (k.name == kind) return k.create(host);
    choices += (choices.empty() ? "" : ", ") + std::string(k.name);
  }
  return InvalidArgumentError("unknown bulk transport '" + std::string(kind) +
                              "' (choices: " + choices + ")");
}

StatusOr<std::unique_ptr<ZmqBulkTransport>> ZmqBulkTransport::Create(
    const std::string& bind_endpoint) {
  std::unique_ptr<ZmqBulkTransport> t(new ZmqBulkTransport());
  LAMINAR_ASSIGN_OR_RETURN(t->pull_, ZmqPull::Bind(bind_endpoint, kQueueMessages));
  return t;
}

Status ZmqBulkTransport::Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
                              int timeout_ms) {
  ZmqPush* push = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = pushes_[peer];
    if (!slot) {
      auto created = ZmqPush::Connect(peer, kQueueMessages);
      if (!created.ok()) {
        pushes_.erase(peer);
        return created.status();
      }
      slot = std::move(*created);
    }
    push = slot.get();
  }
  // The tag goes last, so that the receiver can drop it without moving the payload.
  return push->SendGather({{reinterpret_cast<const char*>(bytes.data()), bytes.size()},
                           {reinterpret_cast<const char*>(&tag), sizeof(tag)}},
                          timeout_ms);
}

StatusOr<BulkMessage> ZmqBulkTransport::Receive(int timeout_ms) {
  auto received = pull_->Receive(timeout_ms);
  if (!received.ok()) return received.status();
  BulkMessage m;
  m.bytes = std::move(*received);
  if (m.bytes.size() < sizeof(uint64_t)) {
    return DataLossError("bulk message on " + address() + " of " + std::to_string(m.bytes.size()) +
                         " bytes has no tag");
  }
  std::memcpy(&m.tag, m.bytes.data() + m.bytes.size() - sizeof(m.tag), sizeof(m.tag));
  m.bytes.resize(m.bytes.size() - sizeof(m.tag));
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
  std::string copy;
  std::span<const uint8_t> payload = bytes;
  if (!bytes.empty() && u(rng_) < options_.corrupt_probability) {
    copy.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    copy[rng_() % copy.size()] ^= 0x5a;
    ++corrupted_;
    payload = {reinterpret_cast<const uint8_t*>(copy.data()), copy.size()};
  }
  // The random draw happens only when reordering is on, so other faults keep their sequence.
  if (!held_ && options_.reorder_probability > 0 && u(rng_) < options_.reorder_probability) {
    held_ =
        Held{peer, tag, std::string(reinterpret_cast<const char*>(payload.data()), payload.size())};
    return OkStatus();  // goes out after the next message
  }
  Status st = inner_->Send(peer, tag, payload, timeout_ms);
  if (held_) ++reordered_;
  Status held = FlushHeld(timeout_ms);
  return st.ok() ? held : st;
}

Status FaultyTransport::FlushHeld(int timeout_ms) {
  if (!held_) return OkStatus();
  if (killed_) return UnavailableError(address() + " was killed (FaultyTransport)");
  Held h = std::move(*held_);
  held_.reset();
  return inner_->Send(h.peer, h.tag,
                      {reinterpret_cast<const uint8_t*>(h.bytes.data()), h.bytes.size()},
                      timeout_ms);
}

StatusOr<BulkMessage> FaultyTransport::Receive(int timeout_ms) {
  if (killed_) return UnavailableError(address() + " was killed (FaultyTransport)");
  return inner_->Receive(timeout_ms);
}

void FaultyTransport::Kill() {
  killed_ = true;
  held_.reset();
}

}  // namespace laminar
