// TensorBoard event files (actor/tensorboard.h) read back with the TFRecord format: framing and
// both CRCs, the file_version event, tags/steps/values; corruption and truncation name the byte
// offset. Also the actor's console line and progress bar (actor/console.h).
#include "actor/tensorboard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "actor/console.h"
#include "core/crc32c.h"
#include "tests/cli/cli_util.h"

namespace laminar::actor {
namespace {

namespace fs = std::filesystem;

uint64_t LoadLe(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  return v;
}

// Writes three steps of two metrics; returns the file's path.
std::string WriteThreeSteps(const fs::path& dir) {
  auto w = TensorBoardWriter::Create(dir.string(), 1700000000.5);
  EXPECT_TRUE(w.ok()) << w.status();
  for (int64_t step = 1; step <= 3; ++step) {
    // Step 1 scores 0: a zero must still be written (TensorBoard drops a Value without one).
    Status st = (*w)->WriteScalars(step,
                                   {{"critic/score/mean", 0.25 * static_cast<double>(step - 1)},
                                    {"perf/throughput", 1000.0 + static_cast<double>(step)}},
                                   1700000000.0 + static_cast<double>(step));
    EXPECT_TRUE(st.ok()) << st;
  }
  return (*w)->path();
}

TEST(TensorBoardTest, RecordFramingByHand) {
  const std::string rec = EncodeTfRecord("hello");
  ASSERT_EQ(rec.size(), 5u + 16u);
  EXPECT_EQ(LoadLe(rec, 0, 8), 5u);
  EXPECT_EQ(LoadLe(rec, 8, 4), MaskCrc32c(Crc32c(rec.substr(0, 8))));
  EXPECT_EQ(rec.substr(12, 5), "hello");
  EXPECT_EQ(LoadLe(rec, 17, 4), MaskCrc32c(Crc32c("hello")));
}

TEST(TensorBoardTest, WriterRoundTrip) {
  const fs::path dir = testing::TempDir("tb") / "nested";
  const std::string path = WriteThreeSteps(dir);
  EXPECT_EQ(fs::path(path).parent_path(), dir);
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.1700000000.", 0), 0u)
      << path;

  // The raw records: each CRC checked by hand, independently of the reader.
  const std::string bytes = testing::Slurp(path);
  size_t at = 0, records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    const uint64_t len = LoadLe(bytes, at, 8);
    EXPECT_EQ(LoadLe(bytes, at + 8, 4), MaskCrc32c(Crc32c(bytes.substr(at, 8))));
    ASSERT_LE(at + 16 + len, bytes.size());
    EXPECT_EQ(LoadLe(bytes, at + 12 + len, 4), MaskCrc32c(Crc32c(bytes.substr(at + 12, len))));
    at += 16 + len;
    ++records;
  }
  EXPECT_EQ(at, bytes.size());
  EXPECT_EQ(records, 4u);

  auto events = ReadTensorBoardEvents(path);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 4u);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ((*events)[0].wall_time(), 1700000000.5);
  EXPECT_FALSE((*events)[0].has_summary());
  for (int64_t step = 1; step <= 3; ++step) {
    const auto& e = (*events)[static_cast<size_t>(step)];
    EXPECT_EQ(e.step(), step);
    EXPECT_DOUBLE_EQ(e.wall_time(), 1700000000.0 + static_cast<double>(step));
    ASSERT_EQ(e.summary().value_size(), 2);
    EXPECT_EQ(e.summary().value(0).tag(), "critic/score/mean");
    EXPECT_EQ(e.summary().value(0).value_case(), proto::tensorboard::SummaryValue::kSimpleValue);
    EXPECT_FLOAT_EQ(e.summary().value(0).simple_value(), 0.25f * static_cast<float>(step - 1));
    EXPECT_EQ(e.summary().value(1).tag(), "perf/throughput");
    EXPECT_FLOAT_EQ(e.summary().value(1).simple_value(), 1000.0f + static_cast<float>(step));
  }
}

TEST(TensorBoardTest, SecondWriterInTheSameSecondGetsItsOwnFile) {
  const fs::path dir = testing::TempDir("tb");
  auto a = TensorBoardWriter::Create(dir.string(), 1700000000);
  auto b = TensorBoardWriter::Create(dir.string(), 1700000000);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_EQ((*b)->path(), (*a)->path() + ".1");
}

TEST(TensorBoardTest, CorruptByteNamesTheRecordOffset) {
  const fs::path dir = testing::TempDir("tb");
  const std::string path = WriteThreeSteps(dir);
  std::string bytes = testing::Slurp(path);
  const size_t second = 16 + LoadLe(bytes, 0, 8);  // the first scalar event's record
  {
    std::string payload_hit = bytes;
    payload_hit[second + 14] ^= 0x01;  // inside the second record's payload
    std::ofstream(path, std::ios::binary | std::ios::trunc) << payload_hit;
    auto r = ReadTensorBoardEvents(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("byte offset " + std::to_string(second)), std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("payload"), std::string::npos) << r.status();
  }
  {
    std::string length_hit = bytes;
    length_hit[second + 1] ^= 0x40;  // the second record's length
    std::ofstream(path, std::ios::binary | std::ios::trunc) << length_hit;
    auto r = ReadTfRecords(path);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("byte offset " + std::to_string(second)), std::string::npos)
        << r.status();
    EXPECT_NE(r.status().message().find("length"), std::string::npos) << r.status();
  }
}

TEST(TensorBoardTest, TruncatedFileIsAnError) {
  const fs::path dir = testing::TempDir("tb");
  const std::string path = WriteThreeSteps(dir);
  const std::string bytes = testing::Slurp(path);
  // Cut inside the last record's payload, and inside a header.
  const size_t last = bytes.size() - 16 - [&] {
    size_t at = 0, len = 0;
    while (at < bytes.size()) {
      len = LoadLe(bytes, at, 8);
      at += 16 + len;
    }
    return len;
  }();
  for (size_t cut : {bytes.size() - 3, last + 5}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, cut);
    auto r = ReadTensorBoardEvents(path);
    ASSERT_FALSE(r.ok()) << "cut at " << cut;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("byte offset " + std::to_string(last)), std::string::npos)
        << r.status();
  }
  EXPECT_EQ(ReadTfRecords((dir / "missing").string()).status().code(), StatusCode::kNotFound);
}

TEST(ConsoleTest, StepLine) {
  const StepMetrics m = {{"training/global_step", 12}, {"training/version", 12},
                         {"critic/score/mean", 0.625}, {"response_length/mean", 143.25},
                         {"staleness/mean", 0.75},     {"perf/throughput", 1834.4}};
  EXPECT_EQ(ConsoleLine(m, 187.4),
            "[actor] step 12 v12  reward 0.625  len 143.2  staleness 0.75  1834 tok/s  elapsed "
            "0:03:07");
  EXPECT_EQ(ConsoleLine({{"training/global_step", 1}}, 3725),
            "[actor] step 1 v-  reward -  len -  staleness -  - tok/s  elapsed 1:02:05");
}

TEST(ConsoleTest, ProgressLine) {
  StepProgress p{
      .step = 13, .phase = "generating", .samples = 12, .samples_needed = 32, .since_unix_s = 100};
  EXPECT_EQ(ProgressLine(p, 104.25, 8), "step 13  generating [###-----] 12/32 samples  4.2 s");
  p.samples = 40;
  EXPECT_EQ(ProgressLine(p, 100, 4), "step 13  generating [####] 32/32 samples  0.0 s");
  p.samples_needed = 0;
  EXPECT_EQ(ProgressLine(p, 99, 4), "step 13  generating [----] 0/0 samples  0.0 s");
  EXPECT_EQ(ProgressLine({.step = 2, .phase = "training", .since_unix_s = 10}, 13.5),
            "step 2  training  3.5 s");
}

TEST(ConsoleTest, ProgressFileRoundTrips) {
  const StepProgress p{.step = 7,
                       .phase = "generating",
                       .samples = 5,
                       .samples_needed = 16,
                       .since_unix_s = 1764547200.5};
  auto back = ParseProgress(ProgressJson(p));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->step, 7);
  EXPECT_EQ(back->phase, "generating");
  EXPECT_EQ(back->samples, 5);
  EXPECT_EQ(back->samples_needed, 16);
  EXPECT_DOUBLE_EQ(back->since_unix_s, p.since_unix_s);
  // A reader racing the writer, or any other text, gets nothing rather than an exception.
  EXPECT_FALSE(ParseProgress(""));
  EXPECT_FALSE(ParseProgress("{\"step\": 7"));
  EXPECT_FALSE(ParseProgress("{\"step\": \"x\", \"phase\": \"training\"}"));
  EXPECT_FALSE(ParseProgress("[1, 2]"));
}

}  // namespace
}  // namespace laminar::actor
