#include "models/tokenizer/added_tokens.h"

#include <algorithm>
#include <utility>

namespace tinyserve {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool IsWordByte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_';
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) {
  for (AddedToken& t : tokens) {
    if (!t.text.empty()) tokens_.push_back(std::move(t));
  }
  std::stable_sort(tokens_.begin(), tokens_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.text.size() > b.text.size();
  });
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<unsigned char>(tokens_[i].text[0])].push_back(
        static_cast<uint32_t>(i));
  }
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::Find(std::string_view text,
                                                                size_t from) const {
  if (tokens_.empty()) return std::nullopt;
  for (size_t pos = from; pos < text.size(); ++pos) {
    for (uint32_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& t = tokens_[index];
      if (text.compare(pos, t.text.size(), t.text) != 0) continue;
      const size_t end = pos + t.text.size();
      if (t.single_word && ((pos > 0 && IsWordByte(text[pos - 1])) ||
                            (end < text.size() && IsWordByte(text[end])))) {
        continue;
      }
      Match m{pos, end, pos, end, t.id};
      if (t.lstrip) {
        while (m.begin > from && IsSpace(text[m.begin - 1])) --m.begin;
      }
      if (t.rstrip) {
        while (m.end < text.size() && IsSpace(text[m.end])) ++m.end;
      }
      return m;
    }
  }
  return std::nullopt;
}

}  // namespace tinyserve
