// `laminar bench rollout` as a process on the synthetic tiny-llama: every sample makes exactly
// max_tokens tokens, the JSON carries the engine's numbers, and the llama.cpp peer (a stand-in
// script printing llama-batched-bench's jsonl rows) is run with the load's shape and divided into
// ours.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_util.h"

namespace laminar {
namespace {

using testing::RunLaminar;

// --prompts 2 --n 3 --prompt-len 8 --max-tokens 6 on `model` (a small DRAM measurement: the test
// checks the plumbing, not the bandwidth).
std::string SmallLoad(const std::string& model) {
  return "bench rollout --model " + model +
         " --prompts 2 --n 3 --prompt-len 8 --max-tokens 6 --seed 5 --weights f32 --dram-mb 64";
}

// A folder with an executable `llama-batched-bench` stand-in: it records its arguments in
// `args`, logs a line to stderr, prints one jsonl row per -npl value (S_TG = 10 x npl + 0.5) and
// exits with `exit_code`; with print_rows false it prints no row.
std::filesystem::path FakePeer(const std::string& name, bool print_rows, int exit_code) {
  auto dir = testing::TempDir(name);
  const std::string script = R"(#!/bin/sh
echo "$@" > "$(dirname "$0")/args"
echo "fake llama.cpp log line" >&2
prev=""
for a in "$@"; do
  case "$prev" in -npl) npl="$a" ;; -npp) pp="$a" ;; -ntg) tg="$a" ;; esac
  prev="$a"
done
)" + std::string(print_rows ? "" : "npl=\"\"\n") +
                             R"(for p in $(echo "$npl" | tr ',' ' '); do
  echo "{\"flash_attn\": 1, \"pp\": $pp, \"tg\": $tg, \"pl\": $p, \"t_pp\": 0.5, \"speed_pp\": 16.0, \"t_tg\": 1.0, \"speed_tg\": $((p * 10)).5}"
done
echo
exit )" + std::to_string(exit_code) +
                             "\n";
  std::ofstream(dir / "llama-batched-bench", std::ios::binary) << script;
  std::filesystem::permissions(dir / "llama-batched-bench", std::filesystem::perms::owner_all);
  return dir;
}

TEST(CliBenchRollout, EverySampleRunsToMaxTokensAndThePeerIsDivided) {
  const std::string gguf = ::laminar::testing::TinyModel();
  auto peer = FakePeer("peer", /*print_rows=*/true, /*exit_code=*/0);
  auto r = RunLaminar(SmallLoad(gguf) + " --peer-llamacpp " + peer.string() +
                      " --peer-npl 2,4 --peer-fa on");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out["laminar"].size(), 1u);
  const auto& row = out["laminar"][0];
  EXPECT_EQ(row["weights"], "f32");
  const auto& grpo = row["grpo"];
  EXPECT_EQ(grpo["samples"], 6);
  EXPECT_EQ(grpo["generated_tokens"], 6 * 6);
  EXPECT_EQ(grpo["preemptions"], 0);
  // One step prefills both prompts (and forks the groups), then five decode steps.
  EXPECT_EQ(grpo["steps"], 6);
  EXPECT_GT(grpo["peak_kv_blocks_used"].get<int>(), 0);
  EXPECT_LE(grpo["peak_kv_blocks_used"].get<int>(), out["engine"]["num_blocks"].get<int>());
  EXPECT_EQ(row["batch1"]["generated_tokens"], 6);
  EXPECT_EQ(row["prefill_only"]["generated_tokens"], 6);
  EXPECT_GT(grpo["dram_fraction"].get<double>(), 0);
  // 2 x 5 layers x 4 kv heads x head dim 8 x 4 bytes (f32).
  EXPECT_EQ(out["kv_bytes_per_token"], 2 * 4 * 2 * 16 * 4);

  const std::string args = testing::Slurp(peer / "args");
  EXPECT_NE(args.find("-m " + gguf + " "), std::string::npos) << args;
  EXPECT_NE(args.find("-npp 8 -ntg 6 -npl 2,4 -pps"), std::string::npos) << args;
  EXPECT_NE(args.find("-fa on -c 56 --output-format jsonl"), std::string::npos) << args;
  EXPECT_EQ(out["llama_cpp"]["model"], gguf);  // the model has no .BF16.gguf sibling
  EXPECT_EQ(out["llama_cpp"]["best_tg_tokens_per_s"]["4"], 40.5);
  const auto& ratio = out["ratio_to_llama_cpp"][0];
  EXPECT_EQ(ratio["npl"], 4);  // the largest npl when 64 is not among them
  EXPECT_DOUBLE_EQ(ratio["generated"].get<double>(), grpo["tokens_per_s"].get<double>() / 40.5);
  EXPECT_DOUBLE_EQ(ratio["generated_per_npl"]["2"].get<double>(),
                   grpo["tokens_per_s"].get<double>() / 20.5);
}

TEST(CliBenchRollout, PeerFailuresAreReported) {
  const std::string gguf = ::laminar::testing::TinyModel();
  auto failing = FakePeer("failing", /*print_rows=*/true, /*exit_code=*/3);
  auto r = RunLaminar(SmallLoad(gguf) + " --peer-llamacpp " + failing.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("failed (exit 3)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fake llama.cpp log line"), std::string::npos) << r.err;

  auto silent = FakePeer("silent", /*print_rows=*/false, /*exit_code=*/0);
  r = RunLaminar(SmallLoad(gguf) + " --peer-llamacpp " + silent.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("printed no row for npl 8"), std::string::npos) << r.err;

  r = RunLaminar(SmallLoad(gguf) + " --peer-llamacpp " + (silent / "missing").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--peer-llamacpp: no "), std::string::npos) << r.err;
}

TEST(CliBenchRollout, NoPeerAndUsageErrors) {
  const std::string gguf = ::laminar::testing::TinyModel();
  auto r = RunLaminar(SmallLoad(gguf) + " --no-peer --num-blocks 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["llama_cpp"]["skipped"], "--no-peer");
  EXPECT_FALSE(out.contains("ratio_to_llama_cpp"));
  // Two blocks hold two samples at a time: the rest wait, and every sample still finishes.
  EXPECT_EQ(out["engine"]["num_blocks"], 2);
  EXPECT_EQ(out["laminar"][0]["grpo"]["generated_tokens"], 6 * 6);
  EXPECT_LE(out["laminar"][0]["grpo"]["peak_kv_blocks_used"].get<int>(), 2);

  r = RunLaminar(SmallLoad(gguf) + " --no-peer --num-blocks 4 --kv-cache-mb 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not both"), std::string::npos) << r.err;
  // decode takes one weight format (its own options: a list is rollout's).
  r = RunLaminar("bench decode --weights f32,bf16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--weights: f32,bf16 not in"), std::string::npos) << r.err;
  // Each family takes only its own options.
  r = RunLaminar("bench train --drafters suffix");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--drafters"), std::string::npos) << r.err;
  r = RunLaminar("bench decode --weights int3");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace laminar
