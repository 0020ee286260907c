// Strings that exercise every JSON escape rule and the invalid-UTF-8 fallback (for the tests that
// compare json_writer.h's output with nlohmann's dump).
#pragma once

#include <string>
#include <vector>

namespace tinyserve::protocol {

inline std::vector<std::string> AwkwardStrings() {
  std::vector<std::string> out = {
      "",
      "Once upon a time",
      " there",
      "\"quoted\" and \\backslash\\",
      "line\nbreak\r\n\ttab\b\f",
      std::string("nul\0inside", 10),
      "\x01\x02\x1e\x1f\x7f",
      "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80",  // é € 😀
      "\xEF\xBF\xBD",                               // U+FFFD itself
      "\xC3",                                       // truncated 2-byte sequence
      "a\x80z",                                     // lone continuation byte
      "\xED\xA0\x80",                               // a surrogate (invalid in UTF-8)
      "\xF4\x90\x80\x80",                           // above U+10FFFF
      "\xC0\xAF",                                   // overlong
      "ok \xE2\x82 then \xF0\x9F\x98",              // two incomplete sequences
      "</script>\u2028\u2029",
  };
  for (int c = 0; c < 0x20; ++c) out.push_back(std::string(1, static_cast<char>(c)) + "x");
  return out;
}

}  // namespace tinyserve::protocol
