#include "server/error_json.h"

#include <cstdio>
#include <new>

#include "server/http_message.h"
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

void SetErrorResponse(HttpResponse& res, int http_status, const std::string& message,
                      const std::optional<std::string>& param) {
  res.status = http_status;
  res.SetContent(ErrorJson(http_status, message, param)
                     .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                 "application/json");
}

void SetInternalErrorResponse(HttpResponse& res, std::exception_ptr error) noexcept {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    std::fputs("tinyserve: a request handler ran out of memory (std::bad_alloc)\n", stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tinyserve: a request handler threw: %s\n", e.what());
  } catch (...) {
    std::fputs("tinyserve: a request handler threw a non-standard exception\n", stderr);
  }
  try {
    SetErrorResponse(res, 500, "Internal server error");
  } catch (...) {
    res.status = 500;
  }
}

void SetErrorResponse(HttpResponse& res, const Status& status,
                      const std::optional<std::string>& param) {
  SetErrorResponse(res, HttpStatusFor(status), status.message(), param);
}

}  // namespace tinyserve
