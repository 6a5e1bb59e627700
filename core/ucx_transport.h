// UcxBulkTransport: BulkTransport over UCX (UCP tag API), the fast path for weight chunks
// (docs/architecture.md). Connections are made by socket address: each instance listens with a
// ucp_listener on HOST:PORT, and peers connect with UCP_EP_PARAM_FIELD_SOCK_ADDR. UCX itself picks
// the transports that carry the data (TCP, RDMA verbs where the fabric has them, shared memory);
// UCX_TLS and the other UCX_* environment variables restrict or tune that choice.
// Endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer is an error rather than a hang. UCX
// 1.13 offers no shared-memory transport (sysv, posix, cma) in that mode, so two processes on one
// machine talk over TCP loopback; see the class comment for what that costs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/bulk_transport.h"
#include "core/status.h"

// UCX handle types, forward-declared so that this header does not pull in <ucp/api/ucp.h>.
struct ucp_context;
struct ucp_worker;
struct ucp_listener;
struct ucp_ep;
struct ucp_conn_request;

namespace laminar {

// Point-to-point tagged buffers over UCX. Each instance owns a UCP context and two workers:
//  - the receive worker holds the listener and the endpoints peers connect to us with. A
//    background thread progresses it, accepts connections, and pulls every incoming message
//    (ucp_tag_probe_nb + ucp_tag_msg_recv_nbx, any tag, any sender) into a queue that Receive
//    pops, so a Send to us completes whether or not our owner is inside Receive. The queue stops
//    taking new messages while it holds kMaxQueuedBytes (senders then wait: backpressure), but a
//    message always gets in when the queue is empty, so one message may be up to 1 GB or more.
//  - the send worker holds one client endpoint per peer address (created on first Send, cached,
//    dropped when it fails); Send progresses it on the caller's thread.
// Messages from one sender arrive in the order they were sent; small ones go eagerly, large ones
// by rendezvous (zero-copy where the transport allows). Waits spin briefly, then sleep on the
// worker's event fd (ucp_worker_arm), so idle waits do not burn a core.
// Measured on a 2-core VM, 500 MB in 4 MiB chunks over loopback TCP: ~1 GB/s (ZeroMQ ~0.8 GB/s
// between threads, ~0.45 GB/s between processes); UCX's shared memory would give ~3 GB/s but
// needs UCP_ERR_HANDLING_MODE_NONE, which we do not accept (a peer's death would be fatal).
//
// Thread-safety: one thread in Send and one in Receive at a time, concurrently (the
// BulkTransport contract); address() and first_error() from any thread. The destructor closes the
// endpoints (flush bounded by ~1 s, then forced), the listener, the workers and the context; it
// never waits for a peer indefinitely.
//
// Errors: every UCX failure becomes a Status naming the operation, the peer or our address, and
// ucs_status_string. Send: InvalidArgument for a malformed peer string, Unavailable when the peer
// is unreachable or fails (the cached endpoint is dropped, so a later Send reconnects),
// DeadlineExceeded when the message is not taken within timeout_ms (the endpoint is closed and the
// message cancelled). A message accepted by UCX (Send returned OK) to a peer that dies before
// reading it is lost, as with ZeroMQ. Receive: DeadlineExceeded after timeout_ms.
class UcxBulkTransport : public BulkTransport {
 public:
  // While the receive queue holds this many bytes, no further message is taken off the wire.
  static constexpr size_t kMaxQueuedBytes = size_t{256} << 20;

  // Creates the context, workers and a listener on a free TCP port of `listen_host` (an IPv4
  // address of this machine, or a name that resolves to one; IPv6 is refused, see Resolve in the
  // .cc). Errors: InvalidArgument for a host that does not resolve or is IPv6; Unavailable
  // (naming the UCX call and ucs_status_string) when UCX cannot start, e.g. no usable transport,
  // or cannot listen there.
  static StatusOr<std::unique_ptr<UcxBulkTransport>> Create(
      const std::string& listen_host = "127.0.0.1");
  ~UcxBulkTransport() override;
  UcxBulkTransport(const UcxBulkTransport&) = delete;
  UcxBulkTransport& operator=(const UcxBulkTransport&) = delete;

  // "ucx://HOST:PORT", the bound port filled in.
  const std::string& address() const override { return address_; }
  // `peer` is another instance's address(). Blocks until UCX has taken the message (eager: copied
  // out; rendezvous: read by the peer) or timeout_ms. Errors as in the class comment.
  Status Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
              int timeout_ms) override;
  StatusOr<BulkMessage> Receive(int timeout_ms) override;

  // The first error of the background receive thread (a message whose transfer failed midway and
  // was dropped), or OK.
  Status first_error() const;
  // The transports UCX chose for the endpoint to `peer` (ucp_ep_print_info), for diagnostics;
  // empty when no endpoint to `peer` is open. Call from the sender thread.
  std::string DescribeEndpoint(const std::string& peer);

 private:
  friend struct UcxCallbacks;  // the C callbacks UCX calls, in ucx_transport.cc
  struct Peer;
  struct Accepted;
  struct Incoming;

  UcxBulkTransport() = default;
  Status Init(const std::string& listen_host);
  void Shutdown();
  // Sender side.
  StatusOr<Peer*> GetPeer(const std::string& peer);
  void DropPeer(const std::string& peer);
  // Receive thread: accepts connections, closes failed endpoints, pulls messages.
  void ReceiveLoop();
  void Accept(ucp_conn_request* request);
  void CloseFailedAccepted();
  // Takes the next message off the receive worker, if there is one and room in the queue.
  bool PullOneMessage();
  // Marks a pulled message received (ok) or dropped (error).
  void Complete(Incoming* in, const Status& status);
  void Wake();

  std::string address_;
  ucp_context* context_ = nullptr;
  ucp_worker* send_worker_ = nullptr;
  ucp_worker* recv_worker_ = nullptr;
  ucp_listener* listener_ = nullptr;
  int send_efd_ = -1;  // owned by UCX
  int recv_efd_ = -1;  // owned by UCX
  int wake_fd_ = -1;   // eventfd that wakes the receive thread (stop, room in the queue)

  // Sender side: touched only by the sender thread and the destructor.
  std::map<std::string, std::unique_ptr<Peer>> peers_;

  // Endpoints peers connected with (on recv_worker_): touched only by the receive thread, and by
  // the destructor after it has joined.
  std::vector<std::unique_ptr<Accepted>> accepted_;
  std::thread receive_thread_;

  // Shared between the receive thread and Receive().
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::unique_ptr<Incoming>> queue_;  // in match order; the front is handed out first
  size_t queued_bytes_ = 0;
  Status first_error_;
};

}  // namespace laminar
