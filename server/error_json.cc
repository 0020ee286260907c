#include "server/error_json.h"

#include <httplib.h>

#include "server/protocol/api_error.h"

namespace tinyserve {

// One table for the whole server: the protocol layer's.
const char* ErrorTypeForHttpStatus(int http_status) {
  return protocol::ApiErrorTypeFor(http_status);
}

int HttpStatusFor(const Status& status) { return protocol::HttpStatusForCode(status.code()); }

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
