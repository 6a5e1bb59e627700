// The layer_skip drafter: the policy itself with a subset of its layers (self-speculation),
// rebuilt from every version; the drafting machinery is ModelDrafter's (model_drafter.cc).
#include <algorithm>

#include "rollout/speculation/model_drafter.h"

namespace laminar::rollout {

std::unique_ptr<ModelDrafter> ModelDrafter::LayerSkip(int64_t keep_layers, double min_confidence,
                                                      uint64_t seed, int64_t draft_vocab) {
  std::unique_ptr<ModelDrafter> d(
      new ModelDrafter(DrafterKind::kLayerSkip, min_confidence, seed, draft_vocab));
  d->keep_layers_ = keep_layers;
  return d;
}

Status ModelDrafter::SkipLayersOf(const engine::LlamaModel* policy) {
  // Evenly spaced layers, the first and the last among them.
  const int64_t total = policy->config().num_hidden_layers;
  const int64_t keep =
      std::clamp<int64_t>(keep_layers_ > 0 ? keep_layers_ : (total + 1) / 2, 1, total);
  std::vector<int64_t> layers;
  for (int64_t i = 0; i < keep; ++i) {
    const int64_t l = keep == 1 ? 0 : i * (total - 1) / (keep - 1);
    if (layers.empty() || l > layers.back()) layers.push_back(l);
  }
  LAMINAR_ASSIGN_OR_RETURN(owned_, policy->LayerSubset(layers), "layer_skip drafter");
  model_ = owned_.get();
  return OkStatus();
}

}  // namespace laminar::rollout
