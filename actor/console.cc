// Console lines for the actor; see console.h.
#include "actor/console.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

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

std::string ProgressLine(const StepProgress& p, double now_unix_s, int width) {
  char elapsed[32];
  std::snprintf(elapsed, sizeof(elapsed), "  %.1f s", std::max(0.0, now_unix_s - p.since_unix_s));
  std::string line = "step " + std::to_string(p.step) + "  " + p.phase;
  if (p.phase == "generating") {
    const int64_t need = std::max<int64_t>(p.samples_needed, 0);
    const int64_t have = std::clamp<int64_t>(p.samples, 0, need);
    const int64_t filled = need > 0 ? have * width / need : 0;
    line += " [" + std::string(static_cast<size_t>(filled), '#') +
            std::string(static_cast<size_t>(width - filled), '-') + "] " + std::to_string(have) +
            "/" + std::to_string(need) + " samples";
  }
  return line + elapsed;
}

std::string ProgressJson(const StepProgress& p) {
  return nlohmann::json{{"step", p.step},
                        {"phase", p.phase},
                        {"samples", p.samples},
                        {"samples_needed", p.samples_needed},
                        {"since_unix_s", p.since_unix_s}}
      .dump();
}

std::optional<StepProgress> ParseProgress(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  StepProgress p;
  try {
    p.step = j.at("step").get<int64_t>();
    p.phase = j.at("phase").get<std::string>();
    p.samples = j.at("samples").get<int64_t>();
    p.samples_needed = j.at("samples_needed").get<int64_t>();
    p.since_unix_s = j.at("since_unix_s").get<double>();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return p;
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace laminar::actor
