#include "server/request_guard.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "server/protocol/responses.h"

namespace tinyserve {

using protocol::ApiError;

namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

bool IsDecimal(const std::string& s) {
  return !s.empty() && s.size() <= 19 &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

}  // namespace

std::optional<ApiError> CheckRequestHead(const HttpRequest& req, bool json_route,
                                         size_t max_body_bytes) {
  const size_t num_lengths = req.HeaderCount("Content-Length");
  const bool has_encoding = req.HasHeader("Transfer-Encoding");
  if (num_lengths > 1) {
    return ApiError::BadRequest("The request has more than one Content-Length header.");
  }
  if (num_lengths == 1) {
    const std::string length = Trim(req.headers.find("Content-Length")->second);
    if (!IsDecimal(length)) {
      return ApiError::BadRequest("The request's Content-Length is not a decimal number.");
    }
    if (has_encoding) {
      return ApiError::BadRequest(
          "The request has both Content-Length and Transfer-Encoding (ambiguous framing).");
    }
    if (std::stoull(length) > max_body_bytes) {
      return ApiError::PayloadTooLarge("Request body is larger than the limit (" +
                                       std::to_string(max_body_bytes) + " bytes)");
    }
  }
  const bool chunked = has_encoding && req.HeaderCount("Transfer-Encoding") == 1 &&
                       Lower(Trim(req.HeaderValue("Transfer-Encoding"))) == "chunked";
  if (has_encoding && !chunked) {
    return ApiError::Make(411,
                          "Transfer-Encoding other than chunked is not accepted in requests: send "
                          "the body with a Content-Length.");
  }
  if (req.HeaderCount("Content-Encoding") > 1 ||
      (req.HasHeader("Content-Encoding") &&
       Lower(Trim(req.HeaderValue("Content-Encoding"))) != "identity")) {
    return ApiError::Make(415, "Compressed request bodies (Content-Encoding) are not supported.");
  }
  if (!json_route) return std::nullopt;
  const std::string type = req.HeaderValue("Content-Type");
  if (Lower(Trim(type.substr(0, type.find(';')))) != "application/json" ||
      req.HeaderCount("Content-Type") > 1) {
    return ApiError::Make(415, "Unsupported Media Type: Only 'application/json' is allowed");
  }
  if (num_lengths == 0 && !chunked) {
    return ApiError::Make(411, "A JSON request body needs a Content-Length (or chunked framing).");
  }
  return std::nullopt;
}

void SetErrorAndClose(HttpResponse& res, const ApiError& error) {
  res = HttpResponse();
  res.status = error.http_status;
  res.SetContent(protocol::DumpJson(error.ToJson()), "application/json");
  res.close_connection = true;
}

}  // namespace tinyserve
