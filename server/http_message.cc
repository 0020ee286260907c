#include "server/http_message.h"

#include <algorithm>
#include <cctype>

namespace tinyserve {

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  return std::lexicographical_compare(
      a.begin(), a.end(), b.begin(), b.end(),
      [](unsigned char x, unsigned char y) { return std::tolower(x) < std::tolower(y); });
}

std::string HttpRequest::HeaderValue(std::string_view name) const {
  const auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string() : it->second;
}

bool HttpRequest::HasHeader(std::string_view name) const {
  return headers.count(std::string(name)) != 0;
}

size_t HttpRequest::HeaderCount(std::string_view name) const {
  return headers.count(std::string(name));
}

std::string HttpRequest::ParamValue(const std::string& name) const {
  const auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

void HttpResponse::SetContent(std::string content, const std::string& content_type) {
  body = std::move(content);
  SetHeader("Content-Type", content_type);
}

void HttpResponse::SetHeader(const std::string& name, const std::string& value) {
  headers.erase(name);
  headers.emplace(name, value);
}

std::string HttpResponse::HeaderValue(std::string_view name) const {
  const auto it = headers.find(std::string(name));
  return it == headers.end() ? std::string() : it->second;
}

}  // namespace tinyserve
