// The rollout worker's options from a recipe's rollout.* keys.
#pragma once

#include <cstdint>

#include "core/config.h"
#include "core/status.h"
#include "rollout/worker/worker.h"

namespace laminar::rollout {

// The rollout worker's options from rollout.* keys, for a model with `kv_bytes_per_token` bytes of
// K and V per token (sizes the KV pool from rollout.kv_cache_mb). Endpoints and id are left for
// the caller.
StatusOr<RolloutWorkerOptions> RolloutWorkerOptionsOf(const Config& recipe,
                                                      int64_t kv_bytes_per_token);

}  // namespace laminar::rollout
