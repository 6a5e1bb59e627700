// NcclCollective: the GPU data-parallel backend, NCCL communicators created from a unique id that
// rank 0 shares through the ZeroMQ rendezvous (trainer/collective_rendezvous.h). Compiled only
// when CMake found CUDA and NCCL (LAMINAR_HAVE_NCCL); elsewhere CreateNcclCollective says so.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "trainer/collective.h"

#if LAMINAR_HAVE_NCCL
// NCCL's ncclComm_t and CUDA's cudaStream_t point to these (declared here, at global scope, so
// that this header needs neither nccl.h nor cuda_runtime.h).
struct ncclComm;
struct CUstream_st;
#endif

namespace laminar::trainer {

// Whether this binary was built with the NCCL backend.
bool BuiltWithNccl();

// Joins an NCCL group described by `options` (backend "nccl"). Errors: Unimplemented in a build
// without NCCL; FailedPrecondition when no CUDA device is visible; otherwise
// NcclCollective::Create's.
StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(const CollectiveOptions& options);

#if LAMINAR_HAVE_NCCL

// One rank of an NCCL group on one CUDA device (`options.cuda_device`, or rank % devices). NCCL
// forbids two ranks of one group on the same GPU.
//
// Memory: a span may be device memory (cudaMalloc or managed), reduced in place by NCCL, or host
// memory, which is staged through a device buffer this rank owns (copy in, reduce, copy out); the
// kind is read from cudaPointerGetAttributes on each call. Device data must be complete when the
// call starts: the collective runs on this rank's stream, which is ordered after the legacy
// default stream but not after other non-blocking streams (synchronize those first). Every call
// waits for its result before returning.
//
// Timeouts: the communicator is non-blocking (ncclConfig_t::blocking = 0); initialization and
// every collective are polled (ncclCommGetAsyncError, cudaStreamQuery) and aborted with
// ncclCommAbort when their timeout passes, so a missing or dead peer gives DeadlineExceeded or
// Unavailable, never a hang. Not thread-safe (see Collective); every call first selects this
// rank's device on the calling thread.
class NcclCollective : public Collective {
 public:
  // Rank 0 binds the rendezvous address, creates the ncclUniqueId and publishes it; the others
  // read it; all call ncclCommInitRankConfig. Errors, prefixed "nccl rendezvous at ADDRESS (rank R
  // of W)": as GlooCollective::Create, plus FailedPrecondition for a device index beyond the
  // visible devices and Unavailable/Internal with NCCL's or CUDA's error string.
  static StatusOr<std::unique_ptr<NcclCollective>> Create(const CollectiveOptions& options);
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  const char* backend() const override { return "nccl"; }
  // The CUDA device this rank runs on.
  int device() const { return device_; }
  Status AllReduceSum(std::span<float> data) override;
  Status AllReduceSum(std::span<double> data) override;
  Status Broadcast(std::span<float> data, int root) override;
  // An all-reduce of one f32 (NCCL has no barrier).
  Status Barrier() override;
  Status error() const override { return error_; }

 private:
  NcclCollective(const CollectiveOptions& options, int device)
      : options_(options), device_(device) {}
  enum class Op { kAllReduceSum, kBroadcast };
  // The one path for every collective: staging when `data` is host memory, enqueue, wait.
  Status Collect(Op op, void* data, size_t count, size_t element_bytes, int nccl_type, int root,
                 std::string_view what);
  // Polls until the enqueued work finished, an NCCL error arrives or timeout_ms passes.
  Status WaitDone(int64_t deadline_ms, std::string_view what);
  // Records `error` as this rank's sticky error (aborting the communicator) and returns it.
  Status Fail(Status error, std::string_view what);
  std::string Where() const;

  CollectiveOptions options_;
  int device_ = 0;
  ::ncclComm* comm_ = nullptr;       // ncclComm_t
  ::CUstream_st* stream_ = nullptr;  // cudaStream_t
  void* staging_ = nullptr;          // device buffer for host spans
  size_t staging_bytes_ = 0;
  Status error_;
};

#endif  // LAMINAR_HAVE_NCCL

}  // namespace laminar::trainer
