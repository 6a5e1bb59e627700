// The draft_model drafter: a separate small model with the policy's vocabulary (its weights may
// come with each version); the drafting machinery is ModelDrafter's (model_drafter.cc).
#include "core/check.h"
#include "rollout/speculation/model_drafter.h"

namespace laminar::rollout {

std::unique_ptr<ModelDrafter> ModelDrafter::DraftModel(const engine::LlamaModel* draft,
                                                       double min_confidence, uint64_t seed,
                                                       int64_t draft_vocab) {
  LAMINAR_CHECK(draft != nullptr) << "draft_model needs a model";
  std::unique_ptr<ModelDrafter> d(
      new ModelDrafter(DrafterKind::kDraftModel, min_confidence, seed, draft_vocab));
  d->model_ = draft;
  return d;
}

Status ModelDrafter::UseDraftModel(const engine::LlamaModel* policy,
                                   const engine::LlamaModel* draft) {
  const engine::LlamaModel* next = draft != nullptr ? draft : model_;
  if (next->config().vocab_size != policy->config().vocab_size) {
    return InvalidArgumentError(
        "draft_model: its vocabulary of " + std::to_string(next->config().vocab_size) +
        " tokens differs from the policy's " + std::to_string(policy->config().vocab_size));
  }
  model_ = next;
  return OkStatus();
}

}  // namespace laminar::rollout
