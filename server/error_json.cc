#include "server/error_json.h"

#include <httplib.h>

namespace tinyserve {

const char* ErrorTypeForHttpStatus(int http_status) {
  switch (http_status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 413:
      return "RequestEntityTooLargeError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return "InternalServerError";
  }
}

int HttpStatusFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
    case StatusCode::kAborted:
      return 503;
    default:
      return 500;
  }
}

nlohmann::ordered_json ErrorJson(int http_status, const std::string& message,
                                 const std::optional<std::string>& param, const std::string& type) {
  nlohmann::ordered_json error = {
      {"message", message},
      {"type", type.empty() ? ErrorTypeForHttpStatus(http_status) : type},
      {"param", param ? nlohmann::ordered_json(*param) : nlohmann::ordered_json(nullptr)},
      {"code", http_status},
  };
  return {{"error", std::move(error)}};
}

void SetErrorResponse(httplib::Response& res, int http_status, const std::string& message,
                      const std::optional<std::string>& param) {
  res.status = http_status;
  res.set_content(ErrorJson(http_status, message, param)
                      .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

void SetErrorResponse(httplib::Response& res, const Status& status,
                      const std::optional<std::string>& param) {
  SetErrorResponse(res, HttpStatusFor(status), status.message(), param);
}

}  // namespace tinyserve
