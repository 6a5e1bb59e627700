// A policy's tensors as the relay tier moves them (DESIGN.md §2, §4): the actor publishes its
// WeightStore (Hugging Face names, plain dtypes) and a rollout rebuilds one from a pulled
// version to load into its model.
#pragma once

#include <vector>

#include "core/status.h"
#include "model/weight_store.h"
#include "relay/relay_client.h"
#include "relay/wire.h"

namespace laminar::relay {

// Views of every tensor of `store`, by name (WeightStore::Names order), for Publisher::Publish.
// The views borrow `store`'s memory: keep it alive until Publish returns (it copies).
// Errors: InvalidArgument naming a quantized tensor (only plain dtypes are published).
StatusOr<std::vector<TensorBytes>> TensorsOf(const model::WeightStore& store);

// A WeightStore holding a copy of every tensor of `version`. Errors: InvalidArgument naming a
// tensor whose dtype name is unknown or whose bytes disagree with its shape and dtype.
StatusOr<model::WeightStore> WeightStoreOf(const PulledVersion& version);

}  // namespace laminar::relay
