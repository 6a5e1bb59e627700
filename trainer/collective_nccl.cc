// NcclCollective over the NCCL and CUDA runtime APIs (a plain C++ file: no kernels of its own), or,
// in a build without NCCL, a CreateNcclCollective that says so.
#include "trainer/collective_nccl.h"

#include "core/cuda/device.h"

#if LAMINAR_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/host.h"
#include "core/logging.h"
#include "trainer/collective_rendezvous.h"
#endif

namespace laminar::trainer {

#if !LAMINAR_HAVE_NCCL

bool BuiltWithNccl() { return false; }

StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(const CollectiveOptions&) {
  return UnimplementedError(
      "collective backend 'nccl': this build has no NCCL (configure with CUDA and NCCL found, see "
      "cmake/LaminarDependencies.cmake); use 'gloo'");
}

#else  // LAMINAR_HAVE_NCCL

namespace {

constexpr char kUniqueIdKey[] = "nccl_unique_id";
constexpr int kPollSleepUs = 50;           // between polls of a running collective
constexpr int kFinalizeTimeoutMs = 10000;  // the destructor's wait for ncclCommFinalize

Status CudaError(cudaError_t e, std::string_view what) {
  return InternalError(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                       cudaGetErrorString(e) + ")");
}

Status NcclError(ncclResult_t r, ncclComm_t comm, std::string_view what) {
  std::string msg = std::string(what) + ": " + ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(comm); last != nullptr && last[0] != '\0') {
    msg += std::string(" (") + last + ")";
  }
  // System and remote errors are a peer or the network going away; the rest are our bugs or
  // CUDA's.
  if (r == ncclSystemError || r == ncclRemoteError) return UnavailableError(msg);
  return InternalError(msg);
}

std::string RendezvousWhere(const CollectiveOptions& o) {
  return "nccl rendezvous at " + o.rendezvous_address + " (rank " + std::to_string(o.rank) +
         " of " + std::to_string(o.world_size) + ")";
}

// Polls a non-blocking communicator until its pending operation (init, enqueue, finalize) is done.
// Returns ncclInProgress when `deadline_ms` passes first.
ncclResult_t PollComm(ncclComm_t comm, int64_t deadline_ms) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (SteadyNowMs() > deadline_ms) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(kPollSleepUs));
  }
}

// Shares rank 0's unique id through the rendezvous.
StatusOr<ncclUniqueId> ShareUniqueId(RendezvousClient& client, int rank) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return NcclError(r, nullptr, "ncclGetUniqueId");
    }
    LAMINAR_RETURN_IF_ERROR(
        client.Set(kUniqueIdKey, std::string_view(reinterpret_cast<const char*>(&id), sizeof(id))));
    return id;
  }
  LAMINAR_ASSIGN_OR_RETURN(std::string bytes, client.WaitGet(kUniqueIdKey));
  if (bytes.size() != sizeof(id)) {
    return InvalidArgumentError("rank 0 published an NCCL unique id of " +
                                std::to_string(bytes.size()) + " bytes, expected " +
                                std::to_string(sizeof(id)) + " (another NCCL version?)");
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

}  // namespace

bool BuiltWithNccl() { return true; }

StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(const CollectiveOptions& options) {
  LAMINAR_ASSIGN_OR_RETURN(auto nccl, NcclCollective::Create(options));
  return std::unique_ptr<Collective>(std::move(nccl));
}

StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(const CollectiveOptions& options) {
  const std::string where = RendezvousWhere(options);
  LAMINAR_RETURN_IF_ERROR(ValidateCollectiveOptions(options), where);
  const int num_devices = CudaDeviceCount();
  if (num_devices == 0) return FailedPreconditionError(where + ": no CUDA device is visible");
  const int device = options.cuda_device >= 0 ? options.cuda_device : options.rank % num_devices;
  if (device >= num_devices) {
    return FailedPreconditionError(where + ": cuda_device " + std::to_string(device) +
                                   " but only " + std::to_string(num_devices) +
                                   " device(s) are visible");
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, where + ": cudaSetDevice(" + std::to_string(device) + ")");
  }

  LAMINAR_ASSIGN_OR_RETURN(RendezvousSession session,
                           JoinRendezvous(options.rendezvous_address, options.rank,
                                          options.world_size, options.rendezvous_timeout_ms),
                           where);
  RendezvousClient& client = *session.client;
  auto id = ShareUniqueId(client, options.rank);
  if (!id.ok()) {
    return Status(id.status().code(), id.status().message() + client.MissingRanksNote())
        .WithContext(where);
  }

  std::unique_ptr<NcclCollective> self(new NcclCollective(options, device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing peer ends in our timeout, not a hang
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, options.world_size, *id, options.rank, &config);
  if (r == ncclSuccess || r == ncclInProgress) r = PollComm(comm, client.deadline_ms());
  if (r != ncclSuccess) {
    Status error =
        r == ncclInProgress
            ? DeadlineExceededError("ncclCommInitRankConfig did not finish within " +
                                    std::to_string(options.rendezvous_timeout_ms) + " ms")
            : NcclError(r, comm, "ncclCommInitRankConfig");
    if (comm != nullptr) ncclCommAbort(comm);
    return Status(error.code(), error.message() + client.MissingRanksNote()).WithContext(where);
  }
  self->comm_ = comm;
  // Every rank that finished init had read the id, so rank 0's server may stop with this scope.
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreate(&stream); e != cudaSuccess) {
    return CudaError(e, where + ": cudaStreamCreate");
  }
  self->stream_ = stream;
  LAMINAR_LOG(INFO, TRAINER) << "nccl: rank " << options.rank << " of " << options.world_size
                             << " joined at " << options.rendezvous_address << " on "
                             << CudaDeviceName(device);
  return self;
}

NcclCollective::~NcclCollective() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    ncclResult_t r = ncclCommFinalize(comm_);  // flushes; non-blocking, so polled
    if (r == ncclSuccess || r == ncclInProgress) {
      r = PollComm(comm_, SteadyNowMs() + kFinalizeTimeoutMs);
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (staging_ != nullptr) cudaFree(staging_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string NcclCollective::Where() const {
  return "nccl at " + options_.rendezvous_address + " (rank " + std::to_string(options_.rank) +
         " of " + std::to_string(options_.world_size) + ", device " + std::to_string(device_) + ")";
}

Status NcclCollective::Fail(Status error, std::string_view what) {
  error_ = error.WithContext(Where() + ": " + std::string(what));
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);  // frees peers blocked on us and our stream's pending kernels
    comm_ = nullptr;
  }
  LAMINAR_LOG(ERROR, TRAINER) << error_.message();
  return error_;
}

Status NcclCollective::WaitDone(int64_t deadline_ms, std::string_view what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess) {
      return Fail(NcclError(r, comm_, "ncclCommGetAsyncError"), what);
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(NcclError(state, comm_, "NCCL"), what);
    }
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess && state == ncclSuccess) return OkStatus();
    if (q != cudaSuccess && q != cudaErrorNotReady) return Fail(CudaError(q, "stream"), what);
    if (SteadyNowMs() > deadline_ms) {
      return Fail(
          DeadlineExceededError("not finished within " + std::to_string(options_.timeout_ms) +
                                " ms (a peer is missing or dead)"),
          what);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(kPollSleepUs));
  }
}

Status NcclCollective::Collect(Op op, void* data, size_t count, size_t element_bytes, int nccl_type,
                               int root, std::string_view what) {
  if (!error_.ok()) {
    return FailedPreconditionError(Where() + ": " + std::string(what) +
                                   " after an earlier failure: " + error_.message());
  }
  if (count == 0) return OkStatus();
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return Fail(CudaError(e, "cudaSetDevice"), what);
  }
  const int64_t deadline_ms = SteadyNowMs() + options_.timeout_ms;
  const size_t bytes = count * element_bytes;

  cudaPointerAttributes attributes{};
  if (cudaError_t e = cudaPointerGetAttributes(&attributes, data); e != cudaSuccess) {
    return Fail(CudaError(e, "cudaPointerGetAttributes"), what);
  }
  const bool on_device =
      attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  void* buffer = data;
  if (!on_device) {
    if (staging_bytes_ < bytes) {
      if (staging_ != nullptr) cudaFree(staging_);
      staging_ = nullptr;
      staging_bytes_ = 0;
      if (cudaError_t e = cudaMalloc(&staging_, bytes); e != cudaSuccess) {
        return Fail(CudaError(e, "cudaMalloc of the staging buffer"), what);
      }
      staging_bytes_ = bytes;
    }
    buffer = staging_;
    if (cudaError_t e = cudaMemcpyAsync(buffer, data, bytes, cudaMemcpyHostToDevice, stream_);
        e != cudaSuccess) {
      return Fail(CudaError(e, "copy to the staging buffer"), what);
    }
  }
  const auto type = static_cast<ncclDataType_t>(nccl_type);
  ncclResult_t r = op == Op::kAllReduceSum
                       ? ncclAllReduce(buffer, buffer, count, type, ncclSum, comm_, stream_)
                       : ncclBroadcast(buffer, buffer, count, type, root, comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) return Fail(NcclError(r, comm_, "enqueue"), what);
  // Wait before copying back: a copy to pageable memory would block without a timeout.
  LAMINAR_RETURN_IF_ERROR(WaitDone(deadline_ms, what));
  if (!on_device) {
    if (cudaError_t e = cudaMemcpy(data, buffer, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess) {
      return Fail(CudaError(e, "copy from the staging buffer"), what);
    }
  }
  return OkStatus();
}

Status NcclCollective::AllReduceSum(std::span<float> data) {
  return Collect(Op::kAllReduceSum, data.data(), data.size(), sizeof(float), ncclFloat32, 0,
                 "all-reduce of " + std::to_string(data.size()) + " f32");
}

Status NcclCollective::AllReduceSum(std::span<double> data) {
  return Collect(Op::kAllReduceSum, data.data(), data.size(), sizeof(double), ncclFloat64, 0,
                 "all-reduce of " + std::to_string(data.size()) + " f64");
}

Status NcclCollective::Broadcast(std::span<float> data, int root) {
  if (root < 0 || root >= options_.world_size) {
    return InvalidArgumentError(Where() + ": broadcast root " + std::to_string(root) +
                                " is outside [0, " + std::to_string(options_.world_size) + ")");
  }
  return Collect(
      Op::kBroadcast, data.data(), data.size(), sizeof(float), ncclFloat32, root,
      "broadcast of " + std::to_string(data.size()) + " f32 from rank " + std::to_string(root));
}

Status NcclCollective::Barrier() {
  float one = 1.0f;
  return Collect(Op::kAllReduceSum, &one, 1, sizeof(float), ncclFloat32, 0, "barrier");
}

#endif  // LAMINAR_HAVE_NCCL

}  // namespace laminar::trainer
