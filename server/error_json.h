// The HTTP error body of the server, in vLLM's (OpenAI's) shape:
//   {"error": {"message": "...", "type": "BadRequestError", "param": null, "code": 400}}
// and the one mapping from engine Status codes to HTTP statuses (the server alone maps them).
// Plain functions; thread-safe.
#pragma once

#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"

namespace tinyserve {

struct HttpResponse;

// "BadRequestError" (400), "AuthenticationError" (401), "NotFoundError" (404),
// "MethodNotAllowedError" (405), "LengthRequiredError" (411), "RequestEntityTooLargeError" (413),
// "UnsupportedMediaTypeError" (415),
// "ServiceUnavailableError" (503), "InternalServerError" (500 and anything else).
const char* ErrorTypeForHttpStatus(int http_status);

// The HTTP status for a non-OK Status: InvalidArgument/OutOfRange 400, NotFound 404,
// ResourceExhausted/Unavailable/Aborted 503, Internal (and anything else) 500.
int HttpStatusFor(const Status& status);

// The error JSON (keys in that order); `type` defaults to ErrorTypeForHttpStatus(http_status),
// `param` (the offending request field) to null.
nlohmann::ordered_json ErrorJson(int http_status, const std::string& message,
                                 const std::optional<std::string>& param = std::nullopt,
                                 const std::string& type = "");

// Sets `res` to the error JSON with status `http_status` (Content-Type application/json).
void SetErrorResponse(HttpResponse& res, int http_status, const std::string& message,
                      const std::optional<std::string>& param = std::nullopt);
// The 500 for an exception a handler threw (`error`, may be null): "Internal server error" and
// nothing of the exception (its text can name code, files or memory), which goes to stderr
// instead. Never throws: out of memory even for the body, it sets the status alone.
void SetInternalErrorResponse(HttpResponse& res, std::exception_ptr error) noexcept;
// Same, for a non-OK Status (HttpStatusFor its code, its message).
void SetErrorResponse(HttpResponse& res, const Status& status,
                      const std::optional<std::string>& param = std::nullopt);

}  // namespace tinyserve
