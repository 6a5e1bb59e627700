// Runs the real `laminar` binary as a process for CLI tests.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "tests/test_util.h"

namespace laminar::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// The tensors of a safetensors file of f32 tensors (a checkpoint's model.safetensors), by name.
inline std::map<std::string, std::vector<float>> F32Tensors(const std::filesystem::path& file) {
  auto f = model::SafetensorsFile::Open(file.string());
  EXPECT_TRUE(f.ok()) << f.status();
  std::map<std::string, std::vector<float>> out;
  if (!f.ok()) return out;
  for (const auto& t : f->tensors()) {
    std::vector<float> v(t.size_bytes / sizeof(float));
    std::memcpy(v.data(), t.data, t.size_bytes);
    out[t.name] = std::move(v);
  }
  return out;
}

// Expects `got` to hold `want`'s tensors, each element within `rel` x max(1, |want|) (the first
// element off in each tensor is reported).
inline void ExpectTensorsNear(const std::map<std::string, std::vector<float>>& want,
                              const std::map<std::string, std::vector<float>>& got, float rel) {
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_TRUE(it != got.end()) << name;
    const std::vector<float>& g = it->second;
    ASSERT_EQ(g.size(), w.size()) << name;
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::abs(g[i] - w[i]) > rel * std::max(1.f, std::abs(w[i]))) {
        ADD_FAILURE() << name << "[" << i << "] is " << g[i] << ", not " << w[i];
        break;
      }
    }
  }
}

inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `laminar <args>` (a shell-quoted string) with `input` on stdin.
inline CliResult RunLaminar(const std::string& args, const std::string& input = "") {
  auto dir = TempDir("cli_run");
  std::ofstream(dir / "in", std::ios::binary) << input;
  std::string cmd = std::string(LAMINAR_BINARY) + " " + args + " < " + (dir / "in").string() +
                    " > " + (dir / "out").string() + " 2> " + (dir / "err").string();
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(dir / "out");
  r.err = Slurp(dir / "err");
  return r;
}

// Runs `command` in bash; its stdout and stderr, and exit code.
inline CliResult RunBash(const std::string& command) {
  const std::filesystem::path dir = TempDir("bash");
  const std::string cmd =
      "bash -c '" + command + "' > " + (dir / "out").string() + " 2> " + (dir / "err").string();
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(dir / "out"), Slurp(dir / "err")};
}

// A small RL run on the stories260K policy for the role and launcher tests: writes
// dir/prompts.jsonl (`num_prompts` rows cycling through 8 story openings, ground truth "cat",
// data source "stories") and dir/recipe.yaml: the `contains` reward unless `reward` (a YAML map)
// is given, GRPO groups of 2 samples of at most 16 tokens, a 2 MiB KV cache, 50 ms heartbeats.
// `data`, `rollout` and `actor` add keys to those sections ("max_steps: 3, lr: 0.001"); `extra`
// adds whole sections. Returns the recipe's path.
struct StoriesRun {
  int num_prompts = 16;
  std::string reward = "{name: contains}";
  std::string data, rollout, actor, extra;
  double heartbeat_timeout_s = 2;
};
inline std::string WriteStoriesRecipe(const std::filesystem::path& dir, const std::string& model,
                                      const std::string& tokenizer, const StoriesRun& run) {
  {
    std::ofstream rows(dir / "prompts.jsonl");
    const char* openings[] = {"Once upon a time", "The dog", "Lily was",      "Tom had a",
                              "One day",          "The sun", "A little girl", "The cat"};
    for (int i = 0; i < run.num_prompts; ++i) {
      rows << nlohmann::json{{"prompt", openings[i % 8]},
                             {"ground_truth", "cat"},
                             {"data_source", "stories"}}
                  .dump()
           << "\n";
    }
  }
  auto more = [](const std::string& keys) { return keys.empty() ? "" : ", " + keys; };
  std::ofstream r(dir / "recipe.yaml");
  r << "model: {path: " << model << ", tokenizer: " << tokenizer << "}\n"
    << "data: {path: " << (dir / "prompts.jsonl").string() << more(run.data) << "}\n"
    << "reward: " << run.reward << "\n"
    << "rollout: {n: 2, max_tokens: 16, kv_cache_mb: 2, max_groups: 2, heartbeat_interval_ms: 50,"
    << " heartbeat_timeout_s: " << run.heartbeat_timeout_s << more(run.rollout) << "}\n"
    << "actor: {groups_per_step: 2, lr: 0.001" << more(run.actor) << "}\n"
    << run.extra;
  return (dir / "recipe.yaml").string();
}

// The synthetic model as a Hugging Face folder whose tokenizer_config.json has no chat template
// (made once per test binary under test_tmp/): for the errors of --chat without one.
inline std::string TinyModelWithoutChatTemplate() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(LAMINAR_BINARY_DIR) / "test_tmp" / "tiny_no_chat_template" /
                       std::to_string(getpid());
  if (!fs::exists(dir / "tokenizer_config.json")) {
    fs::create_directories(dir);
    fs::copy(TinyModelHf(), dir,
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    auto config = nlohmann::json::parse(Slurp(dir / "tokenizer_config.json"));
    config.erase("chat_template");
    std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
  }
  return dir.string();
}

// One JSON value per line of `text` (a command's JSON Lines output).
inline std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

}  // namespace laminar::testing
