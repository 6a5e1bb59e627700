// Console lines for the actor; see console.h.
#include "actor/console.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace laminar::actor {
namespace {

// printf of one metric, or "-" when the step did not report it.
std::string Field(const StepMetrics& m, const char* key, const char* format) {
  auto it = m.find(key);
  if (it == m.end() || !std::isfinite(it->second)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, it->second);
  return buf;
}

}  // namespace

std::string ConsoleLine(const StepMetrics& metrics, double elapsed_s) {
  const int64_t total = std::max<int64_t>(0, std::llround(elapsed_s));
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "%lld:%02lld:%02lld",
                static_cast<long long>(total / 3600), static_cast<long long>(total / 60 % 60),
                static_cast<long long>(total % 60));
  return "[actor] step " + Field(metrics, "training/global_step", "%.0f") + " v" +
         Field(metrics, "training/version", "%.0f") + "  reward " +
         Field(metrics, "critic/score/mean", "%.3f") + "  len " +
         Field(metrics, "response_length/mean", "%.1f") + "  staleness " +
         Field(metrics, "staleness/mean", "%.2f") + "  " +
         Field(metrics, "perf/throughput", "%.0f") + " tok/s  elapsed " + elapsed;
}

std::string ProgressBar(int64_t have, int64_t need, int width) {
  const int64_t h = std::clamp<int64_t>(have, 0, std::max<int64_t>(need, 0));
  const int64_t filled = need > 0 ? h * width / need : 0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '-');
  return "[actor] waiting for batch [" + bar + "] " + std::to_string(h) + "/" +
         std::to_string(need) + " groups";
}

}  // namespace laminar::actor
