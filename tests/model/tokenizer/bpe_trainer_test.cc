// Learning byte-level BPE merges: the most frequent pair first, ties by the pieces' order, a
// word's pieces merged left to right, and the learned tokenizer round-trips text.
#include "model/tokenizer/bpe_trainer.h"

#include <gtest/gtest.h>

#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/pretokenizer.h"

namespace laminar::model {
namespace {

std::vector<std::string> Gpt2() {
  auto r = PreTokenizerRegexes("gpt2");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<std::string>{};
}

TEST(BpeTrainerTest, MergesTheMostFrequentPairFirst) {
  // "ab" occurs 3 times (in "abc", " abc" and " ab"); then "ab"+"c" and "Ġ"+"ab" both occur
  // twice, and "ab" sorts before "Ġ" (UTF-8 bytes 0xC4 0xA0).
  auto bpe = LearnByteLevelBpe("abc abc ab", Gpt2(), 10);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  ASSERT_GE(bpe->merges.size(), 2u);
  EXPECT_EQ(bpe->merges[0], std::make_pair(std::string("a"), std::string("b")));
  EXPECT_EQ(bpe->merges[1], std::make_pair(std::string("ab"), std::string("c")));
  EXPECT_EQ(bpe->pieces.size(), 256 + bpe->merges.size());
  EXPECT_EQ(bpe->pieces[256], "ab");
  EXPECT_EQ(bpe->pieces[static_cast<size_t>('a')], "a");
  EXPECT_EQ(bpe->pieces[static_cast<size_t>(' ')], "Ġ");
}

TEST(BpeTrainerTest, StopsWhenNoPairRepeatsAndRefusesBadInput) {
  auto bpe = LearnByteLevelBpe("xy", Gpt2(), 100);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_TRUE(bpe->merges.empty());
  EXPECT_EQ(bpe->pieces.size(), 256u);
  EXPECT_FALSE(LearnByteLevelBpe("xy", Gpt2(), -1).ok());
  auto bad = LearnByteLevelBpe("xy", {"(unclosed"}, 1);
  EXPECT_FALSE(bad.ok());
}

TEST(BpeTrainerTest, LearnedTokenizerRoundTripsAndCompresses) {
  const std::string text =
      "the cat sat on the mat. the cat ate the rat. the dog sat on the log. 1,250 - 250 = 1000";
  auto bpe = LearnByteLevelBpe(text, Gpt2(), 40);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  // The same result on a second run: nothing depends on hashing or addresses.
  auto again = LearnByteLevelBpe(text, Gpt2(), 40);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(bpe->merges, again->merges);
  Vocab vocab;
  vocab.pieces = bpe->pieces;
  vocab.scores.assign(vocab.pieces.size(), 0.f);
  vocab.types.assign(vocab.pieces.size(), TokenType::kNormal);
  ByteLevelBpeTokenizer::Options options;
  options.pre_tokenizer_name = "gpt2";
  options.pre_tokenizer_regexes = Gpt2();
  auto tok = ByteLevelBpeTokenizer::Create(vocab, bpe->merges, options, "learned");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_LT(ids->size(), text.size() / 2) << "the merges should shorten the text they came from";
  auto back = (*tok)->Decode(*ids);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
  const std::string other = "Ünïcödé and\ttabs\n  spaces 🙂";
  auto other_ids = (*tok)->Encode(other);
  ASSERT_TRUE(other_ids.ok());
  EXPECT_EQ(*(*tok)->Decode(*other_ids), other);
}

}  // namespace
}  // namespace laminar::model
