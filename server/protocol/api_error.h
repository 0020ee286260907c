// ApiError: an HTTP error answer of the OpenAI-compatible API, as a value.
//
// Body shape (vLLM's, which follows OpenAI's envelope):
//   {"error": {"message": "...", "type": "BadRequestError", "param": "max_tokens", "code": 400}}
// `type` uses vLLM's spelling (the exception class name a Python client would raise, the same
// table as server/error_json.h), and `code` is the numeric HTTP status, as vLLM sends it:
//   400 BadRequestError             validation, prompt + max_tokens over max_model_len
//   401 AuthenticationError         missing or wrong API key
//   404 NotFoundError               unknown model or route
//   405 MethodNotAllowedError       wrong method on a known route
//   411 LengthRequiredError         a body without Content-Length (server/request_guard.h)
//   413 RequestEntityTooLargeError  body over the limit
//   415 UnsupportedMediaTypeError   a compressed body, or not application/json on a JSON route
//   503 ServiceUnavailableError     overloaded (queue full) or engine dead
//   500 InternalServerError         anything else (never expected)
// `param` names the offending request field ("max_tokens", "messages[1].role",
// "stream_options.include_usage") or is null.
//
// ApiErrorOr<T> is StatusOr<T> with an ApiError in place of the Status: what the parsers return.
// Plain values; thread-compatible.
#pragma once

#include <cassert>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "base/status.h"

namespace tinyserve::protocol {

// The `type` string for an HTTP status (table above); "InternalServerError" for unknown ones.
const char* ApiErrorTypeFor(int http_status);

// The HTTP status for a non-OK Status code: InvalidArgument/OutOfRange 400, NotFound 404,
// ResourceExhausted/Unavailable/Aborted 503, Internal (and anything else) 500.
int HttpStatusForCode(StatusCode code);

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type;                  // ApiErrorTypeFor(http_status) unless set otherwise
  std::optional<std::string> param;  // the offending field, or null
  int code = 400;                    // = http_status

  // {"error": {"message", "type", "param", "code"}}, keys in that order.
  nlohmann::ordered_json ToJson() const;

  static ApiError Make(int http_status, std::string message,
                       std::optional<std::string> param = std::nullopt);
  static ApiError BadRequest(std::string message, std::optional<std::string> param = std::nullopt);
  static ApiError Unauthorized(std::string message = "Unauthorized");
  // 404 with vLLM's text: "The model `NAME` does not exist.", param "model".
  static ApiError ModelNotFound(const std::string& model);
  static ApiError PayloadTooLarge(std::string message);
  static ApiError Unavailable(std::string message);
  // REQUIRES: !status.ok(). HttpStatusForCode(status.code()) with the status' message.
  static ApiError FromStatus(const Status& status, std::optional<std::string> param = std::nullopt);
};

// Either a T or an ApiError. REQUIRES: value() only when ok().
template <typename T>
class [[nodiscard]] ApiErrorOr {
 public:
  ApiErrorOr(ApiError error) : error_(std::move(error)) {}  // NOLINT: implicit by design
  ApiErrorOr(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  // REQUIRES: !ok().
  const ApiError& error() const {
    assert(!ok());
    return *error_;
  }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<ApiError> error_;
  std::optional<T> value_;
};

}  // namespace tinyserve::protocol
