#include "base/json_writer.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace tinyserve {
namespace {

bool NeedsEscape(unsigned char c) { return c < 0x20 || c == '"' || c == '\\'; }

}  // namespace

void AppendJsonString(std::string_view text, std::string* out) {
  bool ascii = true;
  for (const char ch : text) {
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (!ascii && !IsValidUtf8(text)) {
    out->append(
        nlohmann::ordered_json(std::string(text))
            .dump(-1, ' ', false,
                  nlohmann::ordered_json::error_handler_t::replace));  // nlohmann's U+FFFD rule
    return;
  }
  out->push_back('"');
  size_t run = 0;  // start of the bytes not yet appended
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!NeedsEscape(c)) continue;
    out->append(text.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        const char escaped[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out->append(escaped, sizeof(escaped));
        break;
      }
    }
  }
  out->append(text.data() + run, text.size() - run);
  out->push_back('"');
}

void AppendJsonInt(int64_t value, std::string* out) {
  char buf[24];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, result.ptr);
}

void AppendJsonDouble(double value, std::string* out) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  // nlohmann's serializer calls the same function (its Grisu2) with a buffer of the same size.
  char buf[64];
  const char* end = nlohmann::detail::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, static_cast<size_t>(end - buf));
}

}  // namespace tinyserve
