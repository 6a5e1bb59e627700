#include "rollout/engine/stop_matcher.h"

#include <algorithm>
#include <string>
#include <utility>

#include "model/tokenizer/tokenizer.h"

namespace laminar::rollout {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNonFiniteLogits:
      return "non_finite_logits";
  }
  return "";
}

StatusOr<StopMatcher> StopMatcher::Create(StopOptions options, TokenBytesFn token_bytes,
                                          bool strips_leading_space) {
  if (!token_bytes) return InvalidArgumentError("StopMatcher: token_bytes is null");
  if (options.max_tokens < 1) {
    return InvalidArgumentError("StopMatcher: max_tokens must be >= 1, got " +
                                std::to_string(options.max_tokens));
  }
  for (size_t i = 0; i < options.stop_token_ids.size(); ++i) {
    if (options.stop_token_ids[i] < 0) {
      return InvalidArgumentError("StopMatcher: stop_token_ids[" + std::to_string(i) + "] is " +
                                  std::to_string(options.stop_token_ids[i]) + ", must be >= 0");
    }
  }
  for (size_t i = 0; i < options.stop_strings.size(); ++i) {
    const std::string& s = options.stop_strings[i];
    if (s.empty()) {
      return InvalidArgumentError("StopMatcher: stop_strings[" + std::to_string(i) + "] is empty");
    }
    Status utf8 = model::CheckUtf8(s);
    if (!utf8.ok()) {
      return InvalidArgumentError("StopMatcher: stop_strings[" + std::to_string(i) +
                                  "]: " + utf8.message());
    }
  }
  return StopMatcher(std::move(options), std::move(token_bytes), strips_leading_space);
}

StatusOr<StopMatcher> StopMatcher::Create(StopOptions options, const model::Tokenizer& tokenizer) {
  const bool skip = options.skip_special_tokens;
  const model::Tokenizer* tok = &tokenizer;
  return Create(
      std::move(options), [tok, skip](int32_t id) { return tok->TokenBytes(id, skip); },
      tokenizer.strips_leading_space());
}

StopMatcher::StopMatcher(StopOptions options, TokenBytesFn token_bytes, bool strips_leading_space)
    : options_(std::move(options)),
      token_bytes_(std::move(token_bytes)),
      strips_leading_space_(strips_leading_space) {
  for (const std::string& s : options_.stop_strings) {
    max_tail_bytes_ = std::max(max_tail_bytes_, s.size() - 1);
  }
}

StatusOr<std::string> StopMatcher::TextOf(int32_t id, bool* at_start) const {
  StatusOr<std::string> bytes = token_bytes_(id);
  if (!bytes.ok() || bytes->empty()) return bytes;
  const bool strip = strips_leading_space_ && *at_start;
  *at_start = false;
  if (strip && bytes->starts_with(' ')) return bytes->substr(1);
  return bytes;
}

StatusOr<StopMatcher::Step> StopMatcher::Push(int32_t token_id) {
  if (finished()) {
    return FailedPreconditionError("StopMatcher::Push: the request already finished (" +
                                   std::string(FinishReasonName(state_.last.finish_reason)) +
                                   ") after " + std::to_string(state_.num_tokens) + " tokens");
  }
  // An empty token (a skipped special one) keeps the leading-space strip pending, as the
  // streaming decoder does.
  bool at_start = state_.at_start;
  LAMINAR_ASSIGN_OR_RETURN(std::string bytes, TextOf(token_id, &at_start));
  State& s = state_;
  const int64_t text_before = s.text_bytes;
  s.num_tokens += 1;
  s.text_bytes += static_cast<int64_t>(bytes.size());
  s.at_start = at_start;

  Step step;
  step.keep_bytes = s.text_bytes;
  if (std::find(options_.stop_token_ids.begin(), options_.stop_token_ids.end(), token_id) !=
      options_.stop_token_ids.end()) {
    step.stop = true;
    step.finish_reason = FinishReason::kStop;
    step.stop_token_id = token_id;
    if (!options_.include_stop_str_in_output) step.keep_bytes = text_before;
  } else if (!options_.stop_strings.empty()) {
    // window = the tail of earlier text + this token's bytes; window[0] is text byte
    // text_before - tail.size(). Only matches ending inside the new bytes are new.
    const std::string window = s.tail + bytes;
    const size_t tail_size = s.tail.size();
    size_t best_end = std::string::npos;
    size_t best_start = 0;
    int32_t best_index = -1;
    for (size_t i = 0; i < options_.stop_strings.size(); ++i) {
      const std::string& stop = options_.stop_strings[i];
      const size_t from = tail_size >= stop.size() ? tail_size - stop.size() + 1 : 0;
      const size_t start = window.find(stop, from);
      if (start == std::string::npos) continue;
      const size_t end = start + stop.size();
      if (best_index < 0 || end < best_end || (end == best_end && start < best_start)) {
        best_end = end;
        best_start = start;
        best_index = static_cast<int32_t>(i);
      }
    }
    if (best_index >= 0) {
      const int64_t window_origin = text_before - static_cast<int64_t>(tail_size);
      step.stop = true;
      step.finish_reason = FinishReason::kStop;
      step.stop_string_index = best_index;
      step.keep_bytes =
          window_origin +
          static_cast<int64_t>(options_.include_stop_str_in_output ? best_end : best_start);
    } else {
      const size_t keep = std::min(max_tail_bytes_, window.size());
      s.tail.assign(window, window.size() - keep, keep);
    }
  }
  if (!step.stop && s.num_tokens >= options_.max_tokens) {
    step.stop = true;
    step.finish_reason = FinishReason::kLength;
  }
  if (step.stop) s.last = step;
  return step;
}

StopMatcher::Step StopMatcher::Abort() {
  if (!finished()) {
    state_.last =
        Step{.stop = true, .finish_reason = FinishReason::kAbort, .keep_bytes = state_.text_bytes};
  }
  return state_.last;
}

StopMatcher::Step StopMatcher::last_step() const {
  if (finished()) return state_.last;
  return Step{.keep_bytes = state_.text_bytes};
}

StatusOr<std::string> StopMatcher::Text(std::span<const int32_t> ids) const {
  if (static_cast<int64_t>(ids.size()) != state_.num_tokens) {
    return InvalidArgumentError("StopMatcher::Text: got " + std::to_string(ids.size()) +
                                " ids, the matcher saw " + std::to_string(state_.num_tokens));
  }
  std::string bytes;
  bool at_start = true;
  for (int32_t id : ids) {
    LAMINAR_ASSIGN_OR_RETURN(std::string piece, TextOf(id, &at_start));
    bytes += piece;
  }
  const int64_t keep = last_step().keep_bytes;
  if (static_cast<int64_t>(bytes.size()) != state_.text_bytes || keep > state_.text_bytes) {
    return InvalidArgumentError("StopMatcher::Text: the ids give " + std::to_string(bytes.size()) +
                                " text bytes, the matcher saw " +
                                std::to_string(state_.text_bytes) + " (not the ids pushed)");
  }
  bytes.resize(static_cast<size_t>(keep));
  std::string out;
  std::string rest;  // stays empty with final = true
  model::AppendUtf8Lossy(bytes, /*final=*/true, &out, &rest);
  return out;
}

Status StopMatcher::Restore(const State& state) {
  auto bad = [](const std::string& what) {
    return InvalidArgumentError("StopMatcher::Restore: " + what);
  };
  if (state.num_tokens < 0 || state.num_tokens > options_.max_tokens) {
    return bad("num_tokens " + std::to_string(state.num_tokens) + " outside [0, max_tokens " +
               std::to_string(options_.max_tokens) + "]");
  }
  if (state.text_bytes < 0) return bad("text_bytes " + std::to_string(state.text_bytes) + " < 0");
  const size_t want_tail = static_cast<size_t>(
      std::min<int64_t>(state.text_bytes, static_cast<int64_t>(max_tail_bytes_)));
  // The tail is only maintained while stop strings are searched; a finished or stop-string-free
  // matcher may carry a shorter one.
  if (state.tail.size() > want_tail ||
      (!state.last.stop && !options_.stop_strings.empty() && state.tail.size() != want_tail)) {
    return bad("tail of " + std::to_string(state.tail.size()) + " bytes, expected " +
               std::to_string(want_tail) + " (the last min(text_bytes, longest stop string - 1))");
  }
  if (state.at_start && state.text_bytes != 0) return bad("at_start with text bytes");
  if (!state.last.stop) {
    if (state.num_tokens == options_.max_tokens) return bad("running with max_tokens reached");
    if (state.last != Step{}) return bad("a running state carries a final step");
  } else if (state.last.finish_reason == FinishReason::kNone || state.last.keep_bytes < 0 ||
             state.last.keep_bytes > state.text_bytes) {
    return bad("the final step is inconsistent (reason " +
               std::string(FinishReasonName(state.last.finish_reason)) + ", keep_bytes " +
               std::to_string(state.last.keep_bytes) + ")");
  }
  state_ = state;
  return OkStatus();
}

}  // namespace laminar::rollout
