#include "server/request_guard.h"

#include <httplib.h>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "server/connection_watch.h"
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

void LingeringClose(int fd) {
  constexpr auto kMaxTime = std::chrono::seconds(1);
  constexpr size_t kMaxBytes = size_t{16} << 20;
  shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + kMaxTime;
  char buf[16384];
  size_t drained = 0;
  while (drained < kMaxBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) break;  // the client closed its side, or an error
    drained += static_cast<size_t>(n);
  }
}

std::optional<ApiError> CheckRequestHead(const httplib::Request& req, bool json_route,
                                         size_t max_body_bytes) {
  const size_t num_lengths = req.get_header_value_count("Content-Length");
  const bool has_encoding = req.has_header("Transfer-Encoding");
  if (num_lengths > 1) {
    return ApiError::BadRequest("The request has more than one Content-Length header.");
  }
  if (num_lengths == 1) {
    // The map holds the whole value (get_header_value would cut it at a NUL).
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
    // httplib reads a body only for these methods: any other body would be read as the next
    // request.
    const bool body_is_read = req.method == "POST" || req.method == "PUT" ||
                              req.method == "PATCH" || req.method == "DELETE" ||
                              req.method == "PRI";
    if (!body_is_read && length.find_first_not_of('0') != std::string::npos) {
      return ApiError::BadRequest("A " + req.method + " request cannot have a body.");
    }
  }
  if (has_encoding) {
    return ApiError::Make(411,
                          "Transfer-Encoding is not accepted in requests: send the body with a "
                          "Content-Length.");
  }
  if (req.has_header("Content-Encoding") &&
      Lower(Trim(req.get_header_value("Content-Encoding"))) != "identity") {
    return ApiError::Make(415, "Compressed request bodies (Content-Encoding) are not supported.");
  }
  if (!json_route) return std::nullopt;
  const std::string type = req.get_header_value("Content-Type");
  if (Lower(Trim(type.substr(0, type.find(';')))) != "application/json" ||
      req.get_header_value_count("Content-Type") > 1) {
    return ApiError::Make(415, "Unsupported Media Type: Only 'application/json' is allowed");
  }
  if (num_lengths == 0) {
    return ApiError::Make(411, "A JSON request body needs a Content-Length.");
  }
  return std::nullopt;
}

void IgnoreRange(const httplib::Request& req) {
  // httplib calls the pre-routing handler with its own Request object, which is not const.
  auto& mutable_req = const_cast<httplib::Request&>(req);
  mutable_req.ranges.clear();
  mutable_req.headers.erase("Range");
}

void SendErrorAndClose(const httplib::Request& req, httplib::Response& res, const ApiError& error) {
  if (req.method == "HEAD") const_cast<httplib::Request&>(req).method = "GET";
  res.status = error.http_status;
  res.set_header("Connection", "close");
  auto body = std::make_shared<const std::string>(protocol::DumpJson(error.ToJson()));
  const int fd = ConnectionWatch::ForRequest(req).fd();
  res.set_content_provider(body->size(), "application/json",
                           [body, fd](size_t offset, size_t length, httplib::DataSink& sink) {
                             if (sink.write(body->data() + offset, length) && fd >= 0)
                               LingeringClose(fd);
                             // A provider that fails makes httplib end the connection rather than
                             // read the next request from it (the unread body of this one).
                             return false;
                           });
}

}  // namespace tinyserve
