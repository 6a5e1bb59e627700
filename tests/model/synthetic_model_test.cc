// The synthetic models the project makes: the same bytes for the same seed, other weights for
// another seed, GGUF and Hugging Face forms that load back to the same model and tokenizer, and
// errors for a bad preset or an existing folder.
#include "model/synthetic/synthetic_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/checkpoint.h"
#include "model/rope_permute.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

namespace fs = std::filesystem;

std::string Bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every file under `dir` with its bytes, by relative path.
std::map<std::string, std::string> Files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = Bytes(e.path());
  }
  return out;
}

SyntheticModel Make(uint64_t seed) {
  auto preset = FindSyntheticPreset("tiny-llama");
  EXPECT_TRUE(preset.ok()) << preset.status();
  auto m = MakeSyntheticModel(*preset, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

TEST(SyntheticModelTest, SameSeedWritesTheSameBytes) {
  auto dir = laminar::testing::TempDir("synthetic");
  ASSERT_TRUE(WriteSyntheticModel(Make(1), (dir / "a").string(), false).ok());
  ASSERT_TRUE(WriteSyntheticModel(Make(1), (dir / "b").string(), false).ok());
  ASSERT_TRUE(WriteSyntheticModel(Make(2), (dir / "c").string(), false).ok());
  const auto a = Files(dir / "a"), b = Files(dir / "b"), c = Files(dir / "c");
  ASSERT_TRUE(a.count("model.gguf") && a.count("hf/model.safetensors") &&
              a.count("hf/config.json") && a.count("hf/tokenizer.json"));
  EXPECT_EQ(a, b);
  EXPECT_NE(a.at("model.gguf"), c.at("model.gguf"));
  EXPECT_NE(a.at("hf/model.safetensors"), c.at("hf/model.safetensors"));
  EXPECT_EQ(a.at("hf/tokenizer.json"), c.at("hf/tokenizer.json"));  // the tokenizer has no seed
  // No partial folder is left beside the result.
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
  }
}

TEST(SyntheticModelTest, GgufAndHfFormsLoadBackToTheSameModel) {
  const SyntheticModel m = Make(1);
  EXPECT_EQ(m.config.vocab_size, 3 + 256 + static_cast<int64_t>(m.merges.size()));
  EXPECT_GT(m.merges.size(), 200u) << "the corpus should support most of the 250 merges";
  auto dir = laminar::testing::TempDir("synthetic") / "m";
  ASSERT_TRUE(WriteSyntheticModel(m, dir.string(), false).ok());

  auto gguf = LoadCheckpoint((dir / "model.gguf").string());
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  auto hf = LoadCheckpoint((dir / "hf").string());
  ASSERT_TRUE(hf.ok()) << hf.status();
  for (const Checkpoint* c : {&*gguf, &*hf}) {
    EXPECT_EQ(c->config.vocab_size, m.config.vocab_size);
    EXPECT_EQ(c->config.hidden_size, m.config.hidden_size);
    EXPECT_EQ(c->config.num_hidden_layers, m.config.num_hidden_layers);
    EXPECT_EQ(c->config.num_key_value_heads, m.config.num_key_value_heads);
    EXPECT_FALSE(c->config.tie_word_embeddings);
    EXPECT_EQ(c->config.eos_token_ids, std::vector<int64_t>{2});
  }
  // The GGUF tensors are the generated ones bit for bit (same layout).
  for (const std::string& name : m.weights.Names()) {
    auto want = m.weights.Get(name);
    auto got = gguf->weights.Get(name);
    ASSERT_TRUE(got.ok()) << name;
    ASSERT_EQ(got->size_bytes(), want->size_bytes()) << name;
    EXPECT_EQ(std::memcmp(got->data(), want->data(), want->size_bytes()), 0) << name;
  }
  EXPECT_EQ(gguf->config.rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(hf->config.rope_layout, RopeLayout::kRotateHalf);

  // Tokenizers from both files, and the in-memory one, encode the corpus alike and round-trip it.
  auto mem = SyntheticTokenizer(m);
  auto from_gguf = LoadTokenizerForModel((dir / "model.gguf").string(), "");
  auto from_hf = LoadTokenizerForModel((dir / "hf").string(), "");
  ASSERT_TRUE(mem.ok() && from_gguf.ok() && from_hf.ok())
      << mem.status() << from_gguf.status() << from_hf.status();
  const std::string text(SyntheticCorpus());
  auto ids = (*mem)->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), text.size() / 2);
  EXPECT_EQ(*(*from_gguf)->Encode(text), *ids);
  EXPECT_EQ(*(*from_hf)->Encode(text), *ids);
  EXPECT_EQ(*(*from_gguf)->Decode(*ids), text);
  // The chat template is ChatML, and <|im_start|> is one special token.
  auto format = DetectChatFormat((*from_gguf)->vocab().chat_template);
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(format->kind, ChatFormatKind::kChatML);
  auto turn = (*from_gguf)->Encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_TRUE(turn.ok());
  EXPECT_EQ(turn->front(), 1);
  EXPECT_EQ(turn->back(), 2);
}

TEST(SyntheticModelTest, BadPresetAndExistingFolderAreErrors) {
  auto bad = FindSyntheticPreset("huge-llama");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tiny-llama"), std::string::npos) << bad.status();
  auto dir = laminar::testing::TempDir("synthetic") / "m";
  const SyntheticModel m = Make(3);
  ASSERT_TRUE(WriteSyntheticModel(m, dir.string(), false).ok());
  std::ofstream(dir / "keep.txt") << "mine";
  Status again = WriteSyntheticModel(m, dir.string(), false);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again;
  EXPECT_TRUE(fs::exists(dir / "keep.txt")) << "a refused write must not touch the folder";
  ASSERT_TRUE(WriteSyntheticModel(m, dir.string(), true).ok());
  EXPECT_FALSE(fs::exists(dir / "keep.txt"));
  EXPECT_TRUE(fs::exists(dir / "model.gguf"));
}

}  // namespace
}  // namespace laminar::model
