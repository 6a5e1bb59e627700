// Collective: the data-parallel collectives of actor ranks (gradient all-reduce, loss and token
// counts, weight broadcast, barriers) behind one interface. Implementations are named by mechanism:
// LocalCollective (one rank), GlooCollective (CPUs, trainer/collective_gloo.h) and NcclCollective
// (GPUs, trainer/collective_nccl.h); CreateCollective picks one by its config name.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace laminar::trainer {

// One rank's view of a group of `world_size` ranks (processes, or threads in tests). Every rank of
// the group must make the same calls in the same order with the same sizes: a collective returns
// once every rank has joined it, or with an error after the timeout.
//
// Ownership: the caller owns the buffers; calls are synchronous, so a span may be reused or freed
// as soon as the call returns. Thread-safety: not thread-safe; one thread per rank calls it (the
// rank's trainer thread). Errors are sticky: after a failed collective the group is in an unknown
// state (a peer may have died midway), so every later call returns FailedPrecondition carrying the
// first error, and the ranks must be rebuilt.
//
// Memory: Gloo and Local take host memory. NCCL takes device memory, or host memory that it stages
// through a device buffer (see NcclCollective).
class Collective {
 public:
  virtual ~Collective() = default;

  // This rank, in [0, world_size).
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "gloo", "nccl" or "local".
  virtual const char* backend() const = 0;

  // In place: data[i] becomes the sum over ranks of data[i].
  //   data  [N]  f32 (or f64), the same N on every rank; N = 0 is a no-op.
  // Summation order is the backend's (ring): the result may differ from a serial sum by rounding,
  // but it is the same on every rank. Errors: DeadlineExceeded after the collective timeout,
  // Unavailable when a peer died, naming the rendezvous address, rank and world size;
  // FailedPrecondition after an earlier error.
  virtual Status AllReduceSum(std::span<float> data) = 0;
  virtual Status AllReduceSum(std::span<double> data) = 0;

  // In place: every rank's data becomes the data of rank `root`.
  //   data  [N]  f32, the same N on every rank.
  // Errors: InvalidArgument for a root outside [0, world_size); otherwise as AllReduceSum.
  virtual Status Broadcast(std::span<float> data, int root) = 0;

  // Returns once every rank has called Barrier. Errors as AllReduceSum.
  virtual Status Barrier() = 0;

  // The first failed collective's error (OK while none failed): a group that failed is lost (a
  // peer died or stopped answering), and the ranks can only start over, from a checkpoint.
  virtual Status error() const = 0;
};

// How ranks find each other (the recipe's `trainer.collective` section or the command line).
struct CollectiveOptions {
  // "gloo" (CPUs, TCP), "nccl" (GPUs) or "local" (world_size 1, no communication).
  std::string backend = "gloo";
  // tcp://HOST:PORT, where rank 0 serves the rendezvous (ZeroMQ request/reply). HOST (a name or an
  // IPv4 address; IPv6 is not supported) must be an address of rank 0's machine that every rank
  // can reach. Ignored by "local".
  std::string rendezvous_address = "tcp://127.0.0.1:29500";
  int rank = 0;
  int world_size = 1;
  // Limit on joining the group: every rank must have called CreateCollective within this time of
  // the others (ms).
  int rendezvous_timeout_ms = 60000;
  // Limit on one collective: how long a rank waits for the slowest peer (ms). Generous by default
  // because ranks reach a gradient all-reduce after their own forward/backward.
  int timeout_ms = 300000;
  // Gloo: the address of this machine the other ranks connect to. Empty: the address this machine
  // uses to reach the rendezvous host (so 127.0.0.1 for a loopback rendezvous).
  std::string local_host;
  // NCCL: the CUDA device of this rank; -1 picks rank % (number of visible devices).
  int cuda_device = -1;
};

// Checks the fields every backend shares. Errors: InvalidArgument naming the field (world_size < 1,
// rank outside [0, world_size), timeouts <= 0, a rendezvous address that is not tcp://HOST:PORT
// with a port in [1, 65535]; the address is only checked when world_size > 1 or the backend is
// not "local").
Status ValidateCollectiveOptions(const CollectiveOptions& options);

// Rank 0 of a group of one: every collective is a no-op (a sum over one rank is the data itself).
// Thread-safe (it has no state).
class LocalCollective : public Collective {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend() const override { return "local"; }
  Status AllReduceSum(std::span<float>) override { return OkStatus(); }
  Status AllReduceSum(std::span<double>) override { return OkStatus(); }
  Status Broadcast(std::span<float> data, int root) override;
  Status Barrier() override { return OkStatus(); }
  Status error() const override { return OkStatus(); }
};

// The backends CreateCollective knows, for error messages: "gloo, local, nccl".
std::string KnownCollectiveBackends();

// Joins the group described by `options`; blocks until every rank has joined or the rendezvous
// timeout passes. Errors: InvalidArgument for bad options or an unknown backend (the message lists
// the known ones); "local" with world_size != 1; Unimplemented for "nccl" in a build without
// CUDA/NCCL; FailedPrecondition for "nccl" without a GPU; the backend's rendezvous errors
// (DeadlineExceeded naming the address, this rank, the world size and the ranks that never came).
StatusOr<std::unique_ptr<Collective>> CreateCollective(const CollectiveOptions& options);

}  // namespace laminar::trainer
