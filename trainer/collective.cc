// Option checks, LocalCollective and the backend registry behind CreateCollective.
#include "trainer/collective.h"

#include <functional>
#include <map>
#include <string_view>

#include "trainer/collective_gloo.h"
#include "trainer/collective_nccl.h"
#include "trainer/collective_rendezvous.h"

namespace laminar::trainer {
namespace {

using Factory = std::function<StatusOr<std::unique_ptr<Collective>>(const CollectiveOptions&)>;

StatusOr<std::unique_ptr<Collective>> CreateLocal(const CollectiveOptions& options) {
  if (options.world_size != 1) {
    return InvalidArgumentError("collective backend 'local' runs one rank, but world_size is " +
                                std::to_string(options.world_size) + " (use 'gloo' or 'nccl')");
  }
  return std::unique_ptr<Collective>(std::make_unique<LocalCollective>());
}

StatusOr<std::unique_ptr<Collective>> CreateGloo(const CollectiveOptions& options) {
  LAMINAR_ASSIGN_OR_RETURN(auto gloo, GlooCollective::Create(options));
  return std::unique_ptr<Collective>(std::move(gloo));
}

const std::map<std::string, Factory, std::less<>>& Registry() {
  static const auto* registry = new std::map<std::string, Factory, std::less<>>{
      {"gloo", CreateGloo},
      {"local", CreateLocal},
      {"nccl", CreateNcclCollective},
  };
  return *registry;
}

}  // namespace

Status ValidateCollectiveOptions(const CollectiveOptions& options) {
  if (options.world_size < 1) {
    return InvalidArgumentError("collective world_size must be >= 1, got " +
                                std::to_string(options.world_size));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgumentError(
        "collective rank " + std::to_string(options.rank) +
        " is outside [0, world_size = " + std::to_string(options.world_size) + ")");
  }
  if (options.rendezvous_timeout_ms <= 0) {
    return InvalidArgumentError("collective rendezvous_timeout_ms must be > 0, got " +
                                std::to_string(options.rendezvous_timeout_ms));
  }
  if (options.timeout_ms <= 0) {
    return InvalidArgumentError("collective timeout_ms must be > 0, got " +
                                std::to_string(options.timeout_ms));
  }
  if (options.backend != "local" || options.world_size > 1) {
    LAMINAR_RETURN_IF_ERROR(ParseRendezvousAddress(options.rendezvous_address));
  }
  return OkStatus();
}

Status LocalCollective::Broadcast(std::span<float>, int root) {
  if (root != 0) {
    return InvalidArgumentError("broadcast root " + std::to_string(root) +
                                " is outside [0, 1) (local collective)");
  }
  return OkStatus();
}

std::string KnownCollectiveBackends() {
  std::string out;
  for (const auto& [name, factory] : Registry()) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

StatusOr<std::unique_ptr<Collective>> CreateCollective(const CollectiveOptions& options) {
  auto it = Registry().find(options.backend);
  if (it == Registry().end()) {
    return InvalidArgumentError("unknown collective backend '" + options.backend +
                                "' (known: " + KnownCollectiveBackends() + ")");
  }
  LAMINAR_RETURN_IF_ERROR(ValidateCollectiveOptions(options));
  return it->second(options);
}

}  // namespace laminar::trainer
