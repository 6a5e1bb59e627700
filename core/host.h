// Small facts about the machine this process runs on: its hostname (relays and rollouts compare
// them to decide on shared memory) and a monotonic clock in milliseconds for deadlines.
#pragma once

#include <cstdint>
#include <string>

namespace laminar {

// Milliseconds of std::chrono::steady_clock: only differences mean anything.
int64_t SteadyNowMs();
// gethostname(2); "localhost" if it fails.
std::string Hostname();

}  // namespace laminar
