// A policy's tensors as the relay tier moves them (docs/architecture.md): the actor publishes its
// WeightStore (Hugging Face names, plain dtypes) and a rollout rebuilds one from a pulled
// version to load into its model. A version may also carry the speculative draft model's
// tensors (rollout.speculative.drafter: draft_model), named with kDraftModelPrefix, so that
// rollouts get the drafter's weights the same way as the policy's.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/weight_store.h"
#include "relay/relay_client.h"
#include "relay/wire.h"

namespace laminar::relay {

// Names of the draft model's tensors in a version: this prefix, then the Hugging Face name.
inline constexpr std::string_view kDraftModelPrefix = "draft_model/";

// Views of every tensor of `store`, by name (WeightStore::Names order) with `prefix` prepended,
// for Publisher::Publish. The views borrow `store`'s memory: keep it alive until Publish returns
// (it copies). Errors: InvalidArgument naming a quantized tensor (only plain dtypes are
// published).
StatusOr<std::vector<TensorBytes>> TensorsOf(const model::WeightStore& store,
                                             std::string_view prefix = "");

// A WeightStore holding a copy of the tensors of `version` whose names start with `prefix`, under
// their names without it; with the empty prefix, the policy's (every tensor outside
// kDraftModelPrefix). Empty when none match. Errors: InvalidArgument naming a tensor whose dtype
// name is unknown or whose bytes disagree with its shape and dtype.
StatusOr<model::WeightStore> WeightStoreOf(const PulledVersion& version,
                                           std::string_view prefix = "");

}  // namespace laminar::relay
