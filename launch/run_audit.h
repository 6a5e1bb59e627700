// What a finished or interrupted run's files say of its data: every sample trained at most once
// and every prompt the manager handed out trained, buffered or in flight (laminar chaos, `laminar
// audit`, the multi-machine tests).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

namespace laminar::launch {

// The JSON objects of a JSON Lines file, one per line; lines that are not objects are skipped; a
// missing file has none.
std::vector<nlohmann::json> ReadJsonLines(const std::filesystem::path& path);

// Exactly once, from the newest checkpoint in `checkpoint_dir` (its trained steps and the
// manager's ledger) and the actor's trajectory log (actor.trajectory_log: every trained sample,
// a line each; a step trained again after a resume replaces the earlier lines). Returns
// {"checkpoint", "steps", "samples_trained", "groups_trained", "groups_buffered_or_in_flight",
// "groups_handed_out", "duplicated", "lost", "unaccounted_extra"}; "lost" is -1 and
// "groups_handed_out" -1 without a checkpoint holding a ledger.
nlohmann::json AuditExactlyOnce(const std::filesystem::path& checkpoint_dir,
                                const std::filesystem::path& trajectory_log);

}  // namespace laminar::launch
