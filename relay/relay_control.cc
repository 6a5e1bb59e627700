// The relay's control plane: pings, latest-version queries, pulls and resends on every relay;
// joins, leaves, completions and the chain on the master. See relay.h.
#include <algorithm>
#include <string>
#include <vector>

#include "core/host.h"
#include "core/logging.h"
#include "proto/codec.h"
#include "relay/relay.h"
#include "relay/relay_internal.h"

namespace laminar::relay {

std::string Relay::HandleRequest(std::string_view request, std::string_view peer) {
  proto::RelayReply reply;
  if (!serving_.load(std::memory_order_acquire)) {
    reply.mutable_header()->set_sender("relay/" + options_.id);
    reply.set_error("relay " + options_.id + " is starting; ask again");
    reply.set_latest_complete_version(-1);
    reply.set_inflight_version(-1);
    return proto::Encode(reply);
  }
  auto decoded = proto::Decode<proto::RelayRequest>(request, "control peer " + std::string(peer));
  if (!decoded.ok()) {
    LAMINAR_LOG(WARN, RELAY) << options_.id << ": " << decoded.status();
    reply.set_error(decoded.status().message());
  } else {
    if (decoded->has_pull()) {
      // Bulk sends start only from a request that came through this socket: with run.keys, one
      // that passed the CURVE handshake, and `peer` says so and where it came from.
      LAMINAR_LOG(DEBUG, RELAY) << options_.id << ": pull by " << decoded->header().sender()
                                << " from " << peer << " to " << decoded->pull().bulk_address();
    }
    reply = HandleRequestImpl(*decoded);
  }
  reply.mutable_header()->set_sender("relay/" + options_.id);
  return proto::Encode(reply);
}

proto::RelayReply Relay::HandleRequestImpl(const proto::RelayRequest& request) {
  proto::RelayReply reply;
  reply.set_host(info_.host());
  reply.set_bulk_address(info_.bulk_address());
  {
    MutexLock lock(&mu_);
    reply.set_latest_complete_version(newest_ ? newest_->version() : -1);
    if (newest_) reply.set_shm_name(newest_->shm->name());
    reply.set_inflight_version(inflight_ ? inflight_->version() : -1);
    reply.set_inflight_chunks(inflight_ ? inflight_->assembler->num_present() : 0);
  }
  switch (request.kind_case()) {
    case proto::RelayRequest::kPing:
      last_ping_ms_ = SteadyNowMs();
      break;
    case proto::RelayRequest::kLatest:
      break;
    case proto::RelayRequest::kPull:
      HandlePull(request.pull(), &reply);
      break;
    case proto::RelayRequest::kResend:
      HandleResend(request.resend(), &reply);
      break;
    case proto::RelayRequest::kJoin:
    case proto::RelayRequest::kComplete:
    case proto::RelayRequest::kLeave:
    case proto::RelayRequest::kChain:
      if (!is_master()) {
        reply.set_error("relay " + options_.id + " is not the master");
        break;
      }
      HandleChainRequest(request, &reply);
      break;
    case proto::RelayRequest::KIND_NOT_SET:
      reply.set_error("no request kind");
      break;
  }
  return reply;
}

void Relay::HandlePull(const proto::PullRequest& pull, proto::RelayReply* reply) {
  MutexLock lock(&mu_);
  const int64_t want = pull.version();
  if (!newest_ || (want != 0 && want != newest_->version())) {
    reply->set_error("version " + std::to_string(want) + " is not complete here (newest: " +
                     std::to_string(newest_ ? newest_->version() : -1) + ")");
    return;
  }
  // Pulls queue behind each other; past a few versions' worth, a rollout is better served by
  // another relay (RelayClient moves on when refused) than by waiting here.
  const size_t num_chunks = newest_->assembler->manifest().num_chunks();
  if (serve_sender_->queued() > options_.max_queued_pulls * (num_chunks + 1)) {
    reply->set_error("relay " + options_.id + " is busy serving " +
                     std::to_string(serve_sender_->queued()) + " queued chunks; try another");
    reply->set_retry_after_ms(static_cast<uint32_t>(options_.busy_retry_ms));
    pulls_refused_busy_.fetch_add(1);
    return;
  }
  pulls_served_.fetch_add(1);
  std::vector<uint32_t> all(num_chunks);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  ServeLocked(newest_, pull.bulk_address(), all, /*with_header=*/true);
}

void Relay::HandleResend(const proto::ResendRequest& resend, proto::RelayReply* reply) {
  MutexLock lock(&mu_);
  const int64_t v = resend.version();
  std::shared_ptr<Slot> slot = newest_ && newest_->version() == v       ? newest_
                               : inflight_ && inflight_->version() == v ? inflight_
                                                                        : nullptr;
  if (!slot) {
    reply->set_error("version " + std::to_string(v) + " is not held here");
    return;
  }
  std::vector<uint32_t> chunks(resend.chunks().begin(), resend.chunks().end());
  // Without the manifest the requester cannot use chunks: send it first when it has none.
  ServeLocked(slot, resend.bulk_address(), chunks, /*with_header=*/true);
}

void Relay::HandleChainRequest(const proto::RelayRequest& request, proto::RelayReply* reply) {
  MutexLock chain_lock(&chain_mu_);
  if (request.has_join()) {
    HandleJoinLocked(request.join().relay(), reply);
  } else if (request.has_leave()) {
    const auto gone = std::erase_if(
        chain_, [&](const auto& m) { return m->info.id() == request.leave().relay_id(); });
    if (gone > 0) {
      completions_.erase(request.leave().relay_id());
      ++chain_rebuilds_;
      chain_changed_ = true;  // the monitor re-routes whoever still lacks the version
      LAMINAR_LOG(INFO, RELAY) << "relay " << request.leave().relay_id() << " left the chain";
    }
  } else if (request.has_complete()) {
    completions_[request.complete().relay_id()] = request.complete().version();
    for (auto& m : chain_) {
      if (m->info.id() == request.complete().relay_id()) {
        m->complete_version = std::max(m->complete_version, request.complete().version());
      }
    }
  } else {
    for (const auto& m : chain_) *reply->add_chain() = m->info;
    for (const auto& [id, v] : completions_) {
      auto* c = reply->add_completions();
      c->set_relay_id(id);
      c->set_version(v);
    }
    reply->set_chain_rebuilds(chain_rebuilds_);
  }
}

void Relay::HandleJoinLocked(const proto::RelayInfo& info, proto::RelayReply* reply) {
  const bool same = std::any_of(chain_.begin(), chain_.end(), [&](const auto& m) {
    return m->info.SerializeAsString() == info.SerializeAsString();
  });
  if (same) return;  // joining twice changes nothing
  const auto scheme = [](const std::string& a) { return a.substr(0, a.find("://")); };
  if (scheme(info.bulk_address()) != scheme(info_.bulk_address())) {
    reply->set_error("relay " + info.id() + " sends over " + info.bulk_address() +
                     " but this tier uses " + scheme(info_.bulk_address()) +
                     " (start every relay with the same --transport)");
    LAMINAR_LOG(WARN, RELAY) << reply->error();
    return;
  }
  auto live = std::find_if(chain_.begin(), chain_.end(), [&](const auto& m) {
    return m->info.id() == info.id() && m->failures == 0;
  });
  if (live != chain_.end()) {
    reply->set_error("relay id " + info.id() + " is taken by the relay at " +
                     (*live)->info.control_endpoint() + ", which answers pings");
    LAMINAR_LOG(WARN, RELAY) << reply->error();
    return;
  }
  // The same id from new endpoints: a relay that restarted; the old entry is dead.
  std::erase_if(chain_, [&](const auto& m) { return m->info.id() == info.id(); });
  auto member = std::make_unique<Member>();
  member->info = info;
  member->last_progress_ms = SteadyNowMs();
  chain_.push_back(std::move(member));
  LAMINAR_LOG(INFO, RELAY) << "relay " << info.id() << " joined the chain at position "
                           << chain_.size();
}

}  // namespace laminar::relay
