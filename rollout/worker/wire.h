// Conversions between the rollout engine's types and laminar's wire messages (proto/): the
// sampling and stop options of a PromptGroup, and the migrated in-flight samples of repack
// (docs/architecture.md).
#pragma once

#include <string>

#include "core/status.h"
#include "engine/sampler.h"
#include "proto/trajectory.pb.h"
#include "rollout/engine/rollout_engine.h"
#include "rollout/engine/stop_matcher.h"

namespace laminar::rollout {

// proto::SamplingParams <-> the engine's sampling parameters and stop options. The proto's
// `stop` strings are StopOptions::stop_strings; keep_special_tokens is !skip_special_tokens.
proto::SamplingParams ToProto(const engine::SamplingParams& sampling, const StopOptions& stop);
engine::SamplingParams SamplingFromProto(const proto::SamplingParams& p);
StopOptions StopFromProto(const proto::SamplingParams& p);

// A sample exported by RolloutEngine::Export as a message; `prompt_id` is the manager's id of
// its prompt group (SampleState::request_id is local to the exporting engine and not sent).
proto::MigratedSample ToProto(const SampleState& state, const std::string& prompt_id);
// The state RolloutEngine::Import continues. Errors: proto::Validate's InvalidArgument naming
// the field (the importing engine checks the rest against its model and version).
// request_id is set to 0.
StatusOr<SampleState> SampleStateFromProto(const proto::MigratedSample& m);

}  // namespace laminar::rollout
