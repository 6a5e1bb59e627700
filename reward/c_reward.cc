// C ABI reward plug-ins: dlopen, the ABI version check, and calls with NUL-terminated copies of the
// input; see c_reward.h and laminar_reward_plugin.h.
#include "reward/c_reward.h"

#include <dlfcn.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "reward/laminar_reward_plugin.h"

namespace laminar::reward {
namespace {

// glibc keeps dlerror's state per thread, so concurrent loads do not mix their messages.
std::string DlError() {
  const char* e = dlerror();  // NOLINT(concurrency-mt-unsafe)
  return e != nullptr ? e : "unknown dlopen error";
}

// The library's handle; dlclose when the last RewardFn copy goes.
struct Library {
  void* handle = nullptr;
  Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library() {
    if (handle != nullptr) dlclose(handle);
  }
};

}  // namespace

StatusOr<RewardFn> MakeCReward(const CRewardOptions& options) {
  std::string tag = "c reward " + options.path + ":" + options.symbol;
  if (options.path.empty()) return InvalidArgumentError("c reward: no path to a shared library");
  if (options.symbol.empty()) return InvalidArgumentError(tag + ": empty symbol name");
  // Absolute: dlopen would search the library path for a name without '/', not the working
  // directory.
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(options.path, ec);
  if (ec || !std::filesystem::is_regular_file(abs, ec)) {
    return InvalidArgumentError("c reward " + options.path + ": no such file" +
                                (abs.string() == options.path ? "" : " (" + abs.string() + ")"));
  }
  tag = "c reward " + abs.string() + ":" + options.symbol;
  auto lib = std::make_shared<Library>();
  lib->handle = dlopen(abs.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle == nullptr) return InvalidArgumentError(tag + ": dlopen: " + DlError());
  dlerror();  // NOLINT(concurrency-mt-unsafe): clear, so a null symbol can be told from an error
  auto version = reinterpret_cast<laminar_reward_abi_version_fn>(
      dlsym(lib->handle, "laminar_reward_abi_version"));
  if (version == nullptr) {
    return InvalidArgumentError(tag + ": exports no laminar_reward_abi_version (" + DlError() +
                                "); build it against reward/laminar_reward_plugin.h");
  }
  if (const int v = version(); v != LAMINAR_REWARD_ABI_VERSION) {
    return InvalidArgumentError(tag + ": built for reward plug-in ABI version " +
                                std::to_string(v) + ", but this laminar speaks version " +
                                std::to_string(LAMINAR_REWARD_ABI_VERSION) +
                                "; rebuild it against reward/laminar_reward_plugin.h");
  }
  auto fn = reinterpret_cast<laminar_compute_score_fn>(dlsym(lib->handle, options.symbol.c_str()));
  if (fn == nullptr) {
    return InvalidArgumentError(tag + ": exports no '" + options.symbol + "' (" + DlError() + ")");
  }
  return RewardFn([lib, fn, tag](const RewardInput& in) -> StatusOr<RewardResult> {
    // std::string copies: the ABI promises NUL-terminated strings; string_views need not be.
    const std::string data_source(in.data_source), solution(in.solution_str),
        truth(in.ground_truth), extra(in.extra_info_json);
    const laminar_reward_input input{
        .data_source = data_source.c_str(),
        .data_source_size = data_source.size(),
        .solution_str = solution.c_str(),
        .solution_str_size = solution.size(),
        .ground_truth = truth.c_str(),
        .ground_truth_size = truth.size(),
        .extra_info_json = extra.c_str(),
        .extra_info_json_size = extra.size(),
    };
    double score = 0;
    char error[1024] = {0};
    const int rc = fn(&input, &score, error, sizeof(error));
    error[sizeof(error) - 1] = '\0';  // a plug-in that forgot the NUL
    if (rc != 0) {
      return InvalidArgumentError(tag + ": returned " + std::to_string(rc) + ": " +
                                  (error[0] != '\0' ? error : "(no message)"));
    }
    if (!std::isfinite(score)) {
      return InvalidArgumentError(tag + ": returned the score " + std::to_string(score) +
                                  ", which is not finite");
    }
    return RewardResult{.score = score, .extra = {}};
  });
}

}  // namespace laminar::reward
