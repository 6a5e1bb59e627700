// UCX bulk transport: UCP context, a send and a receive worker, a sockaddr listener, the receive
// thread that drains incoming messages into a queue, and endpoint lifetimes.
#include "core/ucx_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/logging.h"

namespace laminar {

namespace {

using Clock = std::chrono::steady_clock;

// After the last event, keep polling this long before sleeping on the event fd: a rendezvous
// exchange needs several round trips, and each sleep costs a few microseconds of wake-up.
constexpr auto kSpin = std::chrono::microseconds(200);
// The longest single sleep on the event fd; bounds the cost of a missed wake-up.
constexpr int kMaxSleepMs = 100;
// Bounds on shutdown: flushing our endpoints, then forced closes.
constexpr auto kFlushBudget = std::chrono::milliseconds(1000);
constexpr auto kCloseBudget = std::chrono::milliseconds(500);

bool IsPeerFailure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_CANCELED:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_UNSUPPORTED:
      return true;
    default:
      return false;
  }
}

// "what: ucs_status_string" with a code chosen by the UCX status.
Status UcsError(ucs_status_t s, const std::string& what) {
  std::string msg = what + ": " + ucs_status_string(s);
  if (IsPeerFailure(s)) return UnavailableError(std::move(msg));
  switch (s) {
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return InvalidArgumentError(std::move(msg));
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
    case UCS_ERR_BUSY:
      return ResourceExhaustedError(std::move(msg));
    default:
      return InternalError(std::move(msg));
  }
}

// Progresses `worker` until done() or `deadline`; after kSpin without events it arms the worker
// and sleeps on its event fd (and on `wake_fd` when given). Returns done().
template <typename Done>
bool ProgressUntil(ucp_worker_h worker, int efd, Clock::time_point deadline, Done done,
                   int wake_fd = -1) {
  auto idle_since = Clock::now();
  while (true) {
    bool any = false;
    while (ucp_worker_progress(worker) != 0) any = true;
    if (done()) return true;
    auto now = Clock::now();
    if (now >= deadline) return false;
    if (any) {
      idle_since = now;
      continue;
    }
    if (now - idle_since < kSpin) continue;
    ucs_status_t armed = ucp_worker_arm(worker);
    if (armed == UCS_ERR_BUSY) continue;
    auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    int sleep_ms = static_cast<int>(std::clamp<int64_t>(left_ms + 1, 1, kMaxSleepMs));
    if (armed != UCS_OK) sleep_ms = 1;  // cannot arm: fall back to polling at 1 kHz
    pollfd fds[2] = {{efd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    (void)poll(fds, wake_fd >= 0 ? 2 : 1, sleep_ms);
  }
}

// Closes `ep` without waiting for the peer (outstanding requests complete with
// UCS_ERR_CANCELED) and releases the close request; the close finishes in later progress.
void ForceClose(ucp_worker_h worker, int efd, ucp_ep_h ep) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(ep, &param);
  if (!UCS_PTR_IS_PTR(req)) return;
  ProgressUntil(worker, efd, Clock::now() + kCloseBudget,
                [&] { return ucp_request_check_status(req) != UCS_INPROGRESS; });
  ucp_request_free(req);
}

struct ParsedPeer {
  std::string host;
  std::string port;
};

// "ucx://HOST:PORT" or "ucx://[V6]:PORT".
StatusOr<ParsedPeer> ParsePeer(const std::string& peer) {
  constexpr std::string_view kScheme = "ucx://";
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("bad UCX peer address '" + peer + "' (" + std::string(why) +
                                "; want ucx://HOST:PORT)");
  };
  if (peer.rfind(kScheme, 0) != 0) return bad("not ucx://");
  std::string_view rest = std::string_view(peer).substr(kScheme.size());
  ParsedPeer out;
  size_t colon;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    out.host = std::string(rest.substr(1, close - 1));
    colon = close + 1;
    if (colon >= rest.size() || rest[colon] != ':') return bad("no port");
  } else {
    colon = rest.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    out.host = std::string(rest.substr(0, colon));
  }
  out.port = std::string(rest.substr(colon + 1));
  if (out.host.empty()) return bad("empty host");
  if (out.port.empty() || out.port.size() > 5 ||
      !std::all_of(out.port.begin(), out.port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return bad("port is not a number");
  int port = std::atoi(out.port.c_str());
  if (port < 1 || port > 65535) return bad("port out of range");
  return out;
}

// Resolves host:port to one IPv4 socket address (the first that getaddrinfo returns). IPv6 is
// refused: UCX 1.13's TCP transport writes an IPv6 peer address past the end of an IPv4-sized
// field (heap corruption, seen under valgrind), so an IPv6 endpoint must never reach it.
StatusOr<sockaddr_storage> Resolve(const std::string& host, const std::string& port,
                                   const std::string& what, socklen_t* len) {
  if (host.find(':') != std::string::npos) {
    return InvalidArgumentError("IPv6 address '" + host + "' of " + what +
                                " is not supported by the UCX transport (UCX 1.13 TCP); use IPv4");
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return InvalidArgumentError("cannot resolve host '" + host + "' of " + what +
                                " to an IPv4 address: " + gai_strerror(rc));
  }
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return ss;
}

}  // namespace

// One client endpoint to a peer's listener, on the send worker.
struct UcxBulkTransport::Peer {
  std::string address;
  ucp_ep_h ep = nullptr;
  bool failed = false;  // set by the error callback during send-worker progress
  ucs_status_t error = UCS_OK;
};

// One endpoint a peer connected to us with, on the receive worker.
struct UcxBulkTransport::Accepted {
  UcxBulkTransport* owner = nullptr;
  ucp_ep_h ep = nullptr;
  bool failed = false;
};

// A message taken off the wire, in the order it was matched; complete once its receive finishes.
struct UcxBulkTransport::Incoming {
  enum class State { kPending, kDone, kFailed };
  UcxBulkTransport* owner = nullptr;
  uint64_t tag = 0;
  size_t size_bytes = 0;
  std::string bytes;
  State state = State::kPending;  // guarded by owner->mu_
};

// C callbacks with UCX's signatures, friends of the transport.
struct UcxCallbacks {
  static Status ReceiveStatus(const UcxBulkTransport::Incoming* in, ucs_status_t status) {
    if (status == UCS_OK) return OkStatus();
    return UcsError(status, "ucx receive of " + std::to_string(in->size_bytes) + " bytes (tag " +
                                std::to_string(in->tag) + ") on " + in->owner->address_);
  }
  static void OnPeerError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* p = static_cast<UcxBulkTransport::Peer*>(arg);
    p->failed = true;
    p->error = status;
  }
  static void OnSendDone(void* /*request*/, ucs_status_t status, void* user_data) {
    auto* st = static_cast<std::pair<bool, ucs_status_t>*>(user_data);
    st->first = true;
    st->second = status;
  }
  static void OnAcceptedError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
    auto* a = static_cast<UcxBulkTransport::Accepted*>(arg);
    a->failed = true;
    if (status != UCS_ERR_CONNECTION_RESET && status != UCS_ERR_CANCELED) {
      LAMINAR_LOG(DEBUG, NET) << "ucx endpoint accepted on " << a->owner->address_
                              << " failed: " << ucs_status_string(status);
    }
  }
  static void OnConnRequest(ucp_conn_request_h request, void* arg) {
    static_cast<UcxBulkTransport*>(arg)->Accept(request);
  }
  static void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* /*info*/,
                         void* user_data) {
    auto* in = static_cast<UcxBulkTransport::Incoming*>(user_data);
    in->owner->Complete(in, ReceiveStatus(in, status));
    ucp_request_free(request);
  }
};

StatusOr<std::unique_ptr<UcxBulkTransport>> UcxBulkTransport::Create(
    const std::string& listen_host) {
  std::unique_ptr<UcxBulkTransport> t(new UcxBulkTransport());
  LAMINAR_RETURN_IF_ERROR(t->Init(listen_host), "UcxBulkTransport on " + listen_host);
  return t;
}

Status UcxBulkTransport::Init(const std::string& listen_host) {
  ucp_config_t* config = nullptr;
  // UCX failing to start (no usable transport, bad UCX_* settings) is Unavailable, whatever the
  // UCX status, so that callers may fall back to another transport.
  auto cannot_start = [](ucs_status_t s, const char* what) {
    return UnavailableError(UcsError(s, what).message());
  };
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return cannot_start(s, "ucp_config_read");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;  // two workers, used from different threads
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return cannot_start(s, "ucp_init");

  for (ucp_worker_h* w : {&send_worker_, &recv_worker_}) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one thread at a time, not always the creator
    s = ucp_worker_create(context_, &wp, w);
    if (s != UCS_OK) return cannot_start(s, "ucp_worker_create");
  }
  s = ucp_worker_get_efd(send_worker_, &send_efd_);
  if (s != UCS_OK) return cannot_start(s, "ucp_worker_get_efd");
  s = ucp_worker_get_efd(recv_worker_, &recv_efd_);
  if (s != UCS_OK) return cannot_start(s, "ucp_worker_get_efd");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return ErrnoError("eventfd", errno);

  socklen_t len = 0;
  LAMINAR_ASSIGN_OR_RETURN(sockaddr_storage addr,
                           Resolve(listen_host, "0", "the listen host", &len));
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  lp.sockaddr.addrlen = len;
  lp.conn_handler.cb = &UcxCallbacks::OnConnRequest;
  lp.conn_handler.arg = this;
  s = ucp_listener_create(recv_worker_, &lp, &listener_);
  if (s != UCS_OK) return UcsError(s, "ucp_listener_create on " + listen_host);
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  s = ucp_listener_query(listener_, &attr);
  if (s != UCS_OK) return UcsError(s, "ucp_listener_query on " + listen_host);
  uint16_t port = reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port;
  address_ = "ucx://" + listen_host + ":" + std::to_string(ntohs(port));

  receive_thread_ = std::thread([this] { ReceiveLoop(); });
  return OkStatus();
}

UcxBulkTransport::~UcxBulkTransport() { Shutdown(); }

void UcxBulkTransport::Shutdown() {
  // 1. Our outgoing endpoints, while the receive thread still runs (a send to ourselves needs it):
  //    flush what was sent, bounded, then close without waiting for the peers.
  if (send_worker_ != nullptr && !peers_.empty()) {
    std::vector<void*> flushes;
    for (auto& [name, p] : peers_) {
      if (p->failed) continue;
      ucp_request_param_t param{};
      void* req = ucp_ep_flush_nbx(p->ep, &param);
      if (UCS_PTR_IS_PTR(req)) flushes.push_back(req);
    }
    ProgressUntil(send_worker_, send_efd_, Clock::now() + kFlushBudget, [&] {
      return std::all_of(flushes.begin(), flushes.end(),
                         [](void* r) { return ucp_request_check_status(r) != UCS_INPROGRESS; });
    });
    for (auto& [name, p] : peers_) ForceClose(send_worker_, send_efd_, p->ep);
    for (void* r : flushes) ucp_request_free(r);
    peers_.clear();
  }
  // 2. The receive thread.
  if (receive_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    Wake();
    receive_thread_.join();
  }
  // 3. The listener, then the endpoints peers connected with; in-flight receives end with them.
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
  listener_ = nullptr;
  if (recv_worker_ != nullptr) {
    for (auto& a : accepted_) a->failed = true;
    CloseFailedAccepted();
    ProgressUntil(recv_worker_, recv_efd_, Clock::now() + kCloseBudget, [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return std::none_of(queue_.begin(), queue_.end(),
                          [](const auto& in) { return in->state == Incoming::State::kPending; });
    });
  }
  // 4. Workers (this releases anything still outstanding), then the context. Queued messages
  //    outlive the workers, since a purged receive may still call back into them.
  if (send_worker_ != nullptr) ucp_worker_destroy(send_worker_);
  if (recv_worker_ != nullptr) ucp_worker_destroy(recv_worker_);
  send_worker_ = recv_worker_ = nullptr;
  if (context_ != nullptr) ucp_cleanup(context_);
  context_ = nullptr;
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
}

void UcxBulkTransport::Wake() {
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
    // EAGAIN: the counter is already non-zero, so the thread will wake anyway.
  }
}

StatusOr<UcxBulkTransport::Peer*> UcxBulkTransport::GetPeer(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it != peers_.end()) {
    if (!it->second->failed) return it->second.get();
    DropPeer(peer);  // failed since the last Send: reconnect
  }
  LAMINAR_ASSIGN_OR_RETURN(ParsedPeer parsed, ParsePeer(peer));
  socklen_t len = 0;
  LAMINAR_ASSIGN_OR_RETURN(sockaddr_storage addr,
                           Resolve(parsed.host, parsed.port, "peer '" + peer + "'", &len));
  auto p = std::make_unique<Peer>();
  p->address = peer;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  ep.sockaddr.addrlen = len;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxCallbacks::OnPeerError;
  ep.err_handler.arg = p.get();
  ucs_status_t s = ucp_ep_create(send_worker_, &ep, &p->ep);
  if (s != UCS_OK) return UcsError(s, "ucp_ep_create from " + address_ + " to " + peer);
  Peer* raw = p.get();
  peers_[peer] = std::move(p);
  return raw;
}

void UcxBulkTransport::DropPeer(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  ForceClose(send_worker_, send_efd_, it->second->ep);
  peers_.erase(it);
}

Status UcxBulkTransport::Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
                              int timeout_ms) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(std::max(timeout_ms, 0));
  LAMINAR_ASSIGN_OR_RETURN(Peer * p, GetPeer(peer));
  const std::string what = "ucx send of " + std::to_string(bytes.size()) + " bytes (tag " +
                           std::to_string(tag) + ") from " + address_ + " to " + peer;
  static const uint8_t kEmpty = 0;
  std::pair<bool, ucs_status_t> done{false, UCS_OK};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &UcxCallbacks::OnSendDone;
  param.user_data = &done;
  void* req =
      ucp_tag_send_nbx(p->ep, bytes.empty() ? &kEmpty : bytes.data(), bytes.size(), tag, &param);
  ucs_status_t s = UCS_OK;
  if (UCS_PTR_IS_ERR(req)) {
    s = UCS_PTR_STATUS(req);
  } else if (req != nullptr) {
    if (!ProgressUntil(send_worker_, send_efd_, deadline, [&] { return done.first; })) {
      // Not taken in time: closing the endpoint cancels the request (it completes with
      // UCS_ERR_CANCELED), after which `bytes` is no longer referenced and we may return.
      DropPeer(peer);
      bool finished =
          ProgressUntil(send_worker_, send_efd_, Clock::now() + std::chrono::seconds(10),
                        [&] { return done.first; });
      LAMINAR_CHECK(finished) << what << ": request still in flight after its endpoint was closed";
      ucp_request_free(req);
      return DeadlineExceededError(what + ": not taken within " + std::to_string(timeout_ms) +
                                   " ms");
    }
    s = done.second;
    ucp_request_free(req);
  }
  if (s != UCS_OK) {
    if (p->failed && p->error != UCS_OK) s = p->error;  // the cause, rather than CANCELED
    DropPeer(peer);
    Status st = UcsError(s, what);
    return IsPeerFailure(s) ? st : UnavailableError(st.message());
  }
  return OkStatus();
}

StatusOr<BulkMessage> UcxBulkTransport::Receive(int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    bool was_full = queued_bytes_ >= kMaxQueuedBytes;
    while (!queue_.empty() && queue_.front()->state == Incoming::State::kFailed) {
      queued_bytes_ -= queue_.front()->size_bytes;
      queue_.pop_front();
    }
    if (!queue_.empty() && queue_.front()->state == Incoming::State::kDone) {
      std::unique_ptr<Incoming> in = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= in->size_bytes;
      if (was_full && queued_bytes_ < kMaxQueuedBytes) Wake();
      return BulkMessage{in->tag, std::move(in->bytes)};
    }
    if (was_full && queued_bytes_ < kMaxQueuedBytes) Wake();
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && Clock::now() >= deadline) {
      bool ready = !queue_.empty() && queue_.front()->state != Incoming::State::kPending;
      if (!ready) {
        return DeadlineExceededError("no ucx message on " + address_ + " within " +
                                     std::to_string(timeout_ms) + " ms");
      }
    }
  }
}

Status UcxBulkTransport::first_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

std::string UcxBulkTransport::DescribeEndpoint(const std::string& peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end()) return "";
  char* buf = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&buf, &size);
  if (f == nullptr) return "";
  ucp_ep_print_info(it->second->ep, f);
  std::fclose(f);
  std::string out(buf, size);
  std::free(buf);
  return out;
}

void UcxBulkTransport::Accept(ucp_conn_request_h request) {
  auto a = std::make_unique<Accepted>();
  a->owner = this;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.conn_request = request;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxCallbacks::OnAcceptedError;
  ep.err_handler.arg = a.get();
  ucs_status_t s = ucp_ep_create(recv_worker_, &ep, &a->ep);
  if (s != UCS_OK) {
    Status st = UcsError(s, "ucp_ep_create for a connection accepted on " + address_);
    LAMINAR_LOG(WARN, NET) << st;
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.ok()) first_error_ = st;
    return;  // UCX rejects the request when the endpoint cannot be created
  }
  accepted_.push_back(std::move(a));
}

void UcxBulkTransport::CloseFailedAccepted() {
  // Take them out first: closing progresses the worker, and a connection accepted meanwhile
  // appends to accepted_.
  std::vector<std::unique_ptr<Accepted>> failed;
  for (auto& a : accepted_) {
    if (a->failed) failed.push_back(std::move(a));
  }
  std::erase(accepted_, nullptr);
  for (auto& a : failed) ForceClose(recv_worker_, recv_efd_, a->ep);
}

void UcxBulkTransport::Complete(Incoming* in, const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (status.ok()) {
    in->state = Incoming::State::kDone;
  } else {
    in->state = Incoming::State::kFailed;
    if (!stop_) LAMINAR_LOG(WARN, NET) << status << " (message dropped)";
    if (first_error_.ok()) first_error_ = status;
  }
  cv_.notify_all();
}

bool UcxBulkTransport::PullOneMessage() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!queue_.empty() && queued_bytes_ >= kMaxQueuedBytes) return false;  // backpressure
  }
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h msg = ucp_tag_probe_nb(recv_worker_, 0, 0, /*remove=*/1, &info);
  if (msg == nullptr) return false;
  auto owned = std::make_unique<Incoming>();
  Incoming* in = owned.get();
  in->owner = this;
  in->tag = info.sender_tag;
  in->size_bytes = info.length;
  in->bytes.resize(info.length);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(owned));
    queued_bytes_ += in->size_bytes;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv = &UcxCallbacks::OnRecvDone;
  param.user_data = in;
  void* req = ucp_tag_msg_recv_nbx(recv_worker_, in->bytes.data(), in->bytes.size(), msg, &param);
  if (req == nullptr) {
    Complete(in, OkStatus());
  } else if (UCS_PTR_IS_ERR(req)) {
    Complete(in, UcxCallbacks::ReceiveStatus(in, UCS_PTR_STATUS(req)));
  }
  return true;
}

void UcxBulkTransport::ReceiveLoop() {
  auto idle_since = Clock::now();
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    bool any = false;
    while (ucp_worker_progress(recv_worker_) != 0) any = true;
    if (std::any_of(accepted_.begin(), accepted_.end(), [](const auto& a) { return a->failed; })) {
      CloseFailedAccepted();
      any = true;
    }
    while (PullOneMessage()) any = true;
    auto now = Clock::now();
    if (any) {
      idle_since = now;
      continue;
    }
    if (now - idle_since < kSpin) continue;
    ucs_status_t armed = ucp_worker_arm(recv_worker_);
    if (armed == UCS_ERR_BUSY) continue;
    pollfd fds[2] = {{recv_efd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    (void)poll(fds, 2, armed == UCS_OK ? kMaxSleepMs : 1);
    if (fds[1].revents & POLLIN) {
      uint64_t n;
      (void)!read(wake_fd_, &n, sizeof(n));
    }
  }
}

}  // namespace laminar
