// The actor's publisher: copy, then checksum and send in the background.
#include "relay/publisher.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/logging.h"
#include "proto/codec.h"

namespace laminar::relay {

// Host buffers reused across versions: a fresh buffer costs the actor a page fault per 4 KiB
// on every publish (most of the stall for a large model); a recycled one does not.
class Publisher::BufferPool {
 public:
  std::unique_ptr<uint8_t[]> Take(size_t size) LAMINAR_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    for (auto it = spare_.begin(); it != spare_.end(); ++it) {
      if (it->second == size) {
        auto buffer = std::move(it->first);
        spare_.erase(it);
        return buffer;
      }
    }
    return std::unique_ptr<uint8_t[]>(new uint8_t[size]);
  }
  void Return(std::unique_ptr<uint8_t[]> buffer, size_t size) LAMINAR_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (spare_.size() < 2) spare_.emplace_back(std::move(buffer), size);
  }

 private:
  Mutex mu_;
  std::vector<std::pair<std::unique_ptr<uint8_t[]>, size_t>> spare_ LAMINAR_GUARDED_BY(mu_);
};

struct Publisher::Version {
  proto::WeightManifest manifest;
  std::unique_ptr<uint8_t[]> buffer;
  std::span<uint8_t> data;
  std::weak_ptr<BufferPool> pool;
  ~Version() {
    if (auto p = pool.lock()) p->Return(std::move(buffer), data.size());
  }
};

namespace {

// The master relay's bulk address, from its answer to a chain query. Errors: Unavailable when it
// does not answer; FailedPrecondition when the endpoint is not a master relay.
StatusOr<std::string> AskMasterBulkAddress(ZmqRequestClient* master, const PublisherOptions& o,
                                           int attempts) {
  proto::RelayRequest query;
  query.mutable_chain();
  query.mutable_header()->set_sender("publisher/" + o.id);
  LAMINAR_ASSIGN_OR_RETURN(
      std::string bytes,
      master->Call(proto::Encode(query), std::max(1, o.connect_timeout_ms / 5), attempts),
      "publisher: asking the master relay at " + o.master_endpoint);
  LAMINAR_ASSIGN_OR_RETURN(proto::RelayReply reply,
                           proto::Decode<proto::RelayReply>(bytes, o.master_endpoint));
  if (!reply.error().empty() || reply.bulk_address().empty()) {
    return FailedPreconditionError("publisher: " + o.master_endpoint +
                                   " is not a master relay: " + reply.error());
  }
  return reply.bulk_address();
}

}  // namespace

Publisher::Publisher(PublisherOptions options)
    : options_(std::move(options)), pool_(std::make_shared<BufferPool>()) {}

StatusOr<std::unique_ptr<Publisher>> Publisher::Create(PublisherOptions options) {
  if (options.master_endpoint.empty()) return InvalidArgumentError("publisher: no master endpoint");
  if (options.chunk_bytes == 0) return InvalidArgumentError("publisher: chunk_bytes is 0");
  if (options.connect_timeout_ms <= 0 || options.watch_interval_ms <= 0 ||
      options.keep_watch_interval_ms <= 0 || options.send_timeout_ms <= 0) {
    return InvalidArgumentError("publisher: timeouts must be positive");
  }
  std::unique_ptr<Publisher> p(new Publisher(std::move(options)));
  auto& o = p->options_;
  if (o.transport) {
    p->transport_ = std::move(o.transport);
  } else {
    LAMINAR_ASSIGN_OR_RETURN(p->transport_, CreateBulkTransport(o.bulk_kind, o.host));
  }
  Publisher* self = p.get();
  LAMINAR_ASSIGN_OR_RETURN(
      p->control_, ZmqReplyServer::Start(o.control_endpoint,
                                         [self](std::string_view req, std::string_view peer) {
                                           return self->HandleRequest(req, peer);
                                         }));
  ZmqRequestClient master(o.master_endpoint);
  LAMINAR_ASSIGN_OR_RETURN(p->master_bulk_, AskMasterBulkAddress(&master, o, /*attempts=*/5));
  p->stream_ = std::make_unique<SendWorker>("publisher/stream", p->transport_.get(), &p->send_mu_,
                                            o.send_timeout_ms);
  p->resends_ = std::make_unique<SendWorker>("publisher/resend", p->transport_.get(), &p->send_mu_,
                                             o.send_timeout_ms);
  p->thread_ = std::thread([self] { self->Loop(); });
  return p;
}

Publisher::~Publisher() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
  if (control_) control_->Stop();
  if (stream_) stream_->Stop();
  if (resends_) resends_->Stop();
}

const std::string& Publisher::control_endpoint() const { return control_->endpoint(); }

Publisher::Stats Publisher::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

StatusOr<double> Publisher::Publish(int64_t version, const std::vector<TensorBytes>& tensors) {
  const auto start = std::chrono::steady_clock::now();
  {
    MutexLock lock(&mu_);
    if (version <= last_version_) {
      return InvalidArgumentError("publish: version " + std::to_string(version) +
                                  " is not above the last one, " + std::to_string(last_version_));
    }
  }
  auto v = std::make_shared<Version>();
  LAMINAR_ASSIGN_OR_RETURN(v->manifest, LayoutManifest(version, tensors, options_.chunk_bytes),
                           "publish");
  const size_t total = v->manifest.total_bytes();
  v->buffer = pool_->Take(total);
  v->data = {v->buffer.get(), total};
  v->pool = pool_;
  CopyToLayout(v->manifest, tensors, v->data);
  const double stall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MutexLock lock(&mu_);
  if (pending_) ++stats_.versions_superseded;
  stats_.publish_stall_s = stall_s;
  stats_.bytes = total;
  ++stats_.versions_published;
  pending_ = std::move(v);
  last_version_ = version;
  cv_.NotifyAll();
  LAMINAR_LOG(DEBUG, RELAY) << "publisher: version " << version << " copied in " << stall_s << " s";
  return stall_s;
}

void Publisher::Loop() {
  while (true) {
    std::shared_ptr<Version> v;
    {
      MutexLock lock(&mu_);
      while (!stop_ && !pending_) cv_.Wait(&mu_);
      if (stop_) return;
      v = std::move(pending_);
      hashing_ = true;
    }
    FillChecksums(v->data, &v->manifest);
    {
      MutexLock lock(&mu_);
      current_ = v;  // before the first chunk leaves: resend requests may follow at once
    }
    const uint64_t generation = static_cast<uint64_t>(v->manifest.version()) + 1;
    // An older version still queued is not worth finishing, nor its resends; a destination
    // that failed for an older version is tried again.
    stream_->Supersede(generation);
    resends_->Supersede(generation);
    proto::RelayBroadcast b;
    b.mutable_header()->set_sender("publisher/" + options_.id);
    proto::SetBroadcastManifest(v->manifest, &b);
    b.set_upstream_control(control_->endpoint());
    stream_->Push(SendItem::Owned(master_bulk_,
                                  EncodeTag({BulkKind::kBroadcast, v->manifest.version(), 0}),
                                  proto::Encode(b), generation));
    for (uint32_t i = 0; i < v->manifest.num_chunks(); ++i) {
      const ChunkRange r = ChunkAt(v->manifest, i);
      stream_->Push(SendItem::View(
          master_bulk_, EncodeTag({BulkKind::kChunk, v->manifest.version(), i}),
          std::span<const uint8_t>(v->data.data() + r.offset, static_cast<size_t>(r.size)), v,
          generation));
    }
    {
      MutexLock lock(&mu_);
      hashing_ = false;
      cv_.NotifyAll();
    }
    Watch(v, b);
  }
}

// A lost or corrupted manifest leaves the master unaware of the version, and a master restarted
// in place (launch/supervisor.h) starts empty, so nothing would ask for it again: until a newer
// version is published, ask the master what it holds (often while it lacks the version, every
// keep_watch_interval_ms once it has it) and send the manifest again, to the bulk address the
// master has now, whenever it has the version neither complete nor in flight; it asks for the
// missing chunks.
void Publisher::Watch(const std::shared_ptr<Version>& v, const proto::RelayBroadcast& header) {
  ZmqRequestClient master(options_.master_endpoint);
  proto::RelayRequest latest;
  latest.mutable_latest();
  latest.mutable_header()->set_sender("publisher/" + options_.id);
  const int64_t version = v->manifest.version();
  bool held = false;
  while (true) {
    {
      const int interval = held ? options_.keep_watch_interval_ms : options_.watch_interval_ms;
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval);
      MutexLock lock(&mu_);
      while (!stop_ && !pending_ && cv_.WaitUntil(&mu_, until)) {
      }
      if (stop_ || pending_) return;
    }
    auto bytes = master.Call(proto::Encode(latest), options_.watch_interval_ms, 1);
    if (!bytes.ok()) continue;  // the master is busy or restarting: ask again later
    auto reply = proto::Decode<proto::RelayReply>(*bytes, options_.master_endpoint);
    if (!reply.ok() || !reply->error().empty()) continue;  // e.g. a master still starting
    if (reply->latest_complete_version() >= version) {
      held = true;
      continue;
    }
    // Not while it assembles the version or resends to it are still queued (a blocked send
    // would otherwise pile up manifests).
    if (reply->inflight_version() == version || resends_->queued() > 0) continue;
    // The master may be a new one on the same control endpoint (it had the version and lost it,
    // or died before it was asked), on another bulk address: what is still queued for the old
    // one is dropped, and the version goes to the new one.
    auto bulk = AskMasterBulkAddress(&master, options_, /*attempts=*/1);
    if (!bulk.ok()) continue;
    if (*bulk != master_bulk_) {
      master_bulk_ = *bulk;
      stream_->Supersede(static_cast<uint64_t>(version) + 2);
      LAMINAR_LOG(WARN, RELAY) << "publisher: the master relay restarted without version "
                               << version << "; sending it again to " << master_bulk_;
    } else if (!stream_->WaitIdle(0)) {
      continue;  // still being sent
    } else {
      LAMINAR_LOG(WARN, RELAY) << "publisher: the master has not got version " << version
                               << "; sending its manifest again";
    }
    held = false;
    resends_->Push(SendItem::Owned(master_bulk_, EncodeTag({BulkKind::kBroadcast, version, 0}),
                                   proto::Encode(header), static_cast<uint64_t>(version) + 1));
  }
}

Status Publisher::WaitSent(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  {
    MutexLock lock(&mu_);
    while ((pending_ || hashing_) && cv_.WaitUntil(&mu_, deadline)) {
    }
    if (pending_ || hashing_) {
      return DeadlineExceededError("publisher: versions still being checksummed after " +
                                   std::to_string(timeout_ms) + " ms");
    }
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
  if (!stream_->WaitIdle(static_cast<int>(std::max<int64_t>(left, 0)))) {
    return DeadlineExceededError("publisher: versions still being sent after " +
                                 std::to_string(timeout_ms) + " ms");
  }
  return OkStatus();
}

std::string Publisher::HandleRequest(std::string_view request, std::string_view peer) {
  proto::RelayReply reply;
  reply.mutable_header()->set_sender("publisher/" + options_.id);
  auto decoded = proto::Decode<proto::RelayRequest>(request, "control peer " + std::string(peer));
  if (!decoded.ok()) {
    reply.set_error(decoded.status().message());
    return proto::Encode(reply);
  }
  if (!decoded->has_resend()) {
    reply.set_error("a publisher answers resend requests only");
    return proto::Encode(reply);
  }
  const auto& resend = decoded->resend();
  std::shared_ptr<Version> v;
  {
    MutexLock lock(&mu_);
    v = current_;
  }
  if (!v || v->manifest.version() != resend.version()) {
    reply.set_error("version " + std::to_string(resend.version()) + " is no longer held");
    return proto::Encode(reply);
  }
  proto::RelayBroadcast b;
  b.mutable_header()->set_sender("publisher/" + options_.id);
  proto::SetBroadcastManifest(v->manifest, &b);
  b.set_upstream_control(control_->endpoint());
  const uint64_t generation = static_cast<uint64_t>(v->manifest.version()) + 1;
  resends_->Push(SendItem::Owned(resend.bulk_address(),
                                 EncodeTag({BulkKind::kBroadcast, v->manifest.version(), 0}),
                                 proto::Encode(b), generation));
  for (uint32_t i : resend.chunks()) {
    if (i >= v->manifest.num_chunks()) continue;
    const ChunkRange r = ChunkAt(v->manifest, i);
    resends_->Push(SendItem::View(
        resend.bulk_address(), EncodeTag({BulkKind::kChunk, v->manifest.version(), i}),
        std::span<const uint8_t>(v->data.data() + r.offset, static_cast<size_t>(r.size)), v,
        generation));
  }
  LAMINAR_LOG(INFO, RELAY) << "publisher: resending " << resend.chunks_size()
                           << " chunk(s) of version " << resend.version() << " to "
                           << resend.bulk_address();
  return proto::Encode(reply);
}

}  // namespace laminar::relay
