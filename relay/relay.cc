// The relay: receive, verify, store in shared memory, forward down the chain, serve pulls.
#include "relay/relay.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "core/host.h"
#include "core/logging.h"
#include "proto/codec.h"
#include "relay/wire.h"

namespace laminar::relay {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

StatusOr<Topology> ParseTopology(std::string_view name) {
  if (name == "chain") return Topology::kChain;
  if (name == "star") return Topology::kStar;
  return InvalidArgumentError("topology '" + std::string(name) + "'; choices: chain, star");
}

// One version this relay holds, with where it goes next.
struct Relay::Slot {
  std::unique_ptr<ShmVersion> shm;
  std::unique_ptr<ChunkAssembler> assembler;
  // (destination bulk address, the route it forwards to) for the current broadcast.
  std::vector<std::pair<std::string, std::vector<std::string>>> targets;
  uint64_t epoch = 0;
  uint64_t generation = 0;
  std::string upstream_control;
  int64_t last_progress_ms = 0;
  int64_t version() const { return shm->version(); }
};

// A relay in the master's chain.
struct Relay::Member {
  proto::RelayInfo info;
  int failures = 0;
  int64_t complete_version = -1;
  int64_t inflight_version = -1;
  uint32_t inflight_chunks = 0;
  int64_t last_progress_ms = 0;
  bool needs_version = true;  // joined since the last broadcast was routed to it
};

Relay::Relay(RelayOptions options) : options_(std::move(options)) {}

StatusOr<std::unique_ptr<Relay>> Relay::Start(RelayOptions options) {
  if (options.id.empty()) return InvalidArgumentError("relay id is empty");
  if (options.ping_interval_ms <= 0 || options.ping_timeout_ms <= 0 ||
      options.dead_after_failures <= 0 || options.send_timeout_ms <= 0 ||
      options.stall_resend_ms <= 0 || options.rebroadcast_after_ms <= 0 ||
      options.join_timeout_ms <= 0) {
    return InvalidArgumentError("relay " + options.id + ": timeouts and counts must be positive");
  }
  if (options.shm_prefix.empty()) {
    options.shm_prefix = "laminar-" + options.id + "-" + std::to_string(getpid());
  }
  if (options.shm_prefix.find('/') != std::string::npos) {
    return InvalidArgumentError("shm prefix '" + options.shm_prefix + "' contains '/'");
  }
  std::unique_ptr<Relay> relay(new Relay(std::move(options)));
  LAMINAR_RETURN_IF_ERROR(relay->Init(), "relay " + relay->options_.id);
  return relay;
}

Status Relay::Init() {
  if (options_.transport) {
    transport_ = std::move(options_.transport);
  } else {
    LAMINAR_ASSIGN_OR_RETURN(transport_, CreateBulkTransport(options_.bulk_kind, options_.host));
  }
  LAMINAR_ASSIGN_OR_RETURN(
      control_, ZmqReplyServer::Start(options_.control_endpoint,
                                      [this](std::string_view req, std::string_view peer) {
                                        return HandleRequest(req, peer);
                                      }));
  info_.set_id(options_.id);
  info_.set_control_endpoint(control_->endpoint());
  info_.set_bulk_address(transport_->address());
  info_.set_host(Hostname());
  chain_sender_ = std::make_unique<SendWorker>(options_.id + "/chain", transport_.get(), &send_mu_,
                                               options_.send_timeout_ms);
  serve_sender_ = std::make_unique<SendWorker>(options_.id + "/serve", transport_.get(), &send_mu_,
                                               options_.send_timeout_ms);
  last_ping_ms_ = SteadyNowMs();
  if (!is_master()) LAMINAR_RETURN_IF_ERROR(Join());
  receiver_ = std::thread([this] { ReceiveLoop(); });
  if (is_master()) monitor_ = std::thread([this] { MonitorLoop(); });
  LAMINAR_LOG(INFO, RELAY) << (is_master() ? "master relay " : "relay ") << options_.id
                           << " up: control " << info_.control_endpoint() << ", bulk "
                           << info_.bulk_address();
  return OkStatus();
}

Relay::~Relay() { Stop(); }

void Relay::Stop() {
  if (stop_.exchange(true)) return;
  if (!is_master() && receiver_.joinable()) {
    // Our own socket: clients_ belongs to the receiver thread, which is still running.
    ZmqRequestClient master(options_.master_endpoint);
    proto::RelayRequest leave;
    leave.mutable_header()->set_sender("relay/" + options_.id);
    leave.mutable_leave()->set_relay_id(options_.id);
    Status s = master.Call(proto::Encode(leave), 500, 1).status();
    if (!s.ok()) LAMINAR_LOG(WARN, RELAY) << options_.id << ": leaving the chain: " << s;
  }
  {
    // Names first: a send stuck on a dead peer may hold the threads below for a while, and a
    // process killed meanwhile must not leave segments behind. Mappings stay valid.
    std::lock_guard<std::mutex> lock(mu_);
    if (newest_) newest_->shm->Unlink();
    if (inflight_) inflight_->shm->Unlink();
  }
  stop_cv_.notify_all();
  if (control_) control_->Stop();
  if (receiver_.joinable()) receiver_.join();
  if (monitor_.joinable()) monitor_.join();
  if (chain_sender_) chain_sender_->Stop();
  if (serve_sender_) serve_sender_->Stop();
  std::lock_guard<std::mutex> lock(mu_);
  newest_.reset();
  inflight_.reset();
}

int64_t Relay::latest_complete_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return newest_ ? newest_->version() : -1;
}

std::vector<proto::RelayInfo> Relay::Chain() const {
  std::lock_guard<std::mutex> lock(chain_mu_);
  std::vector<proto::RelayInfo> out;
  for (const auto& m : chain_) out.push_back(m->info);
  return out;
}

uint64_t Relay::chain_rebuilds() const {
  std::lock_guard<std::mutex> lock(chain_mu_);
  return chain_rebuilds_;
}

StatusOr<proto::RelayReply> Relay::Call(const std::string& endpoint, const proto::RelayRequest& r,
                                        int timeout_ms, int attempts) {
  auto& client = clients_[endpoint];
  if (!client) client = std::make_unique<ZmqRequestClient>(endpoint);
  proto::RelayRequest request = r;
  request.mutable_header()->set_sender("relay/" + options_.id);
  LAMINAR_ASSIGN_OR_RETURN(std::string bytes,
                           client->Call(proto::Encode(request), timeout_ms, attempts));
  LAMINAR_ASSIGN_OR_RETURN(proto::RelayReply reply,
                           proto::Decode<proto::RelayReply>(bytes, endpoint));
  if (!reply.error().empty()) return FailedPreconditionError(endpoint + ": " + reply.error());
  return reply;
}

Status Relay::Join() {
  proto::RelayRequest r;
  *r.mutable_join()->mutable_relay() = info_;
  LAMINAR_RETURN_IF_ERROR(
      Call(options_.master_endpoint, r, std::max(1, options_.join_timeout_ms / 5), 5).status(),
      "joining the master at " + options_.master_endpoint);
  last_ping_ms_ = SteadyNowMs();
  return OkStatus();
}

// --- bulk plane ------------------------------------------------------------------------------

void Relay::ReceiveLoop() {
  while (!stop_) {
    auto m = transport_->Receive(50);
    if (m.ok()) {
      auto tag = DecodeTag(m->tag);
      if (!tag.ok()) {
        LAMINAR_LOG(WARN, RELAY) << options_.id << ": dropped a bulk message: " << tag.status();
      } else if (tag->kind == BulkKind::kBroadcast) {
        HandleBroadcast(m->bytes);
      } else {
        HandleChunk(tag->version, tag->index, m->bytes);
      }
    } else if (m.status().code() != StatusCode::kDeadlineExceeded) {
      LAMINAR_LOG(WARN, RELAY) << options_.id << ": receive failed: " << m.status();
      // A bad message from a peer costs nothing; a broken transport is not spun on.
      if (m.status().code() == StatusCode::kUnavailable) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    // Chunks lost on the way (dropped, or never sent by a dead upstream) are asked for again.
    std::shared_ptr<Slot> stalled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (inflight_ && !inflight_->upstream_control.empty() &&
          SteadyNowMs() - inflight_->last_progress_ms > options_.stall_resend_ms) {
        stalled = inflight_;
        stalled->last_progress_ms = SteadyNowMs();
      }
    }
    if (stalled) {
      std::vector<uint32_t> missing;
      {
        std::lock_guard<std::mutex> lock(mu_);
        missing = stalled->assembler->Missing();
      }
      if (missing.size() > 1024) missing.resize(1024);
      RequestResend(stalled, std::move(missing));
    }
    // A relay the master stopped pinging joins again, if the master really dropped it (a busy
    // master pings late; joining again would only cost everyone a rebroadcast).
    if (!is_master() && SteadyNowMs() - last_ping_ms_ > 15 * options_.ping_interval_ms) {
      last_ping_ms_ = SteadyNowMs();
      proto::RelayRequest query;
      query.mutable_chain();
      auto chain = Call(options_.master_endpoint, query, 1000, 1);  // the receive loop waits
      const bool listed = chain.ok() && std::any_of(chain->chain().begin(), chain->chain().end(),
                                                    [&](const proto::RelayInfo& r) {
                                                      return r.id() == info_.id();
                                                    });
      if (!chain.ok()) {
        LAMINAR_LOG(WARN, RELAY) << options_.id << ": the master at " << options_.master_endpoint
                                 << " does not answer (" << chain.status()
                                 << "); serving the versions held until it is back";
      } else if (!listed) {
        LAMINAR_LOG(WARN, RELAY) << options_.id << ": the master dropped us; joining again";
        Status s = Join();
        if (!s.ok()) LAMINAR_LOG(WARN, RELAY) << s;
      }
    }
  }
}

void Relay::HandleBroadcast(const std::string& bytes) {
  auto decoded = proto::Decode<proto::RelayBroadcast>(bytes, "bulk peer of " + options_.id);
  if (!decoded.ok()) {
    LAMINAR_LOG(WARN, RELAY) << decoded.status();
    return;
  }
  proto::RelayBroadcast& b = *decoded;
  const proto::WeightManifest manifest = *proto::BroadcastManifest(b);  // Decode checked it
  const int64_t version = manifest.version();
  if (version > kMaxVersion || manifest.num_chunks() > kMaxChunks) {
    LAMINAR_LOG(WARN, RELAY) << options_.id << ": refused version " << version << " with "
                             << manifest.num_chunks() << " chunks (out of range)";
    return;
  }
  bool completed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Slot> slot;
    if (newest_ && version == newest_->version()) {
      slot = newest_;
    } else if (inflight_ && version == inflight_->version()) {
      slot = inflight_;
    } else if ((newest_ && version < newest_->version()) ||
               (inflight_ && version < inflight_->version())) {
      LAMINAR_LOG(WARN, RELAY) << options_.id << ": ignored version " << version
                               << ", older than the one held (versions only go up)";
      return;
    }
    const bool is_new = slot == nullptr;
    if (is_new) {
      auto created = NewSlotLocked(manifest);
      if (!created.ok()) {
        LAMINAR_LOG(ERROR, RELAY) << options_.id << ": cannot hold version " << version << ": "
                                  << created.status();
        return;
      }
      slot = *created;
      slot->upstream_control = b.upstream_control();
    }
    // Headers of pulls and resends (epoch 0), and chain headers older than the one in force,
    // only announce the version: they never change where it goes next.
    const bool reroute = is_master() ? is_new : b.epoch() > slot->epoch;
    if (reroute) {
      slot->last_progress_ms = SteadyNowMs();
      slot->upstream_control = b.upstream_control();
      slot->targets.clear();
      if (is_master()) {
        RouteFromChainLocked(slot, {});
      } else {
        slot->epoch = b.epoch();
        if (b.route_size() > 0) {
          slot->targets.push_back({b.route(0), {b.route().begin() + 1, b.route().end()}});
        }
      }
      StartForwardLocked(slot);
    }
    if (is_new && slot->assembler->complete()) {  // a version of 0 bytes
      CompleteLocked(slot);
      completed = true;
    }
  }
  if (completed) ReportComplete(version);
}

StatusOr<std::shared_ptr<Relay::Slot>> Relay::NewSlotLocked(const proto::WeightManifest& manifest) {
  const std::string name = "/" + options_.shm_prefix + "-v" + std::to_string(manifest.version());
  auto shm = ShmVersion::Create(name, manifest);
  if (shm.status().code() == StatusCode::kAlreadyExists) {
    shm_unlink(name.c_str());  // our own prefix: a leftover of an earlier attempt
    shm = ShmVersion::Create(name, manifest);
  }
  if (!shm.ok()) return shm.status();
  auto slot = std::make_shared<Slot>();
  slot->shm = std::move(*shm);
  slot->assembler = std::make_unique<ChunkAssembler>(manifest, slot->shm->mutable_data());
  slot->last_progress_ms = SteadyNowMs();
  // Sends of older versions still queued are pointless now; those of this version's earlier
  // routes are not (a reroute adds relays, it does not take the version from the others).
  slot->generation = ++forward_generation_;
  chain_sender_->Supersede(slot->generation);
  if (inflight_) {
    LAMINAR_LOG(INFO, RELAY) << options_.id << ": version " << inflight_->version()
                             << " superseded by " << manifest.version() << " before it completed";
  }
  inflight_ = slot;
  return slot;
}

void Relay::RouteFromChainLocked(const std::shared_ptr<Slot>& slot,
                                 const std::set<std::string>& only_ids) {
  slot->epoch = ++epoch_;
  slot->targets.clear();
  std::lock_guard<std::mutex> chain_lock(chain_mu_);
  std::vector<std::string> route;
  for (const auto& m : chain_) {
    if (!only_ids.empty() && !only_ids.count(m->info.id())) continue;
    route.push_back(m->info.bulk_address());
    m->needs_version = false;
    m->last_progress_ms = SteadyNowMs();
  }
  if (options_.topology == Topology::kStar) {
    for (const auto& dest : route) slot->targets.push_back({dest, {}});
  } else if (!route.empty()) {
    slot->targets.push_back({route[0], {route.begin() + 1, route.end()}});
  }
}

void Relay::StartForwardLocked(const std::shared_ptr<Slot>& slot) {
  for (const auto& [dest, route] : slot->targets) {
    proto::RelayBroadcast b;
    b.mutable_header()->set_sender("relay/" + options_.id);
    proto::SetBroadcastManifest(slot->assembler->manifest(), &b);
    for (const auto& r : route) b.add_route(r);
    b.set_epoch(slot->epoch);
    b.set_upstream_control(info_.control_endpoint());
    chain_sender_->Push(SendItem::Owned(dest, EncodeTag({BulkKind::kBroadcast, slot->version(), 0}),
                                        proto::Encode(b), slot->generation));
  }
  for (uint32_t i = 0; i < slot->assembler->manifest().num_chunks(); ++i) {
    if (slot->assembler->has(i)) ForwardChunkLocked(slot, i);
  }
}

void Relay::ForwardChunkLocked(const std::shared_ptr<Slot>& slot, uint32_t index) {
  if (slot->generation != forward_generation_) return;  // a newer version owns the route
  for (const auto& target : slot->targets) {
    chain_sender_->Push(SendItem::View(target.first,
                                       EncodeTag({BulkKind::kChunk, slot->version(), index}),
                                       slot->assembler->Chunk(index), slot, slot->generation));
  }
}

void Relay::HandleChunk(int64_t version, uint32_t index, const std::string& bytes) {
  std::shared_ptr<Slot> corrupt;
  bool completed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!inflight_ || inflight_->version() != version) {
      if (!newest_ || newest_->version() != version) {
        LAMINAR_LOG(DEBUG, RELAY) << options_.id << ": chunk " << index << " of version " << version
                                  << " without its manifest; dropped";
      }
      return;
    }
    auto accepted = inflight_->assembler->Accept(index, AsBytes(bytes));
    if (!accepted.ok()) {
      LAMINAR_LOG(WARN, RELAY) << options_.id << ": " << accepted.status() << "; asking "
                               << inflight_->upstream_control << " again";
      corrupt = inflight_;
    } else if (*accepted) {
      inflight_->last_progress_ms = SteadyNowMs();
      ForwardChunkLocked(inflight_, index);
      if (inflight_->assembler->complete()) {
        CompleteLocked(inflight_);
        completed = true;
      }
    }
  }
  if (corrupt) RequestResend(corrupt, {index});
  if (completed) ReportComplete(version);
}

void Relay::ReportComplete(int64_t version) {
  if (is_master()) return;
  proto::RelayRequest r;
  r.mutable_complete()->set_relay_id(options_.id);
  r.mutable_complete()->set_version(version);
  Status s = Call(options_.master_endpoint, r, 1000, 2).status();
  if (!s.ok()) LAMINAR_LOG(WARN, RELAY) << options_.id << ": completion report: " << s;
}

void Relay::CompleteLocked(std::shared_ptr<Slot> slot) {
  slot->shm->MarkComplete();
  newest_ = slot;  // the previous newest is unlinked once no sender holds it
  if (inflight_ == slot) inflight_.reset();
  LAMINAR_LOG(INFO, RELAY) << options_.id << ": version " << slot->version() << " complete ("
                           << slot->assembler->manifest().total_bytes() << " bytes) in "
                           << slot->shm->name();
  if (is_master()) {
    std::lock_guard<std::mutex> chain_lock(chain_mu_);
    completions_[options_.id] = slot->version();
  }
}

void Relay::RequestResend(const std::shared_ptr<Slot>& slot, std::vector<uint32_t> chunks) {
  std::string upstream;
  int64_t version = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    upstream = slot->upstream_control;
    version = slot->version();
  }
  if (upstream.empty() || chunks.empty()) return;
  proto::RelayRequest r;
  r.mutable_resend()->set_version(version);
  for (uint32_t c : chunks) r.mutable_resend()->add_chunks(c);
  r.mutable_resend()->set_bulk_address(info_.bulk_address());
  Status s = Call(upstream, r, 500, 1).status();
  if (!s.ok()) {
    LAMINAR_LOG(WARN, RELAY) << options_.id << ": resend request to " << upstream << ": " << s;
  }
}

void Relay::ServeLocked(const std::shared_ptr<Slot>& slot, const std::string& dest,
                        const std::vector<uint32_t>& chunks, bool with_header) {
  // Each pull or resend is its own generation: a requester that failed once (slow, or gone) is
  // skipped for the rest of that request only, and served again when it asks again.
  const uint64_t generation = ++serve_generation_;
  if (with_header) {
    proto::RelayBroadcast b;
    b.mutable_header()->set_sender("relay/" + options_.id);
    proto::SetBroadcastManifest(slot->assembler->manifest(), &b);
    b.set_upstream_control(info_.control_endpoint());
    serve_sender_->Push(SendItem::Owned(dest, EncodeTag({BulkKind::kBroadcast, slot->version(), 0}),
                                        proto::Encode(b), generation));
  }
  for (uint32_t i : chunks) {
    if (!slot->assembler->has(i)) continue;  // it comes down the chain later
    serve_sender_->Push(SendItem::View(dest, EncodeTag({BulkKind::kChunk, slot->version(), i}),
                                       slot->assembler->Chunk(i), slot, generation));
  }
}

// --- control plane ---------------------------------------------------------------------------

std::string Relay::HandleRequest(std::string_view request, std::string_view peer) {
  proto::RelayReply reply;
  auto decoded = proto::Decode<proto::RelayRequest>(request, "control peer " + std::string(peer));
  if (!decoded.ok()) {
    LAMINAR_LOG(WARN, RELAY) << options_.id << ": " << decoded.status();
    reply.set_error(decoded.status().message());
  } else {
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
    std::lock_guard<std::mutex> lock(mu_);
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
    case proto::RelayRequest::kPull: {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t want = request.pull().version();
      if (!newest_ || (want != 0 && want != newest_->version())) {
        reply.set_error("version " + std::to_string(want) + " is not complete here (newest: " +
                        std::to_string(newest_ ? newest_->version() : -1) + ")");
        break;
      }
      // Pulls queue behind each other; past a few versions' worth, a rollout is better served
      // by another relay (RelayClient moves on when refused) than by waiting here.
      const size_t num_chunks = newest_->assembler->manifest().num_chunks();
      if (serve_sender_->queued() > options_.max_queued_pulls * (num_chunks + 1)) {
        reply.set_error("relay " + options_.id + " is busy serving " +
                        std::to_string(serve_sender_->queued()) + " queued chunks; try another");
        break;
      }
      std::vector<uint32_t> all(num_chunks);
      for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
      ServeLocked(newest_, request.pull().bulk_address(), all, /*with_header=*/true);
      break;
    }
    case proto::RelayRequest::kResend: {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t v = request.resend().version();
      std::shared_ptr<Slot> slot = newest_ && newest_->version() == v       ? newest_
                                   : inflight_ && inflight_->version() == v ? inflight_
                                                                            : nullptr;
      if (!slot) {
        reply.set_error("version " + std::to_string(v) + " is not held here");
        break;
      }
      std::vector<uint32_t> chunks(request.resend().chunks().begin(),
                                   request.resend().chunks().end());
      // Without the manifest the requester cannot use chunks: send it first when it has none.
      ServeLocked(slot, request.resend().bulk_address(), chunks, /*with_header=*/true);
      break;
    }
    case proto::RelayRequest::kJoin:
    case proto::RelayRequest::kComplete:
    case proto::RelayRequest::kLeave:
    case proto::RelayRequest::kChain: {
      if (!is_master()) {
        reply.set_error("relay " + options_.id + " is not the master");
        break;
      }
      std::lock_guard<std::mutex> chain_lock(chain_mu_);
      if (request.has_join()) {
        const proto::RelayInfo& info = request.join().relay();
        const bool same = std::any_of(chain_.begin(), chain_.end(), [&](const auto& m) {
          return m->info.SerializeAsString() == info.SerializeAsString();
        });
        if (same) break;  // joining twice changes nothing
        const auto scheme = [](const std::string& a) { return a.substr(0, a.find("://")); };
        if (scheme(info.bulk_address()) != scheme(info_.bulk_address())) {
          reply.set_error("relay " + info.id() + " sends over " + info.bulk_address() +
                          " but this tier uses " + scheme(info_.bulk_address()) +
                          " (start every relay with the same --transport)");
          LAMINAR_LOG(WARN, RELAY) << reply.error();
          break;
        }
        auto live = std::find_if(chain_.begin(), chain_.end(), [&](const auto& m) {
          return m->info.id() == info.id() && m->failures == 0;
        });
        if (live != chain_.end()) {
          reply.set_error("relay id " + info.id() + " is taken by the relay at " +
                          (*live)->info.control_endpoint() + ", which answers pings");
          LAMINAR_LOG(WARN, RELAY) << reply.error();
          break;
        }
        // The same id from new endpoints: a relay that restarted; the old entry is dead.
        std::erase_if(chain_, [&](const auto& m) { return m->info.id() == info.id(); });
        auto member = std::make_unique<Member>();
        member->info = info;
        member->last_progress_ms = SteadyNowMs();
        chain_.push_back(std::move(member));
        LAMINAR_LOG(INFO, RELAY) << "relay " << info.id() << " joined the chain at position "
                                 << chain_.size();
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
        for (const auto& m : chain_) *reply.add_chain() = m->info;
        for (const auto& [id, v] : completions_) {
          auto* c = reply.add_completions();
          c->set_relay_id(id);
          c->set_version(v);
        }
        reply.set_chain_rebuilds(chain_rebuilds_);
      }
      break;
    }
    case proto::RelayRequest::KIND_NOT_SET:
      reply.set_error("no request kind");
      break;
  }
  return reply;
}

// --- master: the chain ---------------------------------------------------------------------

void Relay::MonitorLoop() {
  std::map<std::string, std::unique_ptr<ZmqRequestClient>> clients;  // by relay id
  while (!stop_) {
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      stop_cv_.wait_for(lock, std::chrono::milliseconds(options_.ping_interval_ms),
                        [&] { return stop_.load(); });
    }
    if (stop_) return;
    std::vector<proto::RelayInfo> members;
    {
      std::lock_guard<std::mutex> lock(chain_mu_);
      for (const auto& m : chain_) members.push_back(m->info);
    }
    // Ping outside the locks and all at once (one socket each): a round costs one
    // ping_timeout_ms however many relays are slow or dead.
    proto::RelayRequest ping;
    ping.mutable_ping();
    ping.mutable_header()->set_sender("relay/" + options_.id);
    const std::string ping_bytes = proto::Encode(ping);
    std::vector<std::future<StatusOr<proto::RelayReply>>> pending;
    for (const auto& info : members) {
      auto& client = clients[info.id() + "@" + info.control_endpoint()];
      if (!client) client = std::make_unique<ZmqRequestClient>(info.control_endpoint());
      pending.push_back(
          std::async(std::launch::async,
                     [this, &ping_bytes, &info, c = client.get()]() -> StatusOr<proto::RelayReply> {
                       LAMINAR_ASSIGN_OR_RETURN(std::string bytes,
                                                c->Call(ping_bytes, options_.ping_timeout_ms, 1));
                       return proto::Decode<proto::RelayReply>(bytes, info.id());
                     }));
    }
    std::map<std::string, StatusOr<proto::RelayReply>> replies;
    for (size_t i = 0; i < members.size(); ++i) {
      replies.emplace(members[i].id(), pending[i].get());
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_lock<std::mutex> chain_lock(chain_mu_);
    const int64_t now = SteadyNowMs();
    bool removed = false;
    for (auto& m : chain_) {
      auto it = replies.find(m->info.id());
      if (it == replies.end()) continue;  // joined during the pings
      if (!it->second.ok()) {
        ++m->failures;
        continue;
      }
      const proto::RelayReply& r = *it->second;
      m->failures = 0;
      if (r.latest_complete_version() > m->complete_version ||
          r.inflight_version() != m->inflight_version ||
          r.inflight_chunks() != m->inflight_chunks) {
        m->last_progress_ms = now;
      }
      m->complete_version = std::max(m->complete_version, r.latest_complete_version());
      m->inflight_version = r.inflight_version();
      m->inflight_chunks = r.inflight_chunks();
    }
    for (auto it = chain_.begin(); it != chain_.end();) {
      if ((*it)->failures >= options_.dead_after_failures) {
        LAMINAR_LOG(WARN, RELAY) << "relay " << (*it)->info.id() << " missed " << (*it)->failures
                                 << " pings; dropped from the chain";
        clients.erase((*it)->info.id() + "@" + (*it)->info.control_endpoint());
        completions_.erase((*it)->info.id());
        it = chain_.erase(it);
        ++chain_rebuilds_;
        removed = true;
      } else {
        ++it;
      }
    }
    removed = removed || std::exchange(chain_changed_, false);
    std::shared_ptr<Slot> target = inflight_ ? inflight_ : newest_;
    if (!target) continue;
    std::set<std::string> lagging, stalled, fresh;
    for (const auto& m : chain_) {
      if (m->complete_version >= target->version()) continue;
      lagging.insert(m->info.id());
      if (now - m->last_progress_ms > options_.rebroadcast_after_ms) stalled.insert(m->info.id());
      if (m->needs_version) fresh.insert(m->info.id());
    }
    // A dead relay starves everyone after it, a stalled one lost something on the way: every
    // relay still lacking the version gets it again along the rebuilt chain. A relay that just
    // joined gets the newest version alone, when nothing else is on its way.
    std::set<std::string> route_ids;
    const char* why = "";
    if ((removed || !stalled.empty()) && !lagging.empty()) {
      route_ids = lagging;
      why = removed ? "chain rebuilt" : "stalled relays";
    } else if (!fresh.empty() && !inflight_) {
      route_ids = fresh;
      why = "new relays";
    }
    if (route_ids.empty()) continue;
    if (removed) {
      std::string order;
      for (const auto& m : chain_) order += (order.empty() ? "" : " -> ") + m->info.id();
      LAMINAR_LOG(WARN, RELAY) << "chain is now: master -> " << order;
    }
    LAMINAR_LOG(INFO, RELAY) << "sending version " << target->version() << " again to "
                             << route_ids.size() << " relay(s) (" << why << ")";
    chain_lock.unlock();  // RouteFromChainLocked takes it again
    RouteFromChainLocked(target, route_ids);
    StartForwardLocked(target);
  }
}

}  // namespace laminar::relay
