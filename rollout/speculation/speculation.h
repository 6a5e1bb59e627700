// Speculative decoding for the rollout engine, exact for RL: drafters propose a token tree per
// sequence, the target verifies every tree of a step in one packed forward with a tree mask
// (engine::SequenceSpan::tree_parents), and the acceptance rules keep every emitted token
// distributed exactly as the policy's sampler would draw it (draft_tree.h). SwiftSpec (arXiv
// 2506.11309). This header gathers the folder's parts.
#pragma once

#include "rollout/speculation/cost_model.h"
#include "rollout/speculation/draft_ahead.h"
#include "rollout/speculation/draft_tree.h"
#include "rollout/speculation/drafter.h"
#include "rollout/speculation/model_drafter.h"
#include "rollout/speculation/planner.h"
#include "rollout/speculation/speculative_config.h"
#include "rollout/speculation/suffix_drafter.h"

namespace laminar::rollout {}  // namespace laminar::rollout
