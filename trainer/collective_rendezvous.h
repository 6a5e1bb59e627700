// Rendezvous for collectives over ZeroMQ: rank 0 serves a small key-value store at the rendezvous
// address, every rank (rank 0 included) joins it as a client, publishes what its peers need (Gloo
// pair addresses, the NCCL unique id) and waits for theirs. Used by GlooCollective and
// NcclCollective; the wire format is private to collective_rendezvous.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/zmq_transport.h"

namespace laminar::trainer {

// "tcp://HOST:PORT" split. HOST is a name or an IPv4 address.
struct RendezvousAddress {
  std::string host;
  int port = 0;
};

// Errors: InvalidArgument naming `address` when it is not tcp://HOST:PORT with a non-empty HOST
// (no '*') and a decimal PORT in [1, 65535].
StatusOr<RendezvousAddress> ParseRendezvousAddress(std::string_view address);

// The local IP address this machine uses to reach `host` (a UDP connect, nothing sent): the address
// other ranks can reach this one at. Errors: Unavailable naming `host` when it does not resolve or
// no route leads there.
StatusOr<std::string> LocalAddressToward(const std::string& host);

// Rank 0's store: answers hello/set/get/list requests on its own thread, for one group of
// `world_size` ranks. Keys live until the server stops. Owned by rank 0's collective, which stops
// it once every rank has joined. Thread-safe.
class RendezvousServer {
 public:
  // Binds `address` (tcp://HOST:PORT). Errors: Unavailable naming the address (in use, or HOST is
  // not an address of this machine).
  static StatusOr<std::unique_ptr<RendezvousServer>> Start(const std::string& address,
                                                           int world_size);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

 private:
  RendezvousServer() = default;
  struct State;
  std::unique_ptr<State> state_;  // touched only by the server thread
  std::unique_ptr<ZmqReplyServer> server_;
};

// One rank's connection to the store. Every call waits at most until the rendezvous deadline given
// at construction, so a missing rank 0 or peer ends in DeadlineExceeded, never a hang. Errors carry
// no prefix: callers add "<backend> rendezvous at ADDRESS (rank R of W)". Not thread-safe.
class RendezvousClient {
 public:
  // `deadline_ms` is on SteadyNowMs()'s clock.
  RendezvousClient(std::string address, int rank, int world_size, int64_t deadline_ms);

  // Announces this rank. Errors: DeadlineExceeded when rank 0 did not answer (it never started or
  // the address is wrong); InvalidArgument when rank 0 serves another world size or another
  // process already joined as this rank.
  Status Hello();
  // Publishes `value` under `key` (overwrites).
  Status Set(const std::string& key, std::string_view value);
  // The value of `key`, polling until some rank has set it. DeadlineExceeded naming the key when
  // the deadline passes first.
  StatusOr<std::string> WaitGet(const std::string& key);
  // The ranks that said Hello so far, ascending; waits at most `timeout_ms`, not
  // bounded by the deadline (it explains failures after it).
  StatusOr<std::vector<int>> JoinedRanks(int timeout_ms);
  // " (ranks not joined by the deadline: 1, 2)" from JoinedRanks, or "" when they cannot be
  // learned within 0.5 s, for error messages. Call it only after Hello succeeded.
  std::string MissingRanksNote();

  int64_t deadline_ms() const { return deadline_ms_; }

 private:
  StatusOr<std::string> Call(char op, std::string_view key, std::string_view value, int timeout_ms);
  int RemainingMs() const;

  std::string address_;
  int rank_;
  int world_size_;
  int64_t deadline_ms_;
  std::string token_;  // tells this process's retried hello apart from another claimant's
  ZmqRequestClient client_;
};

// A rank's part in a rendezvous: rank 0 serves it, and every rank is a client that has said hello.
struct RendezvousSession {
  std::unique_ptr<RendezvousServer> server;  // rank 0 only
  std::unique_ptr<RendezvousClient> client;
};
// Starts the server on rank 0, then connects and says hello, all before now + timeout_ms.
// Errors: RendezvousServer::Start's and RendezvousClient::Hello's.
StatusOr<RendezvousSession> JoinRendezvous(const std::string& address, int rank, int world_size,
                                           int timeout_ms);

}  // namespace laminar::trainer
