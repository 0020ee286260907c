#include "base/utf8.h"

#include <cstdint>

namespace tinyserve {
namespace {

// For lead byte `b`: the sequence length (0 if `b` cannot start one) and the allowed range of
// the second byte (the rest are always 0x80..0xBF).
struct LeadInfo {
  int length;
  uint8_t lo;
  uint8_t hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    const LeadInfo lead = Lead(b);
    if (lead.length == 1) {
      out->push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    if (lead.length == 0) {
      out->append(kReplacementChar);
      ++i;
      continue;
    }
    // Count the bytes of the maximal valid subpart starting at i.
    int valid = 1;
    while (valid < lead.length && i + valid < bytes.size()) {
      const uint8_t c = static_cast<uint8_t>(bytes[i + valid]);
      const uint8_t lo = valid == 1 ? lead.lo : 0x80;
      const uint8_t hi = valid == 1 ? lead.hi : 0xBF;
      if (c < lo || c > hi) break;
      ++valid;
    }
    if (valid == lead.length) {
      out->append(bytes.substr(i, valid));
      i += valid;
    } else if (i + valid == bytes.size() && !final) {
      return i;  // incomplete at the end: wait for more bytes
    } else {
      out->append(kReplacementChar);
      i += valid;
    }
  }
  return i;
}

bool IsValidUtf8(std::string_view bytes) {
  // The walk of AppendUtf8Lossy, stopping at the first byte it would replace.
  size_t i = 0;
  while (i < bytes.size()) {
    const LeadInfo lead = Lead(static_cast<uint8_t>(bytes[i]));
    if (lead.length == 0) return false;
    if (i + static_cast<size_t>(lead.length) > bytes.size()) return false;
    for (int k = 1; k < lead.length; ++k) {
      const uint8_t c = static_cast<uint8_t>(bytes[i + static_cast<size_t>(k)]);
      const uint8_t lo = k == 1 ? lead.lo : 0x80;
      const uint8_t hi = k == 1 ? lead.hi : 0xBF;
      if (c < lo || c > hi) return false;
    }
    i += static_cast<size_t>(lead.length);
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

size_t Utf8Length(std::string_view text) {
  size_t n = 0;
  for (char c : text) {
    if ((static_cast<uint8_t>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

}  // namespace tinyserve
