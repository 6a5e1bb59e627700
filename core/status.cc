// Status implementation.
#include "core/status.h"

#include <cerrno>
#include <cstring>

namespace laminar {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

Status Status::WithContext(std::string_view context) const {
  if (ok() || context.empty()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

Status InvalidArgumentError(std::string msg) {
  return {StatusCode::kInvalidArgument, std::move(msg)};
}
Status NotFoundError(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
Status DataLossError(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
Status OutOfRangeError(std::string msg) { return {StatusCode::kOutOfRange, std::move(msg)}; }
Status UnimplementedError(std::string msg) { return {StatusCode::kUnimplemented, std::move(msg)}; }
Status FailedPreconditionError(std::string msg) {
  return {StatusCode::kFailedPrecondition, std::move(msg)};
}
Status AlreadyExistsError(std::string msg) { return {StatusCode::kAlreadyExists, std::move(msg)}; }
Status ResourceExhaustedError(std::string msg) {
  return {StatusCode::kResourceExhausted, std::move(msg)};
}
Status DeadlineExceededError(std::string msg) {
  return {StatusCode::kDeadlineExceeded, std::move(msg)};
}
Status UnavailableError(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
Status AbortedError(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }
Status InternalError(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

Status ErrnoError(std::string_view what, int err) {
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case ENOENT:
      code = StatusCode::kNotFound;
      break;
    case EACCES:
    case EPERM:
      code = StatusCode::kFailedPrecondition;
      break;
    case EEXIST:
      code = StatusCode::kAlreadyExists;
      break;
    case ENOMEM:
    case ENOSPC:
      code = StatusCode::kResourceExhausted;
      break;
    case EINVAL:
    case EISDIR:
    case ENOTDIR:
      code = StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return Status(code, std::string(what) + ": " + std::strerror(err));
}

}  // namespace laminar
