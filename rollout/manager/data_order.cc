// Epoch orders, group seeds and prompt ids of the rollout manager.
#include "rollout/manager/data_order.h"

#include <utility>

namespace laminar::manager {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// SplitMix64's output function (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014).
uint64_t Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Mix(uint64_t a, uint64_t b) { return Finalize(a ^ Finalize(b + kGolden)); }

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Finalize(state_ += kGolden); }
  // Uniform in [0, bound), bound >= 1, without modulo bias: draws below 2^64 mod bound are
  // rejected.
  uint64_t Below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    uint64_t r = Next();
    while (r < threshold) r = Next();
    return r % bound;
  }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<int64_t> EpochOrder(int64_t num_rows, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(num_rows > 0 ? num_rows : 0));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (!shuffle) return order;
  SplitMix64 rng(Mix(seed, static_cast<uint64_t>(epoch)));
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[rng.Below(i)]);
  }
  return order;
}

uint64_t GroupSeed(uint64_t seed, int64_t row, int64_t epoch) {
  return Mix(Mix(seed, static_cast<uint64_t>(epoch)), static_cast<uint64_t>(row));
}

std::string MakePromptId(std::string_view row_id, int64_t epoch) {
  return std::string(row_id) + "@" + std::to_string(epoch);
}

std::optional<ParsedPromptId> ParsePromptId(std::string_view prompt_id) {
  const size_t at = prompt_id.rfind('@');
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view digits = prompt_id.substr(at + 1);
  // Canonical decimal only (no sign, no leading zero), so parsing inverts MakePromptId exactly.
  if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) {
    return std::nullopt;
  }
  int64_t epoch = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    epoch = epoch * 10 + (c - '0');
  }
  if (epoch >= (int64_t{1} << 62)) return std::nullopt;
  return ParsedPromptId{prompt_id.substr(0, at), epoch};
}

}  // namespace laminar::manager
