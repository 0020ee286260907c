#include "structured/regex.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>
#include <vector>

#include "structured/code_points.h"
#include "structured/grammar.h"

namespace tinyserve::structured {
namespace {

Ranges Intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  for (const auto& [alo, ahi] : a) {
    for (const auto& [blo, bhi] : b) {
      const uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  return Normalize(std::move(out));
}

std::string ClassChar(uint32_t cp) {
  char buf[16];
  if (cp >= 0x20 && cp < 0x7F && cp != ']' && cp != '[' && cp != '\\' && cp != '-' && cp != '^' &&
      cp != '"') {
    return std::string(1, static_cast<char>(cp));
  }
  if (cp < 0x80) {
    std::snprintf(buf, sizeof(buf), "\\x%02X", cp);
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof(buf), "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08X", cp);
  }
  return buf;
}

// The JSON escape of a char that may not appear raw in a JSON string.
std::string JsonEscapeOf(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default: {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      return buf;
    }
  }
}

bool NeedsJsonEscape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

// Groups nested deeper than this are refused: the parser recurses once per level, and so does the
// GBNF parser its output goes to, which allows 256 levels: a regex group becomes up to three (the
// group, its alternatives, a quantifier), and a char set with escaped chars one more.
constexpr int kMaxRegexGroupDepth = 64;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space

class RegexParser {
 public:
  RegexParser(std::string_view p, RegexTarget target) : p_(p), target_(target) {}

  StatusOr<std::string> Parse() {
    if (!p_.empty() && p_[0] == '^') i_ = 1;
    StatusOr<std::string> e = ParseAlternation();
    if (!e.ok()) return e;
    if (i_ < p_.size()) {
      if (p_[i_] == ')') return Error("unbalanced ')'");
      return Error("unexpected '" + std::string(1, p_[i_]) + "'");
    }
    return e;
  }

 private:
  Status Error(const std::string& what) const { return ErrorAt(i_, what); }
  Status ErrorAt(size_t at, const std::string& what) const {
    return InvalidArgument("regex offset " + std::to_string(at) + ": " + what);
  }

  // The GBNF of one matched char set.
  std::string CharSet(const Ranges& ranges) {
    if (target_ == RegexTarget::kRaw) return GbnfClass(ranges);
    static const Ranges kUnsafe = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    const Ranges safe = Intersect(ranges, Complement(kUnsafe));
    std::string out;
    if (!safe.empty()) out = GbnfClass(safe);
    bool any_escaped = false;
    for (const auto& [lo, hi] : Intersect(ranges, kUnsafe)) {
      for (uint32_t c = lo; c <= hi; ++c) {
        out += (out.empty() ? "" : " | ") + GbnfLiteral(JsonEscapeOf(c));
        any_escaped = true;
      }
    }
    return any_escaped ? "( " + out + " )" : out;
  }

  std::string Literal(uint32_t cp) {
    if (target_ == RegexTarget::kJsonString && NeedsJsonEscape(cp)) {
      return GbnfLiteral(JsonEscapeOf(cp));
    }
    std::string bytes;
    AppendUtf8(cp, &bytes);
    return GbnfLiteral(bytes);
  }

  StatusOr<std::string> ParseAlternation() {
    std::vector<std::string> alts;
    while (true) {
      StatusOr<std::string> seq = ParseConcat();
      if (!seq.ok()) return seq;
      alts.push_back(std::move(*seq));
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
    return out + " )";
  }

  StatusOr<std::string> ParseConcat() {
    std::string out;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        if (i_ + 1 != p_.size()) return Error("anchor '$' is only supported at the end");
        ++i_;
        continue;
      }
      if (p_[i_] == '^') return Error("anchor '^' is only supported at the start");
      StatusOr<std::string> atom = ParseAtom();
      if (!atom.ok()) return atom;
      StatusOr<std::string> rep = ParseQuantifiers(std::move(*atom));
      if (!rep.ok()) return rep;
      if (!rep->empty()) out += (out.empty() ? "" : " ") + *rep;
    }
    return out;
  }

  StatusOr<std::string> ParseQuantifiers(std::string atom) {
    while (i_ < p_.size()) {
      const size_t at = i_;
      const char c = p_[i_];
      std::string suffix;
      if (c == '*' || c == '+' || c == '?') {
        suffix = std::string(1, c);
        ++i_;
      } else if (c == '{') {
        size_t j = i_ + 1;
        std::string m, n;
        bool comma = false;
        while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) m += p_[j++];
        if (j < p_.size() && p_[j] == ',') {
          comma = true;
          ++j;
          while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j]))) n += p_[j++];
        }
        if (j >= p_.size() || p_[j] != '}' || (m.empty() && (!comma || n.empty()))) {
          return Error("malformed repetition '{'");  // Python takes it literally; we refuse
        }
        if (m.size() > 5 || n.size() > 5) return Error("repetition bound too large");
        if (!n.empty() && std::stoi(n) < (m.empty() ? 0 : std::stoi(m))) {
          return Error("repetition {m,n} with n < m");
        }
        suffix = "{" + (m.empty() ? "0" : m) + (comma ? "," + n : "") + "}";
        i_ = j + 1;
      } else {
        break;
      }
      if (i_ < p_.size() && p_[i_] == '?') {
        ++i_;  // lazy: the same language
      } else if (i_ < p_.size() && p_[i_] == '+') {
        return Error("possessive quantifier is not supported");
      }
      if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || p_[i_] == '{')) {
        // Python's "multiple repeat" (each would also nest the GBNF one level deeper)
        return ErrorAt(i_, "a quantifier may not follow a quantifier ('" + std::string(1, p_[i_]) +
                               "' after offset " + std::to_string(at) + ")");
      }
      if (atom.empty()) break;
      atom = "( " + atom + " )" + suffix;
    }
    return atom;
  }

  // An escape after '\' inside or outside a class: a set of chars, or an error.
  StatusOr<Ranges> ParseEscape(bool in_class) {
    const size_t at = i_ - 1;
    if (i_ >= p_.size()) return ErrorAt(at, "trailing backslash");
    const char e = p_[i_++];
    switch (e) {
      case 'd':
        return kDigit;
      case 'w':
        return kWord;
      case 's':
        return kSpace;
      case 'D':
        return Complement(kDigit);
      case 'W':
        return Complement(kWord);
      case 'S':
        return Complement(kSpace);
      case 'n':
        return Ranges{{'\n', '\n'}};
      case 't':
        return Ranges{{'\t', '\t'}};
      case 'r':
        return Ranges{{'\r', '\r'}};
      case 'f':
        return Ranges{{'\f', '\f'}};
      case 'v':
        return Ranges{{'\v', '\v'}};
      case '0':
        return Ranges{{0, 0}};
      case 'b':
        if (in_class) return Ranges{{'\b', '\b'}};
        return ErrorAt(at, "word boundary \\b is not supported");
      case 'B':
        return ErrorAt(at, "word boundary \\B is not supported");
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        return ErrorAt(at, std::string("anchor \\") + e + " is not supported");
      case 'k':
        return ErrorAt(at, "backreference \\k is not supported");
      case 'x':
      case 'u': {
        const int digits = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          if (i_ >= p_.size() || !std::isxdigit(static_cast<unsigned char>(p_[i_]))) {
            return ErrorAt(at, std::string("escape \\") + e + " needs " + std::to_string(digits) +
                                   " hex digits");
          }
          const char h = p_[i_++];
          v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return Ranges{{v, v}};
      }
      default:
        if (e >= '1' && e <= '9') return ErrorAt(at, "backreference is not supported");
        if (std::isalnum(static_cast<unsigned char>(e))) {
          return ErrorAt(at, std::string("unknown escape \\") + e);
        }
        return Ranges{{static_cast<uint32_t>(static_cast<unsigned char>(e)),
                       static_cast<uint32_t>(static_cast<unsigned char>(e))}};
    }
  }

  StatusOr<uint32_t> ReadCodePoint() {
    const auto b0 = static_cast<uint8_t>(p_[i_]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + len > p_.size()) return Error("invalid UTF-8");
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<uint8_t>(p_[i_ + k]);
      if ((b >> 6) != 2) return Error("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += len;
    return cp;
  }

  StatusOr<std::string> ParseClass() {
    const size_t open = i_ - 1;
    bool negated = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negated = true;
      ++i_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) return ErrorAt(open, "unterminated character class '['");
      if (p_[i_] == ']' && !first) break;
      first = false;
      // One member: a char or an escape (a set).
      auto member = [&]() -> StatusOr<Ranges> {
        if (p_[i_] == '\\') {
          ++i_;
          return ParseEscape(/*in_class=*/true);
        }
        if (p_[i_] == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          return Error("POSIX classes [:name:] are not supported");
        }
        StatusOr<uint32_t> cp = ReadCodePoint();
        if (!cp.ok()) return cp.status();
        return Ranges{{*cp, *cp}};
      };
      StatusOr<Ranges> lo = member();
      if (!lo.ok()) return lo.status();
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']' && lo->size() == 1 &&
          (*lo)[0].first == (*lo)[0].second) {
        const size_t dash = i_;
        ++i_;
        StatusOr<Ranges> hi = member();
        if (!hi.ok()) return hi.status();
        if (hi->size() != 1 || (*hi)[0].first != (*hi)[0].second) {
          return ErrorAt(dash, "a class range needs single chars at both ends");
        }
        if ((*hi)[0].first < (*lo)[0].first) return ErrorAt(dash, "class range out of order");
        ranges.push_back({(*lo)[0].first, (*hi)[0].first});
      } else {
        ranges.insert(ranges.end(), lo->begin(), lo->end());
      }
    }
    ++i_;
    ranges = Normalize(std::move(ranges));
    if (negated) ranges = Complement(ranges);
    if (ranges.empty()) return ErrorAt(open, "character class matches nothing");
    return CharSet(ranges);
  }

  StatusOr<std::string> ParseAtom() {
    const size_t at = i_;
    const char c = p_[i_];
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      return Error(std::string("quantifier '") + c + "' with nothing to repeat");
    }
    if (c == '(') {
      if (depth_ == kMaxRegexGroupDepth) {
        return ErrorAt(
            at, "groups nest deeper than the limit of " + std::to_string(kMaxRegexGroupDepth));
      }
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (p_.substr(i_, 2) == "?:") {
          i_ += 2;
        } else if (p_.substr(i_, 3) == "?P<" || (p_.substr(i_, 2) == "?<" && i_ + 2 < p_.size() &&
                                                 p_[i_ + 2] != '=' && p_[i_ + 2] != '!')) {
          const size_t close = p_.find('>', i_);
          if (close == std::string_view::npos) return ErrorAt(at, "unterminated group name");
          i_ = close + 1;
        } else if (p_.substr(i_, 2) == "?=" || p_.substr(i_, 2) == "?!" ||
                   p_.substr(i_, 3) == "?<=" || p_.substr(i_, 3) == "?<!") {
          return ErrorAt(at, "lookaround is not supported");
        } else if (p_.substr(i_, 3) == "?P=") {
          return ErrorAt(at, "backreference is not supported");
        } else {
          return ErrorAt(at, "unsupported group syntax '(?'");
        }
      }
      ++depth_;
      StatusOr<std::string> inner = ParseAlternation();
      --depth_;
      if (!inner.ok()) return inner;
      if (i_ >= p_.size() || p_[i_] != ')') return ErrorAt(at, "unbalanced '(' (no matching ')')");
      ++i_;
      return inner->empty() ? std::string() : "( " + *inner + " )";
    }
    if (c == '[') {
      ++i_;
      return ParseClass();
    }
    if (c == '.') {
      ++i_;
      return CharSet(Complement({{'\n', '\n'}}));
    }
    if (c == '\\') {
      ++i_;
      StatusOr<Ranges> r = ParseEscape(/*in_class=*/false);
      if (!r.ok()) return r.status();
      if (r->size() == 1 && (*r)[0].first == (*r)[0].second) return Literal((*r)[0].first);
      return CharSet(Normalize(*r));
    }
    StatusOr<uint32_t> cp = ReadCodePoint();
    if (!cp.ok()) return cp.status();
    return Literal(*cp);
  }

  std::string_view p_;
  RegexTarget target_;
  size_t i_ = 0;
  int depth_ = 0;  // groups open at i_
};

}  // namespace

std::string GbnfClass(const Ranges& ranges) {
  std::string out = "[";
  for (const auto& [lo, hi] : ranges) {
    out += ClassChar(lo);
    if (hi != lo) out += "-" + ClassChar(hi);
  }
  return out + "]";
}

StatusOr<std::string> RegexToGbnf(std::string_view pattern, std::string_view rule_name,
                                  RegexTarget target) {
  StatusOr<std::string> body = RegexParser(pattern, target).Parse();
  if (!body.ok()) return body;
  return std::string(rule_name) + " ::= " + (body->empty() ? "\"\"" : *body) + "\n";
}

}  // namespace tinyserve::structured
