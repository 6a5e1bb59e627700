// The rollout manager's data order (epoch shuffles, group seeds, prompt ids) and JSONL prompt
// datasets: field names, chat formatting and tokenization checked against RenderChat + Encode with
// a real Llama-3 tokenizer, overlong filtering, errors naming file:line and field, and GSM8K's real
// test split.
#include "rollout/manager/prompt_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer_loader.h"
#include "rollout/manager/data_order.h"
#include "tests/test_util.h"

namespace laminar::manager {
namespace {

// ---- data order ----

TEST(DataOrderTest, EpochOrderIsADeterministicPermutation) {
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    const auto a = EpochOrder(n, 42, 3, true);
    EXPECT_EQ(a, EpochOrder(n, 42, 3, true));
    std::vector<int64_t> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> identity(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) identity[i] = i;
    EXPECT_EQ(sorted, identity) << n;
    EXPECT_EQ(EpochOrder(n, 42, 3, false), identity);
  }
  EXPECT_NE(EpochOrder(1000, 42, 3, true), EpochOrder(1000, 42, 4, true));
  EXPECT_NE(EpochOrder(1000, 42, 3, true), EpochOrder(1000, 43, 3, true));
}

// The order is part of the checkpoint contract: a resumed run recomputes it, so it must not change
// between builds. These values pin SplitMix64 + Fisher-Yates as documented in data_order.h; a
// separate Python transcription of that description gives the same values.
TEST(DataOrderTest, EpochOrderIsPinned) {
  EXPECT_EQ(EpochOrder(10, 1, 0, true), (std::vector<int64_t>{1, 7, 5, 6, 2, 0, 4, 8, 3, 9}));
  EXPECT_EQ(EpochOrder(10, 1, 1, true), (std::vector<int64_t>{6, 1, 7, 5, 3, 2, 4, 8, 0, 9}));
  EXPECT_EQ(GroupSeed(1, 2, 3), 12364959111366679029ULL);
}

// Every permutation of 3 rows is equally likely over epochs: 6000 epochs, each count within 5
// standard deviations of 1000 (sd = sqrt(6000 * 1/6 * 5/6) = 28.9).
TEST(DataOrderTest, EpochOrderIsUniform) {
  std::map<std::vector<int64_t>, int> counts;
  for (int64_t e = 0; e < 6000; ++e) ++counts[EpochOrder(3, 9, e, true)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [perm, count] : counts) EXPECT_NEAR(count, 1000, 145);
}

TEST(DataOrderTest, GroupSeedsDifferAcrossRowsEpochsAndSeeds) {
  std::set<uint64_t> seeds;
  for (int64_t row = 0; row < 50; ++row) {
    for (int64_t epoch = 0; epoch < 4; ++epoch) {
      for (uint64_t seed : {0, 1}) seeds.insert(GroupSeed(seed, row, epoch));
    }
  }
  EXPECT_EQ(seeds.size(), 400u);
  EXPECT_EQ(GroupSeed(5, 6, 7), GroupSeed(5, 6, 7));
}

TEST(DataOrderTest, PromptIdsRoundTrip) {
  EXPECT_EQ(MakePromptId("17", 0), "17@0");
  for (const char* row : {"17", "a@b", "", "x y"}) {
    for (int64_t epoch : {0, 9, 12345}) {
      const std::string id = MakePromptId(row, epoch);
      auto parsed = ParsePromptId(id);
      ASSERT_TRUE(parsed) << id;
      EXPECT_EQ(parsed->row_id, row);
      EXPECT_EQ(parsed->epoch, epoch);
    }
  }
  for (const char* bad :
       {"17", "17@", "17@x", "17@07", "17@-1", "17@+1", "17@1e3", "17@99999999999999999999"}) {
    EXPECT_FALSE(ParsePromptId(bad)) << bad;
  }
}

// ---- datasets ----

class PromptDatasetTest : public ::testing::Test {
 protected:
  // The Llama-3 tokenizer takes about a second to load: once for the suite.
  static void SetUpTestSuite() {
    const std::string gguf = ::laminar::testing::FetchedData("llama.cpp/ggml-vocab-llama-bpe.gguf");
    if (gguf.empty()) return;
    auto tok = model::LoadTokenizer(gguf);
    if (tok.ok()) shared_tokenizer_ = std::move(*tok).release();
  }
  static void TearDownTestSuite() {
    delete shared_tokenizer_;
    shared_tokenizer_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(shared_tokenizer_, nullptr)
        << "the Llama-3 tokenizer did not load from the fetched test data "
           "(llama.cpp/ggml-vocab-llama-bpe.gguf; run scripts/fetch_test_data.sh)";
    tokenizer_ = shared_tokenizer_;
    auto format = model::ChatFormatFromName("llama3");
    ASSERT_TRUE(format.ok()) << format.status();
    llama3_ = *format;
  }

  // Writes `lines` to a file in the test's temporary folder; returns its path.
  std::string Write(const std::vector<std::string>& lines) {
    const std::string path = (::laminar::testing::TempDir("data") / "prompts.jsonl").string();
    std::ofstream out(path);
    for (const std::string& l : lines) out << l << "\n";
    return path;
  }

  // The ids Hugging Face's apply_chat_template + encode give for `messages`.
  std::vector<int32_t> Reference(const std::vector<model::ChatMessage>& messages) {
    auto text = model::RenderChat(llama3_, messages, true);
    EXPECT_TRUE(text.ok()) << text.status();
    auto ids = tokenizer_->Encode(*text, {.add_special = false, .parse_special = true});
    EXPECT_TRUE(ids.ok()) << ids.status();
    return *ids;
  }

  PromptDatasetOptions ChatOptions() {
    PromptDatasetOptions o;
    o.chat = llama3_;
    return o;
  }

  static inline model::Tokenizer* shared_tokenizer_ = nullptr;
  const model::Tokenizer* tokenizer_ = nullptr;
  model::ChatFormat llama3_;
};

TEST_F(PromptDatasetTest, StringAndMessagePromptsAreChatFormattedAndTokenized) {
  const std::string path = Write({
      R"({"prompt": "What is 2+3?", "ground_truth": "5", "data_source": "toy"})",
      "",
      R"({"prompt": [{"role": "user", "content": "Hi"}], "ground_truth": 7, "data_source": "toy",)"
      R"( "extra_info": {"split": "test", "index": 1}})",
      R"({"prompt": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Yo"}],)"
      R"( "ground_truth": "x", "data_source": "toy"})",
  });
  PromptDatasetOptions o = ChatOptions();
  o.system_message = "Think step by step.";
  auto ds = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->rows.size(), 3u);
  EXPECT_EQ(ds->rows[0].prompt_ids,
            Reference({{"system", "Think step by step."}, {"user", "What is 2+3?"}}));
  EXPECT_EQ(ds->rows[1].prompt_ids, Reference({{"system", "Think step by step."}, {"user", "Hi"}}));
  // A conversation with its own system turn keeps it.
  EXPECT_EQ(ds->rows[2].prompt_ids, Reference({{"system", "Be terse."}, {"user", "Yo"}}));
  EXPECT_EQ(ds->rows[0].prompt_ids.front(), tokenizer_->bos_id());  // <|begin_of_text|>
  // Ids are the index among non-blank lines; sources the file line.
  EXPECT_EQ(ds->rows[1].id, "1");
  EXPECT_EQ(ds->rows[1].source, path + ":3");
  EXPECT_EQ(ds->rows[0].ground_truth, "5");
  EXPECT_EQ(ds->rows[1].ground_truth, "7");  // JSON text of a number
  EXPECT_EQ(ds->rows[1].data_source, "toy");
  EXPECT_EQ(ds->rows[1].extra_info_json, R"({"index":1,"split":"test"})");
  EXPECT_EQ(ds->rows[0].extra_info_json, "");
  EXPECT_EQ(ds->num_skipped_overlong, 0);
}

TEST_F(PromptDatasetTest, WithoutAChatFormatTheTextIsEncodedWithBos) {
  const std::string path = Write({R"({"prompt": "Once upon a time", "ground_truth": ""})"});
  PromptDatasetOptions o;
  o.default_data_source = "stories";
  auto ds = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  auto want = tokenizer_->Encode("Once upon a time", {.add_special = true, .parse_special = true});
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(ds->rows[0].prompt_ids, *want);
  EXPECT_EQ(ds->rows[0].data_source, "stories");
}

TEST_F(PromptDatasetTest, FieldNamesAreConfigurableAndMayBeDottedPaths) {
  const std::string path = Write({
      R"({"uid": "a", "q": "one", "reward_model": {"ground_truth": "1"}, "src": "s1"})",
      R"({"uid": 12, "q": "two", "reward_model": {"ground_truth": "2"}, "src": "s2"})",
  });
  PromptDatasetOptions o = ChatOptions();
  o.prompt_key = "q";
  o.ground_truth_key = "reward_model.ground_truth";
  o.data_source_key = "src";
  o.id_key = "uid";
  auto ds = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->rows[0].id, "a");
  EXPECT_EQ(ds->rows[1].id, "12");
  EXPECT_EQ(ds->rows[1].ground_truth, "2");
  EXPECT_EQ(ds->rows[1].data_source, "s2");
}

TEST_F(PromptDatasetTest, OverlongPromptsAreSkippedAndCountedOrRefused) {
  const std::string path = Write({
      R"({"prompt": "short", "ground_truth": "", "data_source": "t"})",
      R"({"prompt": "a much longer prompt that goes on and on and on and on", "ground_truth": "",)"
      R"( "data_source": "t"})",
      R"({"prompt": "tiny", "ground_truth": "", "data_source": "t"})",
  });
  PromptDatasetOptions o = ChatOptions();
  const auto short_len = static_cast<int64_t>(Reference({{"user", "short"}}).size());
  o.max_prompt_tokens = short_len;
  auto ds = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->rows.size(), 2u);
  EXPECT_EQ(ds->rows[1].id, "2");  // ids do not shift when a row is skipped
  EXPECT_EQ(ds->num_skipped_overlong, 1);
  ASSERT_EQ(ds->skipped_overlong.size(), 1u);
  EXPECT_EQ(ds->skipped_overlong[0].rfind(path + ":2 (", 0), 0u) << ds->skipped_overlong[0];
  for (const PromptRow& r : ds->rows)
    EXPECT_LE(static_cast<int64_t>(r.prompt_ids.size()), short_len);

  o.overlong = OverlongPrompts::kError;
  auto err = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find(path + ":2"), std::string::npos) << err.status();
  EXPECT_NE(err.status().message().find("max_prompt_tokens"), std::string::npos) << err.status();

  o.overlong = OverlongPrompts::kSkip;
  o.max_prompt_tokens = 1;
  auto none = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no prompts (3 skipped"), std::string::npos)
      << none.status();
}

TEST_F(PromptDatasetTest, BadRowsNameTheFileLineAndField) {
  struct Case {
    std::string line;
    std::string want;
  };
  const std::vector<Case> cases = {
      {R"({"ground_truth": "1", "data_source": "t"})", "field 'prompt' is missing"},
      {R"({"prompt": "x", "data_source": "t"})", "field 'ground_truth' is missing"},
      {R"({"prompt": "x", "ground_truth": "1"})", "field 'data_source' is missing"},
      {R"({"prompt": 5, "ground_truth": "1", "data_source": "t"})", "not a string or a list"},
      {R"({"prompt": [{"role": "user"}], "ground_truth": "1", "data_source": "t"})",
       "field 'prompt'[0].content is missing or not a string"},
      {R"({"prompt": [{"role": "wizard", "content": "x"}], "ground_truth": "1", "data_source": "t"})",
       "field 'prompt'"},
      {R"(["prompt"])", "not an object"},
      {R"({"prompt": "x", )", "parse error"},
  };
  for (const Case& c : cases) {
    const std::string path =
        Write({R"({"prompt": "ok", "ground_truth": "1", "data_source": "t"})", c.line});
    auto ds = LoadPromptDataset(path, *tokenizer_, ChatOptions());
    ASSERT_FALSE(ds.ok()) << c.line;
    EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument) << ds.status();
    EXPECT_NE(ds.status().message().find(path + ":2: "), std::string::npos) << ds.status();
    EXPECT_NE(ds.status().message().find(c.want), std::string::npos) << ds.status();
  }
  // A message list needs a chat format.
  const std::string path = Write(
      {R"({"prompt": [{"role": "user", "content": "x"}], "ground_truth": "", "data_source": "t"})"});
  auto no_chat = LoadPromptDataset(path, *tokenizer_, PromptDatasetOptions{});
  ASSERT_FALSE(no_chat.ok());
  EXPECT_NE(no_chat.status().message().find("no chat format"), std::string::npos)
      << no_chat.status();
  // Duplicate ids name both lines.
  PromptDatasetOptions by_id = ChatOptions();
  by_id.id_key = "id";
  const std::string dup =
      Write({R"({"id": 1, "prompt": "a", "ground_truth": "", "data_source": "t"})",
             R"({"id": 2, "prompt": "b", "ground_truth": "", "data_source": "t"})",
             R"({"id": 1, "prompt": "c", "ground_truth": "", "data_source": "t"})"});
  auto d = LoadPromptDataset(dup, *tokenizer_, by_id);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(dup + ":3: id '1' is also the id of " + dup + ":1"),
            std::string::npos)
      << d.status();
  auto missing = LoadPromptDataset("/nonexistent/prompts.jsonl", *tokenizer_, ChatOptions());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(PromptDatasetTest, FingerprintFollowsRowsAndTokens) {
  const std::string path = Write({R"({"prompt": "a", "ground_truth": "", "data_source": "t"})",
                                  R"({"prompt": "b", "ground_truth": "", "data_source": "t"})"});
  auto a = LoadPromptDataset(path, *tokenizer_, ChatOptions());
  auto b = LoadPromptDataset(path, *tokenizer_, ChatOptions());
  PromptDatasetOptions with_system = ChatOptions();
  with_system.system_message = "S";
  auto c = LoadPromptDataset(path, *tokenizer_, with_system);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->fingerprint, b->fingerprint);
  EXPECT_NE(a->fingerprint, c->fingerprint);
}

// GSM8K's real test split with verl-style settings: question/answer, one data source, Llama-3
// chat format, verl's overlong filter.
TEST_F(PromptDatasetTest, Gsm8kTestSplit) {
  LAMINAR_SHARED_OR_SKIP(path, "datasets/gsm8k/test.jsonl");
  PromptDatasetOptions o = ChatOptions();
  o.prompt_key = "question";
  o.ground_truth_key = "answer";
  o.data_source_key = "";
  o.default_data_source = "openai/gsm8k";
  auto ds = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->rows.size(), 1319u);
  const PromptRow& first = ds->rows[0];
  EXPECT_EQ(first.id, "0");
  EXPECT_EQ(first.data_source, "openai/gsm8k");
  EXPECT_TRUE(first.ground_truth.ends_with("\n#### 18")) << first.ground_truth;
  // The question's \u2019 is decoded to UTF-8 before formatting.
  EXPECT_EQ(first.prompt_ids,
            Reference({{"user",
                        "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast "
                        "every morning and bakes muffins for her friends every day with four. "
                        "She sells the remainder at the farmers' market daily for $2 per "
                        "fresh duck egg. How much in dollars does she make every day at the "
                        "farmers' market?"}}));
  int64_t longest = 0;
  for (const PromptRow& r : ds->rows) longest = std::max<int64_t>(longest, r.prompt_ids.size());
  // Filtering at a limit below the longest prompt drops exactly the rows above it.
  o.max_prompt_tokens = longest - 1;
  auto filtered = LoadPromptDataset(path, *tokenizer_, o);
  ASSERT_TRUE(filtered.ok()) << filtered.status();
  int64_t above = 0;
  for (const PromptRow& r : ds->rows)
    above += static_cast<int64_t>(r.prompt_ids.size()) > longest - 1;
  EXPECT_GE(above, 1);
  EXPECT_EQ(filtered->num_skipped_overlong, above);
  EXPECT_EQ(static_cast<int64_t>(filtered->rows.size()) + above, 1319);
}

}  // namespace
}  // namespace laminar::manager
