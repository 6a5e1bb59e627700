// The manager's ledger as a tool that watches a run from outside sees it (laminar chaos, tests):
// asked over the manager's control socket as the actor asks for it, at the endpoint `laminar run`
// prints when every role is up.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace laminar::launch {

// The manager endpoint that the last "[run] N rollouts, manager E, relay E; ..." line of
// `run_log` (a `laminar run`'s stderr) names; empty when there is none yet.
std::string ManagerEndpointInRunLog(std::string_view run_log);

// The manager's snapshot (data cursor, buffer, groups in flight with the rollout holding each),
// asked as `sender`, with the run's CURVE keys when this process enabled them. Errors: the call's
// (DeadlineExceeded past `timeout_ms`), the reply's decoding, or DataLoss for a snapshot that is
// not a JSON object.
StatusOr<nlohmann::json> AskManagerLedger(const std::string& endpoint, const std::string& sender,
                                          int timeout_ms);

}  // namespace laminar::launch
