// The rollout manager's data order (docs/architecture.md: a resumed run hands out prompts in the
// same order as an uninterrupted one): epoch-wise Fisher-Yates shuffles and per-group sampling
// seeds from SplitMix64, so the order depends only on (seed, epoch, number of rows) and never on
// the standard library's distributions; and the prompt ids that keep (prompt id, sample index)
// unique across epochs.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace laminar::manager {

// Position of the prompt pool in the data order: the next prompt to hand out is
// EpochOrder(..., epoch)[index]. index is in [0, number of rows).
struct DataCursor {
  int64_t epoch = 0;
  int64_t index = 0;
  auto operator<=>(const DataCursor&) const = default;
};

// The order of rows [0, num_rows) in epoch `epoch` (>= 0): the identity when !shuffle, else a
// Fisher-Yates shuffle driven by SplitMix64 seeded from (seed, epoch), with unbiased bounded draws
// by rejection. Deterministic across platforms and standard libraries. num_rows >= 0.
std::vector<int64_t> EpochOrder(int64_t num_rows, uint64_t seed, int64_t epoch, bool shuffle);

// The sampling seed of the group of row `row` in epoch `epoch`: a SplitMix64 mix of the three, so
// a re-issued group is the same request (sample i then draws with rollout::SampleSeed(seed, i)).
uint64_t GroupSeed(uint64_t seed, int64_t row, int64_t epoch);

// The prompt id of row `row_id` in epoch `epoch`: "<row_id>@<epoch>", e.g. "17@0". Each
// (row, epoch) is handed out as one group, so (prompt id, sample index) is unique over a run even
// when the data is repeated for several epochs.
std::string MakePromptId(std::string_view row_id, int64_t epoch);

struct ParsedPromptId {
  std::string_view row_id;  // a view into the parsed string
  int64_t epoch = 0;
};
// The inverse of MakePromptId: splits at the last '@' (row ids may contain '@'). nullopt when
// there is no '@' or the epoch is not a canonical decimal integer in [0, 2^62) ("07" is not).
std::optional<ParsedPromptId> ParsePromptId(std::string_view prompt_id);

}  // namespace laminar::manager
