// `laminar train` as real processes on the real stories260K model: the logprobs `laminar generate`
// recorded equal the trainer's (lr 0); two data-parallel rank processes (Gloo) end where one rank
// on the combined batch ends; a resumed run is bit-identical to an uninterrupted one; bad data is
// a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/process.h"
#include "model/safetensors.h"
#include "tests/cli/cli_util.h"

namespace laminar::testing {
namespace {

// Eight samples (four groups of two) sampled by `laminar generate --json`, scored 0/1.
std::string MakeData(const std::string& model, const std::filesystem::path& dir) {
  const auto path = dir / "data.jsonl";
  std::ofstream out(path);
  for (int i = 0; i < 8; ++i) {
    auto r = RunLaminar("generate --model " + model +
                        " --prompt 'Once upon a time' --max-tokens 12 --json --seed " +
                        std::to_string(i));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    j["group"] = i / 2;
    j["score"] = i % 2;
    out << j.dump() << "\n";
  }
  return path.string();
}

std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TEST(TrainCliTest, TrainerLogprobsEqualThoseGenerateRecorded) {
  const std::string model = TinyModel();
  const auto dir = TempDir("lr0");
  const std::string data = MakeData(model, dir);
  auto r = RunLaminar("train --model " + model + " --data " + data +
                      " --steps 1 --groups-per-step 4 --lr 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_LT(lines[0]["rollout_corr/abs_logprob_diff_max"].get<double>(), 1e-5) << lines[0];
  EXPECT_EQ(lines[0]["actor/policy_version"].get<double>(), 1.0);
}

TEST(TrainCliTest, TwoRankProcessesEqualOneRankOnTheCombinedBatch) {
  const std::string model = TinyModel();
  const auto dir = TempDir("dp");
  const std::string data = MakeData(model, dir);
  const std::string common =
      "train --model " + model + " --data " + data + " --steps 2 --lr 1e-3 --micro-batch-tokens 40";
  // One update per step (the whole batch), accumulated over micro-batches of at most 40 tokens.
  auto single =
      RunLaminar(common + " --groups-per-step 4 --checkpoint-dir " + (dir / "one").string());
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const std::string address = "tcp://127.0.0.1:" + std::to_string(FreeTcpPort());
  std::vector<Process> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = {LAMINAR_BINARY,
                                     "train",
                                     "--model",
                                     model,
                                     "--data",
                                     data,
                                     "--steps",
                                     "2",
                                     "--lr",
                                     "1e-3",
                                     "--groups-per-step",
                                     "2",
                                     "--micro-batch-tokens",
                                     "40",
                                     "--checkpoint-dir",
                                     (dir / "two").string(),
                                     "--world-size",
                                     "2",
                                     "--rank",
                                     std::to_string(r),
                                     "--rendezvous",
                                     address};
    auto p = Process::Spawn(argv, (dir / ("rank" + std::to_string(r) + ".log")).string());
    ASSERT_TRUE(p.ok()) << p.status();
    ranks.push_back(std::move(*p));
  }
  for (int r = 0; r < 2; ++r) {
    auto code = ranks[r].Wait(120000);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << Slurp(dir / ("rank" + std::to_string(r) + ".log"));
  }
  ExpectTensorsNear(F32Tensors(dir / "one" / "step_2" / "model.safetensors"),
                    F32Tensors(dir / "two" / "step_2" / "model.safetensors"), 1e-5f);
}

TEST(TrainCliTest, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  const std::string model = TinyModel();
  const auto dir = TempDir("resume");
  const std::string data = MakeData(model, dir);
  const std::string common = "train --model " + model + " --data " + data +
                             " --groups-per-step 2 --lr 1e-3 --shuffle --mini-batch-size 2 "
                             "--save-every 1 --checkpoint-dir ";
  auto full = RunLaminar(common + (dir / "full").string() + " --steps 3");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  auto part = RunLaminar(common + (dir / "part").string() + " --steps 1");
  ASSERT_EQ(part.exit_code, 0) << part.err;
  auto rest = RunLaminar(common + (dir / "part").string() + " --steps 3 --resume");
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_NE(rest.err.find("resumed from step 1"), std::string::npos) << rest.err;
  EXPECT_EQ(JsonLines(rest.out).size(), 2u);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(Slurp(dir / "full" / "step_3" / file), Slurp(dir / "part" / "step_3" / file)) << file;
  }
  // A resume with a different batch shape is refused, nothing overwritten.
  auto other = RunLaminar("train --model " + model + " --data " + data +
                          " --groups-per-step 3 --steps 4 --resume --checkpoint-dir " +
                          (dir / "part").string());
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.err.find("groups_per_step"), std::string::npos) << other.err;
}

TEST(TrainCliTest, BadTrajectoriesAreNamedErrors) {
  const std::string model = TinyModel();
  const auto dir = TempDir("bad");
  std::ofstream(dir / "broken.jsonl") << "{\"prompt_ids\": [1], \"ids\": [2]}\n{not json\n";
  auto r = RunLaminar("train --model " + model + " --data " + (dir / "broken.jsonl").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("broken.jsonl:2"), std::string::npos) << r.err;
  std::ofstream(dir / "range.jsonl") << "{\"prompt_ids\": [1], \"ids\": [2, 9999]}\n";
  r = RunLaminar("train --model " + model + " --data " + (dir / "range.jsonl").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("token id 9999 outside the vocabulary"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("range.jsonl:1"), std::string::npos) << r.err;
  std::ofstream(dir / "type.jsonl") << "{\"prompt_ids\": \"hello\", \"ids\": [2]}\n";
  r = RunLaminar("train --model " + model + " --data " + (dir / "type.jsonl").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("type.jsonl:1"), std::string::npos) << r.err;
  // Ids that would wrap, truncate or convert are refused, not trained on.
  std::ofstream(dir / "wrap.jsonl") << "{\"prompt_ids\": [1], \"ids\": [4294967301, 5.7]}\n";
  r = RunLaminar("train --model " + model + " --data " + (dir / "wrap.jsonl").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("wrap.jsonl:1: ids[0] = 4294967301 is not a token id"), std::string::npos)
      << r.err;
}

// Nothing already saved is lost: a fresh run refuses a folder with checkpoints, and the export
// refuses to replace an existing folder unless asked.
TEST(TrainCliTest, EarlierResultsAreNeverOverwritten) {
  const std::string model = TinyModel();
  const auto dir = TempDir("keep");
  std::ofstream(dir / "data.jsonl") << "{\"prompt_ids\": [1, 403], \"ids\": [407, 261]}\n";
  const std::string base =
      "train --model " + model + " --data " + (dir / "data.jsonl").string() + " --steps 1";
  auto first = RunLaminar(base + " --checkpoint-dir " + (dir / "ck").string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto again = RunLaminar(base + " --checkpoint-dir " + (dir / "ck").string());
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("pass --resume"), std::string::npos) << again.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "ck" / "step_1" / "model.safetensors"));
  std::filesystem::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "notes.txt") << "precious";
  auto export_over = RunLaminar(base + " --export-hf " + (dir / "mine").string());
  EXPECT_EQ(export_over.exit_code, 1);
  EXPECT_NE(export_over.err.find("--overwrite-export"), std::string::npos) << export_over.err;
  EXPECT_EQ(Slurp(dir / "mine" / "notes.txt"), "precious");
  auto no_dir = RunLaminar(base + " --resume");
  EXPECT_EQ(no_dir.exit_code, 1);
  EXPECT_NE(no_dir.err.find("--resume needs --checkpoint-dir"), std::string::npos) << no_dir.err;
}

}  // namespace
}  // namespace laminar::testing
