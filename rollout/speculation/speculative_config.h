// The recipe's rollout.speculative block, the drafter kinds and the registry that makes a drafter
// from its kind.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/llama_model.h"
#include "rollout/speculation/drafter.h"
#include "rollout/speculation/suffix_drafter.h"

namespace laminar::rollout {

// `rollout.speculative.draft_model: policy`: the draft_model drafter's model is the policy itself
// in `draft_weight_dtype`, built by each rollout from every version it pulls (so it follows the
// policy; the actor publishes no draft tensors). The policy's weights in a cheaper format are a
// draft with the same vocabulary and close distributions (QSpec, Zhao et al., arXiv 2410.11305).
inline constexpr std::string_view kPolicyDraftModel = "policy";

// The drafters, by the recipe's rollout.speculative.drafter name: off, suffix (SuffixDrafter),
// layer_skip and draft_model (ModelDrafter).
enum class DrafterKind { kOff, kSuffix, kLayerSkip, kDraftModel };

struct SpeculativeConfig;

// One drafter of the registry: its recipe name, whether it runs a model (model drafters draft
// ahead and catch up; the others do neither), and how it is made from a validated config.
struct DrafterEntry {
  DrafterKind kind;
  std::string_view name;
  bool runs_model;
  StatusOr<std::unique_ptr<Drafter>> (*make)(const SpeculativeConfig& config);
};

// Every drafter, off first, in the order their names are listed to users.
std::span<const DrafterEntry> DrafterRegistry();
// The registry's entry of `kind`.
const DrafterEntry& DrafterEntryOf(DrafterKind kind);
// The recipe name of `kind` ("off", "suffix", "layer_skip", "draft_model").
std::string_view DrafterName(DrafterKind kind);
// The kind a recipe name means. Errors: InvalidArgument quoting `name` and listing the known names.
StatusOr<DrafterKind> ParseDrafterKind(std::string_view name);

// The recipe's `rollout.speculative` block.
struct SpeculativeConfig {
  DrafterKind drafter = DrafterKind::kOff;
  // Drafted nodes per tree at most, in [1, 63] (the verification span holds the root too, and
  // tree attention takes at most 64 tokens).
  int64_t max_draft_tokens = 8;
  // true: each step's budgets come from PlanDraftBudgets (acceptance history and measured step
  // costs; speculation switches itself off when it does not pay). false: every decode asks for
  // max_draft_tokens.
  bool adaptive = true;
  // Model drafters draft ahead on their own thread while the target verifies (DraftAhead).
  bool async_draft = false;
  SuffixDrafterConfig suffix;
  int64_t layer_skip_keep = 0;  // layer_skip: layers kept (0: half the policy's, rounded up)
  // draft_model: the drafter model (borrowed; outlives the engine). Required for draft_model by
  // MakeDrafter (not by Validate: a rollout worker builds it from the first version it pulls).
  const engine::LlamaModel* draft_model = nullptr;
  // Model drafters stop a chain once the product of its tokens' q falls below this (see
  // ModelDrafter). Off by default: at temperature > 0 the chance that a drawn token is accepted,
  // min(1, p/q), does not grow with q of the draw, and a near-exact drafter (SmolLM2's own Q4_1
  // blocks with Q8 activations: 0.97 of its tokens accepted at T = 1) stopped after 2-3 tokens of
  // its budget of 8 at 0.05. Chains are bounded by the budgets planned from measured acceptance
  // (adaptive), or run to max_draft_tokens (adaptive: false). Greedy chains never use it.
  double min_confidence = 0;
  // Model drafters: tokens of the drafter's output head besides those seen (ModelDrafter's draft
  // vocabulary); 0: the whole vocabulary.
  int64_t draft_vocab = 0;
  uint64_t seed = 0;  // model drafters' own sampling stream
  bool enabled() const { return drafter != DrafterKind::kOff; }
  // InvalidArgument naming the field.
  Status Validate() const;
};

// A drafter's name with variant suffixes, as benchmarks and tests write it: "draft_model+async",
// "layer_skip+vocab", "draft_model+async+vocab" (suffixes in any order).
struct DrafterVariant {
  DrafterKind drafter = DrafterKind::kOff;
  bool async_draft = false;  // +async: SpeculativeConfig::async_draft
  bool vocab = false;        // +vocab: a draft vocabulary (SpeculativeConfig::draft_vocab)
};
// Errors: ParseDrafterKind's for the name left after the suffixes.
StatusOr<DrafterVariant> ParseDrafterVariant(std::string_view name);

// The drafter `config` names, made by its registry entry (null for off). Errors:
// config.Validate()'s; InvalidArgument for draft_model without a draft model.
StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const SpeculativeConfig& config);

}  // namespace laminar::rollout
