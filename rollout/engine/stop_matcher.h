// Stopping rules of one generation request, as vLLM and verl users know them: EOS / stop token
// ids, stop strings matched on the decoded text across token boundaries, max_tokens, and an
// external abort. Reference: vLLM's StopChecker (vllm/engine/output_processor/stop_checker.py).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar::model {
class Tokenizer;
}

namespace laminar::rollout {

// Why a request finished; the proto's FINISH_REASON_* and the output JSON's "finish_reason".
enum class FinishReason : uint8_t {
  kNone = 0,  // still running
  kStop,      // a stop token id (EOS) was sampled or a stop string appeared in the text
  kLength,    // max_tokens tokens were sampled
  kAbort,     // StopMatcher::Abort
  // The policy's logits for the next token held a NaN or +inf (weights or activations overflowed):
  // the sample ends before that token, with the tokens and logprobs it had (RolloutEngine).
  kNonFiniteLogits,
};
// "stop", "length", "abort", "non_finite_logits"; "" for kNone.
std::string_view FinishReasonName(FinishReason reason);

struct StopOptions {
  // Token ids that end the request when sampled (the model's EOS, chat end-of-turn tokens,
  // vLLM's stop_token_ids). Each >= 0. The sampled id stays in the response ids.
  std::vector<int32_t> stop_token_ids;
  // Non-empty, valid UTF-8 strings; the request stops as soon as one appears in the text.
  std::vector<std::string> stop_strings;
  // Tokens to sample at most (>= 1); reaching it finishes with kLength.
  int32_t max_tokens = 16;
  // Keep the matched stop string (or the stop token's text) in the response text; the text before
  // it otherwise (vLLM's include_stop_str_in_output).
  bool include_stop_str_in_output = false;
  // Control tokens contribute no text (vLLM's skip_special_tokens); only with a Tokenizer.
  bool skip_special_tokens = true;
};

// The bytes one token contributes to the text; errors (an id out of range) are passed on by Push.
using TokenBytesFn = std::function<StatusOr<std::string>(int32_t id)>;

// One request's stop checker. Push is called once per sampled token and says whether to stop.
//
// The text is the concatenation of the tokens' raw bytes (byte-level BPE tokens may end inside a
// UTF-8 character, so matching is on bytes, never on per-token strings), with SentencePiece's one
// leading space dropped as Tokenizer::Decode does. A valid UTF-8 stop string occurs in these bytes
// exactly where it occurs in the decoded text (U+FFFD replacement never swallows a valid
// character). The first stop string to appear wins: the occurrence that ends earliest in the
// text, and of those ending at the same byte the longest; so the result does not depend on how
// the text is split into tokens. Only the last (longest stop string - 1) bytes of earlier text are
// kept to find a match that spans tokens, so a Push costs O((tail + token bytes) * #stop strings).
//
// Order of checks per token, as vLLM: stop token id, then stop strings, then max_tokens.
// The token ids are never changed: the trajectory holds exactly what was sampled, the stop token
// and the token that completed a stop string included; only the text is cut (keep_bytes).
//
// Ownership: copies the options; borrows the Tokenizer given to Create (it must outlive this).
// Not thread-safe; copyable.
class StopMatcher {
 public:
  struct Step {
    bool stop = false;
    FinishReason finish_reason = FinishReason::kNone;
    // Bytes of the text that belong to the response: all of it while running; the text before
    // the stop string / stop token (through it with include_stop_str_in_output) when stopped.
    int64_t keep_bytes = 0;
    int32_t stop_string_index = -1;  // index into StopOptions::stop_strings when one matched
    int32_t stop_token_id = -1;      // the stop token id when one was sampled
    bool operator==(const Step&) const = default;
  };

  // Plain data of an in-flight matcher, to migrate a request to another engine:
  // Restore(Export()) on a matcher created with the same options continues identically.
  struct State {
    std::string tail;        // the last min(text_bytes, longest stop string - 1) text bytes
    int64_t num_tokens = 0;  // tokens pushed
    int64_t text_bytes = 0;  // text bytes so far
    bool at_start = true;    // no text byte yet (the leading-space strip is still to come)
    Step last;               // the final step once stopped; stop == false while running
    bool operator==(const State&) const = default;
  };

  // Errors: InvalidArgument naming the field for an empty or invalid-UTF-8 stop string, a
  // negative stop token id, max_tokens < 1 or a null token_bytes.
  // strips_leading_space: drop one leading space of the text (SentencePiece's dummy prefix).
  static StatusOr<StopMatcher> Create(StopOptions options, TokenBytesFn token_bytes,
                                      bool strips_leading_space = false);
  // Text from `tokenizer` (TokenBytes with options.skip_special_tokens, and its leading-space
  // rule). Errors as above.
  static StatusOr<StopMatcher> Create(StopOptions options, const model::Tokenizer& tokenizer);

  // One sampled token. Returns the step (stop set when the request is finished).
  // Errors: FailedPrecondition after the request finished; the token_bytes error (OutOfRange for
  // an id outside the vocabulary), with the matcher unchanged.
  StatusOr<Step> Push(int32_t token_id);
  // Finishes a running request with kAbort (keep_bytes: all the text so far); a finished one keeps
  // its reason. Returns the final step.
  Step Abort();

  bool finished() const { return state_.last.stop; }
  // The final step when finished; otherwise a running step with keep_bytes == text_bytes().
  Step last_step() const;
  int64_t num_tokens() const { return state_.num_tokens; }
  int64_t text_bytes() const { return state_.text_bytes; }
  const StopOptions& options() const { return options_; }

  // The response text of `ids` (all the ids pushed, in order): their bytes cut to keep_bytes,
  // invalid UTF-8 replaced with U+FFFD as Tokenizer::Decode does.
  // Errors: InvalidArgument when ids.size() != num_tokens(); the token_bytes error.
  StatusOr<std::string> Text(std::span<const int32_t> ids) const;

  State Export() const { return state_; }
  // Replaces this matcher's state. Errors: InvalidArgument when `state` cannot come from a matcher
  // with these options (tail longer than allowed or than the text, counts out of range).
  Status Restore(const State& state);

 private:
  StopMatcher(StopOptions options, TokenBytesFn token_bytes, bool strips_leading_space);
  // The token's text bytes: the leading space stripped when *at_start (SentencePiece), which
  // becomes false once a token has any byte.
  StatusOr<std::string> TextOf(int32_t id, bool* at_start) const;

  StopOptions options_;
  TokenBytesFn token_bytes_;
  bool strips_leading_space_ = false;
  size_t max_tail_bytes_ = 0;  // longest stop string - 1
  State state_;
};

}  // namespace laminar::rollout
