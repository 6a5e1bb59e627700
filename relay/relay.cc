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
#include "relay/relay_internal.h"
#include "relay/wire.h"

namespace laminar::relay {
StatusOr<Topology> ParseTopology(std::string_view name) {
  if (name == "chain") return Topology::kChain;
  if (name == "star") return Topology::kStar;
  return InvalidArgumentError("topology '" + std::string(name) + "'; choices: chain, star");
}

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
  serving_.store(true, std::memory_order_release);
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
    MutexLock lock(&mu_);
    for (const auto& segment : segments_) shm_unlink(segment.first.c_str());
  }
  {
    MutexLock lock(&stop_mu_);  // the monitor checks stop_ under it before it waits
  }
  stop_cv_.NotifyAll();
  if (control_) control_->Stop();
  if (receiver_.joinable()) receiver_.join();
  if (monitor_.joinable()) monitor_.join();
  if (chain_sender_) chain_sender_->Stop();
  if (serve_sender_) serve_sender_->Stop();
  MutexLock lock(&mu_);
  newest_.reset();
  inflight_.reset();
}

int64_t Relay::latest_complete_version() const {
  MutexLock lock(&mu_);
  return newest_ ? newest_->version() : -1;
}

std::vector<proto::RelayInfo> Relay::Chain() const {
  MutexLock lock(&chain_mu_);
  std::vector<proto::RelayInfo> out;
  for (const auto& m : chain_) out.push_back(m->info);
  return out;
}

uint64_t Relay::chain_rebuilds() const {
  MutexLock lock(&chain_mu_);
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
      MutexLock lock(&mu_);
      if (inflight_ && !inflight_->upstream_control.empty() &&
          SteadyNowMs() - inflight_->last_progress_ms > options_.stall_resend_ms) {
        stalled = inflight_;
        stalled->last_progress_ms = SteadyNowMs();
      }
    }
    if (stalled) {
      std::vector<uint32_t> missing;
      {
        MutexLock lock(&mu_);
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
    MutexLock lock(&mu_);
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
  std::erase_if(segments_, [](const auto& s) { return s.second.expired(); });
  auto slot = std::make_shared<Slot>();
  slot->shm = std::move(*shm);
  slot->assembler = std::make_unique<ChunkAssembler>(manifest, slot->shm->mutable_data());
  slot->last_progress_ms = SteadyNowMs();
  segments_.emplace_back(name, slot);
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
    MutexLock lock(&mu_);
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
    MutexLock chain_lock(&chain_mu_);
    completions_[options_.id] = slot->version();
  }
}

void Relay::RequestResend(const std::shared_ptr<Slot>& slot, std::vector<uint32_t> chunks) {
  std::string upstream;
  int64_t version = 0;
  {
    MutexLock lock(&mu_);
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

}  // namespace laminar::relay
