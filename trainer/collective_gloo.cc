// GlooCollective: a gloo::rendezvous::Store over the ZeroMQ rendezvous, connectFullMesh over a
// gloo::transport::tcp device, and gloo::allreduce/broadcast/barrier with their exceptions caught.
#include "trainer/collective_gloo.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#include "core/host.h"
#include "core/logging.h"
#include "trainer/collective_rendezvous.h"

namespace laminar::trainer {
namespace {

// Gloo's Store interface over RendezvousClient. Gloo expects failures as exceptions; the Status
// behind the last one is kept so that the caller reports ours rather than Gloo's rewording.
class ZmqGlooStore : public gloo::rendezvous::Store {
 public:
  ZmqGlooStore(RendezvousClient* client, int timeout_ms)
      : client_(client), timeout_ms_(timeout_ms) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(client_->Set(key, std::string_view(data.data(), data.size())), key);
  }
  std::vector<char> get(const std::string& key) override {
    auto value = client_->WaitGet(key);
    Check(value.status(), key);
    return std::vector<char>(value->begin(), value->end());
  }
  // Gloo passes the context timeout, which is the rendezvous timeout: the client's deadline (set
  // from the same timeout when the join began) is the tighter bound, so it alone applies.
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& key : keys) Check(client_->WaitGet(key).status(), key);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);
  }

  const Status& error() const { return error_; }

 private:
  // Gloo's keys are rank numbers, under which each rank publishes the addresses of its pairs.
  void Check(const Status& s, const std::string& key) {
    if (s.ok()) return;
    error_ =
        s.code() == StatusCode::kDeadlineExceeded
            ? DeadlineExceededError("rank " + key + " did not publish its Gloo addresses within " +
                                    std::to_string(timeout_ms_) + " ms")
            : s;
    throw gloo::IoException(error_.ToString());
  }
  RendezvousClient* client_;
  int timeout_ms_;
  Status error_;
};

// Gloo reports timeouts as IoException("... Timed out ..."), dead peers as IoException too.
Status FromGlooException(const std::exception& e) {
  const std::string what = e.what();
  if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos) {
    return DeadlineExceededError(what);
  }
  return UnavailableError(what);
}

// Gloo's TCP pairs write with writev(2), which raises SIGPIPE when the peer has died: by default
// that ends this process before Gloo can report the error. Ignored unless someone installed a
// handler of their own.
void IgnoreSigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

std::string RendezvousWhere(const CollectiveOptions& o) {
  return "gloo rendezvous at " + o.rendezvous_address + " (rank " + std::to_string(o.rank) +
         " of " + std::to_string(o.world_size) + ")";
}

}  // namespace

StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(const CollectiveOptions& options) {
  const std::string where = RendezvousWhere(options);
  LAMINAR_RETURN_IF_ERROR(ValidateCollectiveOptions(options), where);
  LAMINAR_ASSIGN_OR_RETURN(RendezvousAddress address,
                           ParseRendezvousAddress(options.rendezvous_address), where);
  std::string local_host = options.local_host;
  if (local_host.empty()) {
    LAMINAR_ASSIGN_OR_RETURN(local_host, LocalAddressToward(address.host), where);
  }

  IgnoreSigpipe();
  LAMINAR_ASSIGN_OR_RETURN(RendezvousSession session,
                           JoinRendezvous(options.rendezvous_address, options.rank,
                                          options.world_size, options.rendezvous_timeout_ms),
                           where);
  RendezvousClient& client = *session.client;

  std::unique_ptr<GlooCollective> self(new GlooCollective(options));
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
  ZmqGlooStore store(&client, options.rendezvous_timeout_ms);
  try {
    context->setTimeout(std::chrono::milliseconds(options.rendezvous_timeout_ms));
    gloo::transport::tcp::attr attr;
    attr.hostname = local_host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context->connectFullMesh(store, device);
    // Every rank past this barrier has finished reading the store, so rank 0 may stop serving it.
    gloo::BarrierOptions barrier(context);
    barrier.setTimeout(
        std::chrono::milliseconds(std::max<int64_t>(1, client.deadline_ms() - SteadyNowMs())));
    gloo::barrier(barrier);
  } catch (const std::exception& e) {
    Status error = store.error().ok() ? FromGlooException(e) : store.error();
    return Status(error.code(), error.message() + client.MissingRanksNote()).WithContext(where);
  }
  context->setTimeout(std::chrono::milliseconds(options.timeout_ms));
  self->context_ = std::move(context);
  LAMINAR_LOG(INFO, TRAINER) << "gloo: rank " << options.rank << " of " << options.world_size
                             << " joined at " << options.rendezvous_address << " (pairs on "
                             << local_host << ")";
  return self;
}

GlooCollective::~GlooCollective() = default;

std::string GlooCollective::Where() const {
  return "gloo at " + options_.rendezvous_address + " (rank " + std::to_string(options_.rank) +
         " of " + std::to_string(options_.world_size) + ")";
}

template <typename Op>
Status GlooCollective::Run(std::string_view what, Op&& op) {
  if (!error_.ok()) {
    return FailedPreconditionError(Where() + ": " + std::string(what) +
                                   " after an earlier failure: " + error_.message());
  }
  try {
    op();
    return OkStatus();
  } catch (const std::exception& e) {
    error_ = FromGlooException(e).WithContext(Where() + ": " + std::string(what));
    LAMINAR_LOG(ERROR, TRAINER) << error_.message();
    return error_;
  }
}

template <typename T>
Status GlooCollective::AllReduceImpl(std::span<T> data, const char* dtype) {
  const std::string what = "all-reduce of " + std::to_string(data.size()) + " " + dtype;
  if (data.empty()) return Run(what, [] {});
  return Run(what, [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    using ReduceFn = void (*)(void*, const void*, const void*, size_t);
    opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<T>));
    opts.setTimeout(std::chrono::milliseconds(options_.timeout_ms));
    gloo::allreduce(opts);
  });
}

Status GlooCollective::AllReduceSum(std::span<float> data) { return AllReduceImpl(data, "f32"); }
Status GlooCollective::AllReduceSum(std::span<double> data) { return AllReduceImpl(data, "f64"); }

Status GlooCollective::Broadcast(std::span<float> data, int root) {
  if (root < 0 || root >= options_.world_size) {
    return InvalidArgumentError(Where() + ": broadcast root " + std::to_string(root) +
                                " is outside [0, " + std::to_string(options_.world_size) + ")");
  }
  const std::string what =
      "broadcast of " + std::to_string(data.size()) + " f32 from rank " + std::to_string(root);
  if (data.empty()) return Run(what, [] {});
  return Run(what, [&] {
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(data.data(), data.size());
    opts.setRoot(root);
    opts.setTimeout(std::chrono::milliseconds(options_.timeout_ms));
    gloo::broadcast(opts);
  });
}

Status GlooCollective::Barrier() {
  return Run("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(std::chrono::milliseconds(options_.timeout_ms));
    gloo::barrier(opts);
  });
}

}  // namespace laminar::trainer
