// Status and StatusOr<T>: errors that can happen (bad files, bad input, device failures) as values.
//
// A Status is OK or carries a code and a message meant for a human ("stories.bin: file is 1024
// bytes, header implies 2048"). Library code returns these and never exits the process; only the
// frontends (CLI, HTTP) turn them into exit codes or HTTP statuses. Thread-compatible values.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace tinyserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad input from the caller (request field, CLI flag, file contents)
  kNotFound,           // a file or entity that does not exist
  kOutOfRange,         // a value past a limit (context length, token budget)
  kResourceExhausted,  // out of memory, KV blocks, queue slots
  kUnavailable,        // a device or service that cannot be used now
  kInternal,           // an invariant broke: a bug
  kAborted,            // the operation was cancelled
  kDeviceLost,         // the device failed for good (a sticky device error): the engine must die
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status DeviceLost(std::string m) { return {StatusCode::kDeviceLost, std::move(m)}; }

// Either a T or a non-OK Status. REQUIRES: value() only when ok().
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "StatusOr needs a value or a non-OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace tinyserve

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define TS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::tinyserve::Status _ts_status = (expr); \
    if (!_ts_status.ok()) return _ts_status; \
  } while (0)
