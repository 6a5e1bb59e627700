// The speculative configuration and the drafter registry; see speculative_config.h.
#include "rollout/speculation/speculative_config.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"
#include "rollout/speculation/model_drafter.h"

namespace laminar::rollout {

namespace {

StatusOr<std::unique_ptr<Drafter>> MakeNone(const SpeculativeConfig& /*config*/) {
  return std::unique_ptr<Drafter>();
}

StatusOr<std::unique_ptr<Drafter>> MakeSuffix(const SpeculativeConfig& config) {
  return std::unique_ptr<Drafter>(new SuffixDrafter(config.suffix));
}

StatusOr<std::unique_ptr<Drafter>> MakeLayerSkip(const SpeculativeConfig& config) {
  return std::unique_ptr<Drafter>(ModelDrafter::LayerSkip(
      config.layer_skip_keep, config.min_confidence, config.seed, config.draft_vocab));
}

StatusOr<std::unique_ptr<Drafter>> MakeDraftModel(const SpeculativeConfig& config) {
  if (config.draft_model == nullptr) {
    return InvalidArgumentError(
        "rollout.speculative.drafter: draft_model needs a drafter model (none given)");
  }
  return std::unique_ptr<Drafter>(ModelDrafter::DraftModel(
      config.draft_model, config.min_confidence, config.seed, config.draft_vocab));
}

constexpr DrafterEntry kRegistry[] = {
    {DrafterKind::kOff, "off", false, MakeNone},
    {DrafterKind::kSuffix, "suffix", false, MakeSuffix},
    {DrafterKind::kLayerSkip, "layer_skip", true, MakeLayerSkip},
    {DrafterKind::kDraftModel, "draft_model", true, MakeDraftModel},
};

}  // namespace

std::span<const DrafterEntry> DrafterRegistry() { return kRegistry; }

const DrafterEntry& DrafterEntryOf(DrafterKind kind) {
  for (const DrafterEntry& e : kRegistry) {
    if (e.kind == kind) return e;
  }
  LAMINAR_CHECK(false) << "drafter kind " << static_cast<int>(kind) << " is not registered";
  return kRegistry[0];
}

std::string_view DrafterName(DrafterKind kind) { return DrafterEntryOf(kind).name; }

StatusOr<DrafterKind> ParseDrafterKind(std::string_view name) {
  std::string known;
  for (const DrafterEntry& e : kRegistry) {
    if (e.name == name) return e.kind;
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  return InvalidArgumentError("rollout.speculative.drafter: '" + std::string(name) +
                              "' is not one of " + known);
}

StatusOr<DrafterVariant> ParseDrafterVariant(std::string_view name) {
  DrafterVariant v;
  for (bool more = true; more;) {
    more = false;
    for (const auto& [suffix, flag] :
         {std::pair<std::string_view, bool*>{"+async", &v.async_draft}, {"+vocab", &v.vocab}}) {
      if (name.ends_with(suffix)) {
        name.remove_suffix(suffix.size());
        *flag = true;
        more = true;
      }
    }
  }
  LAMINAR_ASSIGN_OR_RETURN(v.drafter, ParseDrafterKind(name));
  return v;
}

Status SpeculativeConfig::Validate() const {
  if (layer_skip_keep < 0) {
    return InvalidArgumentError("rollout.speculative.layer_skip_keep must be >= 0, got " +
                                std::to_string(layer_skip_keep));
  }
  if (draft_vocab < 0) {
    return InvalidArgumentError("rollout.speculative.draft_vocab must be >= 0, got " +
                                std::to_string(draft_vocab));
  }
  if (!(min_confidence >= 0 && min_confidence < 1)) {
    return InvalidArgumentError("rollout.speculative.min_confidence must be in [0, 1), got " +
                                std::to_string(min_confidence));
  }
  if (std::ranges::none_of(kRegistry, [&](const DrafterEntry& e) { return e.kind == drafter; })) {
    return InvalidArgumentError("rollout.speculative.drafter: kind " +
                                std::to_string(static_cast<int>(drafter)) +
                                " is not a registered drafter");
  }
  // (async_draft with drafter off is ignored: turning speculation off keeps the rest valid.)
  if (async_draft && enabled() && !DrafterEntryOf(drafter).runs_model) {
    return InvalidArgumentError(
        "rollout.speculative.async_draft: only the model drafters (layer_skip, draft_model) draft "
        "ahead; the drafter is " +
        std::string(DrafterName(drafter)));
  }
  if (max_draft_tokens < 1 || max_draft_tokens > 63) {
    return InvalidArgumentError("rollout.speculative.max_draft_tokens must be in [1, 63], got " +
                                std::to_string(max_draft_tokens));
  }
  return suffix.Validate();
}

StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const SpeculativeConfig& config) {
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  return DrafterEntryOf(config.drafter).make(config);
}

}  // namespace laminar::rollout
