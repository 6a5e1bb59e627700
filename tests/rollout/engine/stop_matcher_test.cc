// StopMatcher: stop strings across token boundaries (mid-token, inside a UTF-8 character), stop
// token ids, max_tokens, abort, export/import, checked on a hand-made id -> bytes table, against a
// naive reference that searches the whole text, and on real byte-level BPE / SentencePiece vocabs.
#include "rollout/engine/stop_matcher.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "tests/test_util.h"

namespace laminar::rollout {
namespace {

using Step = StopMatcher::Step;

// id -> bytes. 5 and 6 are the two halves of "é" (C3 A9); 8 is an empty (skipped special) token.
const std::vector<std::string>& Table() {
  static const std::vector<std::string> table = {
      "a", "b", "ab", "ba", "c", "\xC3", "\xA9", "\xC3\xA9", "", "<eos>", " x", "abc", "xa", "!"};
  return table;
}
constexpr int32_t kA = 0, kB = 1, kAb = 2, kC = 4, kE1 = 5, kE2 = 6, kE = 7, kEmpty = 8, kEos = 9,
                  kSpaceX = 10, kAbc = 11, kXa = 12, kBang = 13;

StatusOr<std::string> TableBytes(int32_t id) {
  if (id < 0 || id >= static_cast<int32_t>(Table().size())) {
    return OutOfRangeError("token id " + std::to_string(id) + " outside the table");
  }
  return Table()[static_cast<size_t>(id)];
}

StopMatcher Make(StopOptions options, bool strip = false) {
  auto m = StopMatcher::Create(std::move(options), TableBytes, strip);
  LAMINAR_CHECK(m.ok()) << m.status();
  return std::move(*m);
}

StopOptions Stops(std::vector<std::string> stop_strings, int32_t max_tokens = 100) {
  StopOptions o;
  o.stop_strings = std::move(stop_strings);
  o.max_tokens = max_tokens;
  return o;
}

// Pushes `ids` until one stops; returns the steps taken (the last one stops unless ids ran out).
std::vector<Step> PushAll(StopMatcher& m, const std::vector<int32_t>& ids) {
  std::vector<Step> steps;
  for (int32_t id : ids) {
    auto step = m.Push(id);
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) break;
    steps.push_back(*step);
    if (step->stop) break;
  }
  return steps;
}

std::string TextOf(const StopMatcher& m, const std::vector<int32_t>& ids, size_t n) {
  auto text = m.Text(std::span<const int32_t>(ids.data(), n));
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "<error>";
}

Step StopString(int32_t index, int64_t keep) {
  return Step{.stop = true,
              .finish_reason = FinishReason::kStop,
              .keep_bytes = keep,
              .stop_string_index = index};
}

TEST(StopMatcher, StopStringSpanningTwoTokens) {
  StopMatcher m = Make(Stops({"ab"}));
  std::vector<int32_t> ids = {kC, kA, kB, kC};
  auto steps = PushAll(m, ids);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_FALSE(steps[0].stop);
  EXPECT_FALSE(steps[1].stop);
  EXPECT_EQ(steps[1].keep_bytes, 2);
  EXPECT_EQ(steps[2], StopString(0, 1));
  EXPECT_EQ(m.num_tokens(), 3);  // the token that completed the match stays
  EXPECT_EQ(TextOf(m, ids, 3), "c");
}

TEST(StopMatcher, StopStringStartingAndEndingMidToken) {
  // "bc" starts inside "ab"; "ca" ends inside "abc" whose rest is dropped from the text.
  StopMatcher m1 = Make(Stops({"bc"}));
  std::vector<int32_t> ids1 = {kAb, kC};
  EXPECT_EQ(PushAll(m1, ids1).back(), StopString(0, 1));
  EXPECT_EQ(TextOf(m1, ids1, 2), "a");

  StopOptions o = Stops({"ca"});
  StopMatcher m2 = Make(o);
  std::vector<int32_t> ids2 = {kC, kAbc};
  EXPECT_EQ(PushAll(m2, ids2).back(), StopString(0, 0));
  EXPECT_EQ(TextOf(m2, ids2, 2), "");

  o.include_stop_str_in_output = true;
  StopMatcher m3 = Make(o);
  EXPECT_EQ(PushAll(m3, ids2).back(), StopString(0, 2));
  EXPECT_EQ(TextOf(m3, ids2, 2), "ca");
}

TEST(StopMatcher, StopStringSplitInsideUtf8Character) {
  StopMatcher m = Make(Stops({"é!", "aé"}));
  std::vector<int32_t> ids = {kC, kA, kE1, kE2};
  auto steps = PushAll(m, ids);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_FALSE(steps[2].stop);  // "a\xC3": half a character, no match yet
  EXPECT_EQ(steps[3], StopString(1, 1));
  EXPECT_EQ(TextOf(m, ids, 4), "c");

  // A whole "é" token followed by "!" matches "é!" as well.
  StopMatcher m2 = Make(Stops({"é!"}));
  std::vector<int32_t> ids2 = {kE, kBang};
  EXPECT_EQ(PushAll(m2, ids2).back(), StopString(0, 0));
}

TEST(StopMatcher, OverlappingCandidates) {
  StopMatcher m = Make(Stops({"ab"}));
  std::vector<int32_t> ids = {kA, kA, kB};
  auto steps = PushAll(m, ids);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[2], StopString(0, 1));
  EXPECT_EQ(TextOf(m, ids, 3), "a");

  StopMatcher m2 = Make(Stops({"aab"}));
  std::vector<int32_t> ids2 = {kA, kA, kA, kB};
  EXPECT_EQ(PushAll(m2, ids2).back(), StopString(0, 1));
}

TEST(StopMatcher, StopStringAtTheFirstToken) {
  StopMatcher m = Make(Stops({"ab"}));
  std::vector<int32_t> ids = {kAb};
  EXPECT_EQ(PushAll(m, ids), std::vector<Step>{StopString(0, 0)});
  EXPECT_EQ(TextOf(m, ids, 1), "");
}

TEST(StopMatcher, FirstStopStringToAppearWins) {
  // In "abc" arriving as one token "b" ends first; the result does not depend on tokenization.
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{kAbc}, {kA, kB, kC}}) {
    StopMatcher m = Make(Stops({"abc", "b"}));
    EXPECT_EQ(PushAll(m, ids).back(), StopString(1, 1));
  }
  // Same end: the longer (earlier-starting) one.
  for (const std::vector<int32_t>& ids : {std::vector<int32_t>{kAbc}, {kAb, kC}, {kA, kB, kC}}) {
    StopMatcher m = Make(Stops({"bc", "abc", "c"}));
    EXPECT_EQ(PushAll(m, ids).back(), StopString(1, 0));
  }
}

TEST(StopMatcher, StopTokenIdIsKeptInIdsNotInText) {
  StopOptions o = Stops({"eos"});
  o.stop_token_ids = {kEos};
  StopMatcher m = Make(o);
  std::vector<int32_t> ids = {kA, kEos};
  Step want{
      .stop = true, .finish_reason = FinishReason::kStop, .keep_bytes = 1, .stop_token_id = kEos};
  EXPECT_EQ(PushAll(m, ids).back(), want);  // not the stop string inside "<eos>"
  EXPECT_EQ(m.num_tokens(), 2);
  EXPECT_EQ(TextOf(m, ids, 2), "a");

  o.include_stop_str_in_output = true;
  StopMatcher m2 = Make(o);
  want.keep_bytes = 6;
  EXPECT_EQ(PushAll(m2, ids).back(), want);
  EXPECT_EQ(TextOf(m2, ids, 2), "a<eos>");
}

TEST(StopMatcher, MaxTokensGivesLength) {
  StopMatcher m = Make(Stops({"zz"}, 3));
  std::vector<int32_t> ids = {kA, kEmpty, kE1};
  auto steps = PushAll(m, ids);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[2],
            (Step{.stop = true, .finish_reason = FinishReason::kLength, .keep_bytes = 2}));
  EXPECT_EQ(TextOf(m, ids, 3), "a\xEF\xBF\xBD");  // the dangling half character becomes U+FFFD
  auto more = m.Push(kA);
  EXPECT_EQ(more.status().code(), StatusCode::kFailedPrecondition) << more.status();
  // A stop string completed by the last allowed token is a stop, not a length.
  StopMatcher m2 = Make(Stops({"ab"}, 3));
  EXPECT_EQ(PushAll(m2, {kC, kA, kB}).back(), StopString(0, 1));
}

TEST(StopMatcher, AbortAndErrors) {
  StopMatcher m = Make(Stops({"ab"}));
  ASSERT_TRUE(m.Push(kC).ok());
  auto bad = m.Push(99);
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange) << bad.status();
  EXPECT_EQ(m.num_tokens(), 1);  // unchanged
  Step aborted{.stop = true, .finish_reason = FinishReason::kAbort, .keep_bytes = 1};
  EXPECT_EQ(m.Abort(), aborted);
  EXPECT_EQ(m.Abort(), aborted);
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(m.Push(kA).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FinishReasonName(m.last_step().finish_reason), "abort");

  StopMatcher m2 = Make(Stops({"ab"}));
  ASSERT_TRUE(PushAll(m2, {kAb}).back().stop);
  EXPECT_EQ(m2.Abort(), StopString(0, 0));  // a finished request keeps its reason
  EXPECT_EQ(m2.Text(std::vector<int32_t>{}).status().code(), StatusCode::kInvalidArgument);
}

TEST(StopMatcher, LeadingSpaceStripLikeSentencePieceDecode) {
  StopMatcher m = Make(Stops({" x", "x"}), /*strip=*/true);
  std::vector<int32_t> ids = {kEmpty, kSpaceX};
  EXPECT_EQ(PushAll(m, ids).back(), StopString(1, 0));  // the text is "x", not " x"
  StopMatcher m2 = Make(Stops({"a x"}), /*strip=*/true);
  std::vector<int32_t> ids2 = {kSpaceX, kA, kSpaceX};
  EXPECT_EQ(PushAll(m2, ids2).back(), StopString(0, 1));
  EXPECT_EQ(TextOf(m2, ids2, 3), "x");
}

TEST(StopMatcher, BadConfigsAreInvalidArgument) {
  auto code = [](StopOptions o) { return StopMatcher::Create(o, TableBytes).status().code(); };
  EXPECT_EQ(code(Stops({"a", ""})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Stops({"\xC3"})), StatusCode::kInvalidArgument);  // not valid UTF-8
  EXPECT_EQ(code(Stops({"a"}, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Stops({"a"}, -3)), StatusCode::kInvalidArgument);
  StopOptions neg = Stops({});
  neg.stop_token_ids = {2, -1};
  EXPECT_EQ(code(neg), StatusCode::kInvalidArgument);
  EXPECT_EQ(StopMatcher::Create(Stops({}), TokenBytesFn{}).status().code(),
            StatusCode::kInvalidArgument);
  auto msg = StopMatcher::Create(Stops({"a", ""}), TableBytes).status().message();
  EXPECT_NE(msg.find("stop_strings[1]"), std::string::npos) << msg;
  EXPECT_TRUE(StopMatcher::Create(Stops({}, 1), TableBytes).ok());
}

TEST(StopMatcher, RestoreRejectsImpossibleStates) {
  StopMatcher m = Make(Stops({"abc"}, 10));
  ASSERT_TRUE(PushAll(m, {kA, kB, kA}).size() == 3);
  StopMatcher::State s = m.Export();
  EXPECT_EQ(s.tail, "ba");
  StopMatcher fresh = Make(Stops({"abc"}, 10));
  EXPECT_TRUE(fresh.Restore(s).ok());
  EXPECT_EQ(fresh.Export(), s);
  StopMatcher::State long_tail = s;
  long_tail.tail = "aba";
  EXPECT_EQ(fresh.Restore(long_tail).code(), StatusCode::kInvalidArgument);
  StopMatcher::State too_many = s;
  too_many.num_tokens = 11;
  EXPECT_EQ(fresh.Restore(too_many).code(), StatusCode::kInvalidArgument);
  StopMatcher short_max = Make(Stops({"abc"}, 2));
  EXPECT_EQ(short_max.Restore(s).code(), StatusCode::kInvalidArgument);
}

// The naive reference: decode the whole text after every token and search all of it.
struct Reference {
  StopOptions o;
  bool strip = false;
  std::string text;
  bool at_start = true;
  int64_t n = 0;
  Step Push(int32_t id) {
    std::string bytes = Table()[static_cast<size_t>(id)];
    if (!bytes.empty()) {
      if (strip && at_start && bytes[0] == ' ') bytes.erase(0, 1);
      at_start = false;
    }
    const int64_t before = static_cast<int64_t>(text.size());
    text += bytes;
    ++n;
    Step step{.keep_bytes = static_cast<int64_t>(text.size())};
    for (int32_t stop_id : o.stop_token_ids) {
      if (stop_id == id) {
        step.stop = true;
        step.finish_reason = FinishReason::kStop;
        step.stop_token_id = id;
        if (!o.include_stop_str_in_output) step.keep_bytes = before;
        return step;
      }
    }
    size_t best_end = std::string::npos, best_start = 0;
    for (size_t i = 0; i < o.stop_strings.size(); ++i) {
      size_t start = text.find(o.stop_strings[i]);
      if (start == std::string::npos) continue;
      size_t end = start + o.stop_strings[i].size();
      if (best_end == std::string::npos || end < best_end ||
          (end == best_end && start < best_start)) {
        best_end = end;
        best_start = start;
        step.stop_string_index = static_cast<int32_t>(i);
      }
    }
    if (step.stop_string_index >= 0) {
      step.stop = true;
      step.finish_reason = FinishReason::kStop;
      step.keep_bytes = static_cast<int64_t>(o.include_stop_str_in_output ? best_end : best_start);
    } else if (n >= o.max_tokens) {
      step.stop = true;
      step.finish_reason = FinishReason::kLength;
    }
    return step;
  }
};

TEST(StopMatcher, RandomStreamsMatchReferenceAndSurviveExportImport) {
  std::mt19937 rng(1234);
  const std::vector<std::string> pieces = {"a", "b", "c", "x", " ", "é", "!"};
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int num_stopped_by_string = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    StopOptions o;
    o.max_tokens = uniform(1, 40);
    o.include_stop_str_in_output = uniform(0, 1) == 1;
    if (uniform(0, 3) == 0) o.stop_token_ids = {kEos};
    for (int k = uniform(0, 3); k > 0; --k) {
      std::string s;
      for (int len = uniform(1, 4); len > 0; --len) s += pieces[static_cast<size_t>(uniform(0, 6))];
      o.stop_strings.push_back(s);
    }
    const bool strip = uniform(0, 1) == 1;
    std::vector<int32_t> ids;
    for (int i = 0; i < o.max_tokens; ++i) {
      int32_t id = static_cast<int32_t>(uniform(0, static_cast<int>(Table().size()) - 1));
      if (id == kEos && uniform(0, 4) != 0) id = kXa;  // EOS rarely
      ids.push_back(id);
    }
    Reference ref;
    ref.o = o;
    ref.strip = strip;
    StopMatcher whole = Make(o, strip);
    const int split = uniform(0, o.max_tokens);  // export after this many tokens
    StopMatcher first = Make(o, strip);
    StopMatcher second = Make(o, strip);
    bool migrated = false;
    for (size_t i = 0; i < ids.size(); ++i) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " token " + std::to_string(i));
      if (static_cast<int>(i) == split) {
        StopMatcher::State state = first.Export();
        ASSERT_TRUE(second.Restore(state).ok());
        ASSERT_EQ(second.Export(), state);
        migrated = true;
      }
      StopMatcher& live = migrated ? second : first;
      Step want = ref.Push(ids[i]);
      auto got = whole.Push(ids[i]);
      auto got_live = live.Push(ids[i]);
      ASSERT_TRUE(got.ok() && got_live.ok());
      ASSERT_EQ(*got, want) << "text '" << ref.text << "'";
      ASSERT_EQ(*got_live, want);
      if (want.stop) {
        num_stopped_by_string += want.stop_string_index >= 0;
        std::string kept = ref.text.substr(0, static_cast<size_t>(want.keep_bytes));
        std::string expected, rest;
        model::AppendUtf8Lossy(kept, true, &expected, &rest);
        EXPECT_EQ(TextOf(whole, ids, i + 1), expected);
        EXPECT_EQ(whole.Export(), live.Export());
        break;
      }
    }
  }
  EXPECT_GT(num_stopped_by_string, 200);  // the stop strings were exercised
}

// ---- real vocabularies (scripts/fetch_test_data.sh) ----

const model::Tokenizer* Cached(const std::string& relative) {
  static std::map<std::string, std::unique_ptr<model::Tokenizer>> cache;
  auto& slot = cache[relative];
  if (!slot) {
    auto tok = model::LoadTokenizer(relative.starts_with("llama.cpp/")
                                        ? ::laminar::testing::FetchedData(relative)
                                        : ::laminar::testing::SharedData(relative));
    EXPECT_TRUE(tok.ok()) << tok.status();
    if (tok.ok()) slot = std::move(*tok);
  }
  return slot.get();
}

// Each stop string stops at the first token whose text reaches the end of its first occurrence,
// and the response text is the text before it; with no stop string the text is Decode's.
void CheckRealVocab(const model::Tokenizer& tok, const std::string& text,
                    const std::vector<std::string>& stops) {
  auto ids = tok.Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  {
    StopOptions o;
    o.max_tokens = static_cast<int32_t>(ids->size());
    auto m = StopMatcher::Create(o, tok);
    ASSERT_TRUE(m.ok()) << m.status();
    for (int32_t id : *ids) ASSERT_TRUE(m->Push(id).ok());
    EXPECT_EQ(m->last_step().finish_reason, FinishReason::kLength);
    auto decoded = tok.Decode(*ids, /*skip_special=*/true);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*m->Text(*ids), *decoded);
  }
  auto decoded = tok.Decode(*ids, /*skip_special=*/true);
  ASSERT_TRUE(decoded.ok());
  for (const std::string& stop : stops) {
    SCOPED_TRACE("stop '" + stop + "'");
    const size_t at = decoded->find(stop);
    ASSERT_NE(at, std::string::npos);
    StopOptions o;
    o.stop_strings = {stop};
    o.max_tokens = 1000;
    auto m = StopMatcher::Create(o, tok);
    ASSERT_TRUE(m.ok()) << m.status();
    size_t n = 0;
    for (; n < ids->size(); ++n) {
      auto step = m->Push((*ids)[n]);
      ASSERT_TRUE(step.ok()) << step.status();
      if (step->stop) break;
    }
    ASSERT_LT(n, ids->size()) << "never stopped";
    // Raw bytes, not Decode: a prefix may end inside a character, which Decode would replace.
    auto raw = [&](size_t count) {
      std::string bytes;
      for (size_t i = 0; i < count; ++i) bytes += *tok.TokenBytes((*ids)[i], /*skip_special=*/true);
      if (tok.strips_leading_space() && bytes.starts_with(' ')) bytes.erase(0, 1);
      return bytes;
    };
    const std::string before = raw(n), upto = raw(n + 1);
    EXPECT_GE(upto.size(), at + stop.size());  // the stopping token completes the match
    EXPECT_LT(before.size(), at + stop.size());
    EXPECT_EQ(*m->Text(std::span<const int32_t>(ids->data(), n + 1)), decoded->substr(0, at));
  }
}

TEST(StopMatcher, Gpt2ByteLevelBpe) {
  LAMINAR_FETCHED(path, "llama.cpp/ggml-vocab-gpt-2.gguf");
  const model::Tokenizer* tok = Cached("llama.cpp/ggml-vocab-gpt-2.gguf");
  ASSERT_NE(tok, nullptr);
  // "日本語" and "é" are split across byte-level tokens; "swer is" starts mid-token.
  CheckRealVocab(*tok, "Hello world! The answer is 42.\nnaïve café 日本語 done",
                 {"answer is", "swer is", "ld! Th", "本", "é 日", "語 d", "42.\nna"});
}

TEST(StopMatcher, Llama2SentencePiece) {
  LAMINAR_FETCHED(path, "llama.cpp/ggml-vocab-llama-spm.gguf");
  const model::Tokenizer* tok = Cached("llama.cpp/ggml-vocab-llama-spm.gguf");
  ASSERT_NE(tok, nullptr);
  CheckRealVocab(*tok, " Hello world! The answer is 42. 日本語 done",
                 {"Hello", "answer is", "rld! T", "本語"});
}

}  // namespace
}  // namespace laminar::rollout
