// Status and StatusOr: the error type for everything outside our control (files, peers, configs,
// user code). Messages name the file, field, peer or tensor that is wrong; callers add context as
// the error travels up with LAMINAR_RETURN_IF_ERROR.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/check.h"

namespace laminar {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // bad input: config, dataset row, message, tokenizer input
  kNotFound,         // file, key or tensor absent
  kDataLoss,         // truncated or corrupted file or message
  kOutOfRange,       // index, length or count beyond a limit
  kUnimplemented,    // valid input we do not support (yet)
  kFailedPrecondition,
  kAlreadyExists,
  kResourceExhausted,
  kDeadlineExceeded,
  kUnavailable,  // peer or service not reachable
  kAborted,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

// Value type; cheap to copy when ok (no allocation). Thread-compatible.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "context: message". No-op on ok.
  Status WithContext(std::string_view context) const;
  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;

  // Marks the status as deliberately ignored.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& s);

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string msg);
Status NotFoundError(std::string msg);
Status DataLossError(std::string msg);
Status OutOfRangeError(std::string msg);
Status UnimplementedError(std::string msg);
Status FailedPreconditionError(std::string msg);
Status AlreadyExistsError(std::string msg);
Status ResourceExhaustedError(std::string msg);
Status DeadlineExceededError(std::string msg);
Status UnavailableError(std::string msg);
Status AbortedError(std::string msg);
Status InternalError(std::string msg);
// From errno after a failed system call: "what: strerror(errno)" with a code chosen by errno.
Status ErrnoError(std::string_view what, int err);

// Either a T or a non-ok Status. Accessing the value of a non-ok StatusOr is a bug (CHECK-fails).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : value_(status) {  // NOLINT(google-explicit-constructor)
    LAMINAR_CHECK(!status.ok()) << "StatusOr constructed from an ok Status without a value";
  }
  StatusOr(Status&& status) : value_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    LAMINAR_CHECK(!std::get<Status>(value_).ok())
        << "StatusOr constructed from an ok Status without a value";
  }
  StatusOr(const T& value) : value_(value) {}        // NOLINT(google-explicit-constructor)
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, StatusOr<T>>>>
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(value_); }
  Status status() const { return ok() ? Status() : std::get<Status>(value_); }

  const T& value() const& {
    CheckOk();
    return std::get<T>(value_);
  }
  T& value() & {
    CheckOk();
    return std::get<T>(value_);
  }
  T&& value() && {
    CheckOk();
    return std::get<T>(std::move(value_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckOk() const {
    LAMINAR_CHECK(ok()) << "value() of a non-ok StatusOr: " << std::get<Status>(value_);
  }
  std::variant<Status, T> value_;
};

namespace internal {
inline const Status& AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

}  // namespace laminar

#define LAMINAR_STATUS_CONCAT_INNER(a, b) a##b
#define LAMINAR_STATUS_CONCAT(a, b) LAMINAR_STATUS_CONCAT_INNER(a, b)

// Returns the error of `expr` (a Status or StatusOr) from the enclosing function. An optional
// second argument (anything streamable into std::string) is prefixed as context.
#define LAMINAR_RETURN_IF_ERROR(expr, ...)                                           \
  do {                                                                               \
    ::laminar::Status _laminar_st = ::laminar::internal::AsStatus(expr);             \
    if (!_laminar_st.ok()) return _laminar_st.WithContext(std::string(__VA_ARGS__)); \
  } while (0)

// LAMINAR_ASSIGN_OR_RETURN(auto x, FunctionReturningStatusOr()); an optional third argument is
// prefixed to the error as context, as in LAMINAR_RETURN_IF_ERROR.
#define LAMINAR_ASSIGN_OR_RETURN(lhs, expr, ...)                                          \
  LAMINAR_ASSIGN_OR_RETURN_IMPL(LAMINAR_STATUS_CONCAT(_laminar_so_, __LINE__), lhs, expr, \
                                __VA_ARGS__)
#define LAMINAR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr, ...)                  \
  auto tmp = (expr);                                                        \
  if (!tmp.ok()) return tmp.status().WithContext(std::string(__VA_ARGS__)); \
  lhs = std::move(tmp).value()
