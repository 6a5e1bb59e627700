// GlooCollective: the CPU data-parallel backend, Gloo's collectives over its TCP transport, with
// ranks meeting through the ZeroMQ rendezvous of trainer/collective_rendezvous.h.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "trainer/collective.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace laminar::trainer {

// One rank of a Gloo group (gloo::rendezvous::Context, full mesh of TCP pairs). Algorithms: ring
// all-reduce (gloo::allreduce), binomial-tree broadcast, all-to-all barrier. Owns its context,
// TCP device and sockets. Not thread-safe (see Collective). Gloo's exceptions are caught here and
// returned as Status; they never leave this class.
class GlooCollective : public Collective {
 public:
  // Joins the group: rank 0 binds `options.rendezvous_address` and serves the store; every rank
  // announces itself there, publishes the addresses of its TCP pairs, connects to every peer, and
  // waits in a barrier (after which rank 0 stops serving). The whole join is bounded by
  // `options.rendezvous_timeout_ms`; each collective by `options.timeout_ms`.
  // Errors, prefixed "gloo rendezvous at ADDRESS (rank R of W)": InvalidArgument for bad options;
  // Unavailable when rank 0 cannot bind the address (in use, not this machine's); DeadlineExceeded
  // when rank 0 never answered or some rank never joined (the message lists the ranks missing,
  // as rank 0's store saw them); InvalidArgument when ranks disagree on the world size or two
  // processes claim one rank.
  // Side effect: SIGPIPE is set to ignored for the whole process (if it had no handler), because
  // Gloo's TCP writes to a dead peer would otherwise kill this process instead of failing.
  static StatusOr<std::unique_ptr<GlooCollective>> Create(const CollectiveOptions& options);
  ~GlooCollective() override;
  GlooCollective(const GlooCollective&) = delete;
  GlooCollective& operator=(const GlooCollective&) = delete;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  const char* backend() const override { return "gloo"; }
  // data: host memory. Errors prefixed "gloo at ADDRESS (rank R of W): all-reduce of N f32".
  Status AllReduceSum(std::span<float> data) override;
  Status AllReduceSum(std::span<double> data) override;
  Status Broadcast(std::span<float> data, int root) override;
  Status Barrier() override;
  Status error() const override { return error_; }

 private:
  explicit GlooCollective(const CollectiveOptions& options) : options_(options) {}
  template <typename T>
  Status AllReduceImpl(std::span<T> data, const char* dtype);
  // Runs `op` (Gloo calls that may throw); turns an exception into this rank's sticky error.
  template <typename Op>
  Status Run(std::string_view what, Op&& op);
  std::string Where() const;

  CollectiveOptions options_;
  std::shared_ptr<gloo::Context> context_;
  Status error_;  // the first failed collective; every later call returns it
};

}  // namespace laminar::trainer
