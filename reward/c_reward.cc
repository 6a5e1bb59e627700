// C ABI reward plug-ins: the options, the host's path and the hex-coded requests that carry the
// input's bytes unchanged; see c_reward.h and reward/host/c_reward_host.cc.
#include "reward/c_reward.h"

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace laminar::reward {
namespace {

// The worker executable: $LAMINAR_REWARD_HOST, else beside the running executable (an installed
// laminar), else the build tree's.
std::string RewardHostPath() {
  if (const char* env = std::getenv("LAMINAR_REWARD_HOST"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path beside = self.parent_path() / "laminar-reward-host";
    if (std::filesystem::is_regular_file(beside, ec)) return beside.string();
  }
  return LAMINAR_REWARD_HOST_BUILD_PATH;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

}  // namespace

StatusOr<RewardFn> MakeCReward(const CRewardOptions& options) {
  if (options.path.empty()) return InvalidArgumentError("c reward: no path to a shared library");
  if (options.symbol.empty()) {
    return InvalidArgumentError("c reward " + options.path + ":" + options.symbol +
                                ": empty symbol name");
  }
  // Absolute: dlopen would search the library path for a name without '/', not the working
  // directory.
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(options.path, ec);
  if (ec || !std::filesystem::is_regular_file(abs, ec)) {
    return InvalidArgumentError("c reward " + options.path + ": no such file" +
                                (abs.string() == options.path ? "" : " (" + abs.string() + ")"));
  }
  return MakeRewardWorkers({
      .tag = "c reward " + abs.string() + ":" + options.symbol,
      .argv = {RewardHostPath(), abs.string(), options.symbol},
      .encode =
          [](const RewardInput& in) {
            return nlohmann::json{{"data_source", Hex(in.data_source)},
                                  {"solution_str", Hex(in.solution_str)},
                                  {"ground_truth", Hex(in.ground_truth)},
                                  {"extra_info", Hex(in.extra_info_json)}}
                .dump();
          },
      .start_hint = "",
      .num_workers = options.num_workers,
      .timeout_s = options.timeout_s,
      .startup_timeout_s = options.startup_timeout_s,
      .sandbox = options.sandbox,
  });
}

}  // namespace laminar::reward
