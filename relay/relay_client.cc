// Rollout-side pulls: shared memory on the relay's machine, the bulk transport elsewhere.
#include "relay/relay_client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "core/host.h"
#include "core/logging.h"
#include "proto/codec.h"
#include "relay/chunk_assembler.h"
#include "relay/wire.h"

namespace laminar::relay {
StatusOr<std::span<const uint8_t>> PulledVersion::Tensor(const std::string& name) const {
  for (const auto& t : manifest_.tensors()) {
    if (t.name() == name) return data_.subspan(t.offset(), t.size_bytes());
  }
  return NotFoundError("tensor '" + name + "' is not in version " + std::to_string(version()));
}

StatusOr<std::unique_ptr<RelayClient>> RelayClient::Create(RelayClientOptions options) {
  if (options.relays.empty()) return InvalidArgumentError("relay client: no relay endpoints");
  for (const auto& r : options.relays) {
    if (r.empty()) return InvalidArgumentError("relay client: an empty relay endpoint");
  }
  std::unique_ptr<RelayClient> c(new RelayClient(std::move(options)));
  c->hostname_ = Hostname();
  return c;
}

StatusOr<std::string> RelayClient::Call(const std::string& relay, const std::string& request) {
  auto& client = clients_[relay];
  if (!client) client = std::make_unique<ZmqRequestClient>(relay);
  auto reply = client->Call(request, options_.request_timeout_ms, 1);
  if (!reply.ok()) clients_.erase(relay);  // a fresh socket next time
  return reply;
}

StatusOr<int64_t> RelayClient::LatestVersion() {
  proto::RelayRequest r;
  r.mutable_latest();
  r.mutable_header()->set_sender("rollout/" + options_.id);
  const std::string request = proto::Encode(r);
  std::string errors;
  for (size_t k = 0; k < options_.relays.size(); ++k) {
    const size_t i = (current_ + k) % options_.relays.size();
    auto bytes = Call(options_.relays[i], request);
    StatusOr<proto::RelayReply> reply =
        bytes.ok() ? proto::Decode<proto::RelayReply>(*bytes, options_.relays[i])
                   : StatusOr<proto::RelayReply>(bytes.status());
    if (reply.ok()) {
      current_ = i;
      return reply->latest_complete_version();
    }
    errors += "; " + reply.status().ToString();
  }
  return UnavailableError("no relay answered" + errors);
}

StatusOr<std::shared_ptr<const PulledVersion>> RelayClient::PullLatest(int64_t newer_than) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t deadline =
      SteadyNowMs() + std::min(options_.busy_wait_ms, options_.pull_timeout_ms);
  std::minstd_rand jitter(static_cast<uint32_t>(getpid()) ^
                          static_cast<uint32_t>(start.time_since_epoch().count()));
  int64_t busy_waits = 0;
  while (true) {
    std::string errors;
    uint32_t retry_after_ms = 0;  // > 0: some relay was only busy (back-pressure): ask again
    for (size_t k = 0; k < options_.relays.size(); ++k) {
      const size_t i = (current_ + k) % options_.relays.size();
      auto pulled = PullFrom(options_.relays[i], newer_than);
      if (pulled.ok()) {
        auto v = std::const_pointer_cast<PulledVersion>(*pulled);
        v->pull_wait_s_ =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        v->busy_waits_ = busy_waits;
      }
      if (pulled.ok() || pulled.status().code() == StatusCode::kNotFound) {
        current_ = i;
        return pulled;
      }
      if (pulled.status().code() == StatusCode::kResourceExhausted) {
        retry_after_ms = std::max({retry_after_ms, busy_retry_ms_, 1u});
        errors += "; " + pulled.status().ToString();
        continue;
      }
      LAMINAR_LOG(WARN, RELAY) << "rollout " << options_.id << ": relay " << options_.relays[i]
                               << " failed (" << pulled.status() << "); trying the next";
      errors += "; " + pulled.status().ToString();
    }
    if (retry_after_ms == 0) return UnavailableError("no relay could serve a version" + errors);
    if (SteadyNowMs() + retry_after_ms > deadline) {
      return ResourceExhaustedError("every relay that answered is busy; ask again later" + errors);
    }
    // Every relay that could serve is busy: wait its hint, jittered so that the refused pulls do
    // not all come back at once.
    ++busy_waits;
    std::uniform_int_distribution<uint32_t> wait(retry_after_ms / 2, retry_after_ms * 3 / 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait(jitter)));
    busy_retry_ms_ = 0;  // each round takes the hint of its own refusals
  }
}

StatusOr<std::shared_ptr<const PulledVersion>> RelayClient::PullFrom(const std::string& relay,
                                                                     int64_t newer_than) {
  proto::RelayRequest r;
  r.mutable_latest();
  r.mutable_header()->set_sender("rollout/" + options_.id);
  for (int attempt = 0; attempt < 3; ++attempt) {
    LAMINAR_ASSIGN_OR_RETURN(std::string bytes, Call(relay, proto::Encode(r)));
    LAMINAR_ASSIGN_OR_RETURN(proto::RelayReply reply,
                             proto::Decode<proto::RelayReply>(bytes, relay));
    const int64_t latest = reply.latest_complete_version();
    if (latest < 0 || latest <= newer_than) {
      return NotFoundError("relay " + relay + " has no version above " +
                           std::to_string(newer_than) + " (newest: " + std::to_string(latest) +
                           ")");
    }
    if (options_.allow_shm && reply.host() == hostname_ && !reply.shm_name().empty()) {
      auto shm = ShmVersion::OpenReadOnly(reply.shm_name());
      // Gone: superseded since the reply (ask again), or removed by hand (then pull over bulk).
      if (shm.status().code() == StatusCode::kNotFound && attempt < 2) continue;
      if (shm.ok()) {
        if (options_.verify_shm) LAMINAR_RETURN_IF_ERROR((*shm)->Verify());
        auto v = std::make_shared<PulledVersion>();
        v->manifest_ = (*shm)->manifest();
        v->data_ = (*shm)->data();
        v->shm_ = std::move(*shm);
        v->source_ = "shm";
        v->relay_ = relay;
        return std::shared_ptr<const PulledVersion>(std::move(v));
      }
      LAMINAR_LOG(WARN, RELAY) << "rollout " << options_.id << ": " << shm.status()
                               << "; pulling over the bulk transport instead";
    }
    LAMINAR_ASSIGN_OR_RETURN(auto v, PullBulk(relay, latest));
    return std::shared_ptr<const PulledVersion>(std::move(v));
  }
  return UnavailableError("relay " + relay + ": its newest version kept changing under us");
}

StatusOr<std::shared_ptr<PulledVersion>> RelayClient::PullBulk(const std::string& relay,
                                                               int64_t version) {
  if (!transport_) {
    LAMINAR_ASSIGN_OR_RETURN(transport_, CreateBulkTransport(options_.bulk_kind, options_.host));
  }
  proto::RelayRequest pull;
  pull.mutable_header()->set_sender("rollout/" + options_.id);
  pull.mutable_pull()->set_version(version);
  pull.mutable_pull()->set_bulk_address(transport_->address());
  auto send_pull = [&]() -> Status {
    LAMINAR_ASSIGN_OR_RETURN(std::string bytes, Call(relay, proto::Encode(pull)));
    LAMINAR_ASSIGN_OR_RETURN(proto::RelayReply reply,
                             proto::Decode<proto::RelayReply>(bytes, relay));
    if (reply.retry_after_ms() > 0) {  // busy: PullLatest asks again after the hint
      busy_retry_ms_ = std::min<uint32_t>(reply.retry_after_ms(), kMaxBusyRetryMs);
      return ResourceExhaustedError(relay + ": " + reply.error());
    }
    if (!reply.error().empty()) return FailedPreconditionError(relay + ": " + reply.error());
    return OkStatus();
  };
  LAMINAR_RETURN_IF_ERROR(send_pull());
  int64_t pull_sent_ms = SteadyNowMs();
  constexpr int64_t kRepullAfterMs = 5000;  // RelayOptions::send_timeout_ms's default
  auto v = std::make_shared<PulledVersion>();
  std::unique_ptr<ChunkAssembler> assembler;
  const int64_t deadline = SteadyNowMs() + options_.pull_timeout_ms;
  int64_t last_progress = SteadyNowMs();
  while (!assembler || !assembler->complete()) {
    if (SteadyNowMs() > deadline) {
      return DeadlineExceededError("pulling version " + std::to_string(version) + " from " + relay +
                                   ": " + std::to_string(assembler ? assembler->num_present() : 0) +
                                   " chunks after " + std::to_string(options_.pull_timeout_ms) +
                                   " ms");
    }
    if (SteadyNowMs() - last_progress > options_.stall_resend_ms) {
      last_progress = SteadyNowMs();
      if (!assembler) {
        // No manifest yet: the pull waits in the relay's queue behind others (a relay sending
        // to a peer gives up after its send timeout), so it is asked for again only after that
        // long, not at every stall; a busy refusal keeps the pull already queued.
        if (SteadyNowMs() - pull_sent_ms >= kRepullAfterMs) {
          pull_sent_ms = SteadyNowMs();
          if (Status st = send_pull(); !st.ok() && st.code() != StatusCode::kResourceExhausted) {
            return st;
          }
        }
      } else {
        proto::RelayRequest resend;
        resend.mutable_header()->set_sender("rollout/" + options_.id);
        resend.mutable_resend()->set_version(version);
        resend.mutable_resend()->set_bulk_address(transport_->address());
        for (uint32_t i : assembler->Missing()) resend.mutable_resend()->add_chunks(i);
        LAMINAR_RETURN_IF_ERROR(Call(relay, proto::Encode(resend)).status());
      }
    }
    auto m = transport_->Receive(50);
    if (!m.ok()) {
      if (m.status().code() == StatusCode::kDeadlineExceeded) continue;
      return m.status();
    }
    auto tag = DecodeTag(m->tag);
    if (!tag.ok() || tag->version != version) continue;  // left over from an earlier pull
    if (tag->kind == BulkKind::kBroadcast) {
      if (assembler) continue;
      LAMINAR_ASSIGN_OR_RETURN(auto b, proto::Decode<proto::RelayBroadcast>(m->bytes, relay));
      LAMINAR_ASSIGN_OR_RETURN(v->manifest_, proto::BroadcastManifest(b));
      v->heap_.assign(v->manifest_.total_bytes(), 0);
      assembler = std::make_unique<ChunkAssembler>(v->manifest_, v->heap_);
      last_progress = SteadyNowMs();
      continue;
    }
    if (!assembler) continue;  // before its manifest: asked for again when we stall
    auto accepted = assembler->Accept(
        tag->index, {reinterpret_cast<const uint8_t*>(m->bytes.data()), m->bytes.size()});
    if (accepted.ok() && *accepted) last_progress = SteadyNowMs();
    if (!accepted.ok()) {
      LAMINAR_LOG(WARN, RELAY) << "rollout " << options_.id << ": " << accepted.status();
    }
  }
  v->data_ = v->heap_;
  v->source_ = "bulk";
  v->relay_ = relay;
  return v;
}

}  // namespace laminar::relay
