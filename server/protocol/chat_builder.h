// ChatBuilder: the rendered text of a chat template, with the byte ranges that hold message
// contents (encoded as plain text later, so that no one can inject a special token). Shared by
// chat_template.cc and tool_templates.cc; not part of the protocol API. Single-owner values.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "server/protocol/chat_template.h"

namespace tinyserve::protocol {

class ChatBuilder {
 public:
  ChatBuilder& Text(std::string_view s) {
    out_.text.append(s);
    return *this;
  }
  ChatBuilder& Content(std::string_view s) {
    const size_t begin = out_.text.size();
    out_.text.append(s);
    if (!s.empty()) out_.content_ranges.emplace_back(begin, out_.text.size());
    return *this;
  }
  RenderedChat Take() { return std::move(out_); }

 private:
  RenderedChat out_;
};

// Python's str.strip() for ASCII whitespace (Jinja's `trim`).
inline std::string Strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  size_t end = s.find_last_not_of(kSpace);
  return std::string(s.substr(begin, end - begin + 1));
}

}  // namespace tinyserve::protocol
