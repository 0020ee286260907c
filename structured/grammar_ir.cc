#include "structured/grammar_ir.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

#include "structured/code_points.h"

namespace tinyserve::structured {
namespace {

constexpr int kMaxRepetition = 10000;  // {m,n} bounds above this are refused (grammar size)
// ( ) groups nested deeper than this are refused: the parser recurses once per level (three
// frames), and a request's grammar must not run a thread out of stack (1000 levels overflowed
// 8 MiB under AddressSanitizer). A regex allows fewer, regex.cc, so its GBNF always passes.
constexpr int kMaxGroupDepth = 256;

struct Sym {
  bool is_ref = false;
  int32_t value = 0;  // rule index or byte-set index
};
using Seq = std::vector<Sym>;
using Alts = std::vector<Seq>;

int Utf8Len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// [lo, hi] of one encoded length, split until every byte position is an independent range.
void SplitSameLength(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteSet>>* out) {
  const int len = Utf8Len(lo);
  for (int i = 1; i < len; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitSameLength(lo, lo | m, out);
        SplitSameLength((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitSameLength(lo, (hi & ~m) - 1, out);
        SplitSameLength(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  std::vector<ByteSet> seq(len);
  for (int i = 0; i < len; ++i) {
    seq[i].AddRange(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(seq));
}

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  StatusOr<Grammar> Parse() {
    SkipSpace();
    while (pos_ < text_.size()) {
      const int rule_line = line_;
      std::string name = ReadName();
      if (name.empty()) return Error("expected a rule name, got " + Describe());
      SkipSpace();
      if (text_.substr(pos_, 3) != "::=")
        return Error("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const int32_t rule = RuleIndex(name, rule_line);
      if (defined_line_[rule] != 0) {
        return Error("rule '" + name + "' is defined twice (first on line " +
                     std::to_string(defined_line_[rule]) + ")");
      }
      defined_line_[rule] = rule_line;
      StatusOr<Alts> body = ParseAlternatives(/*nested=*/false, rule_line);
      if (!body.ok()) return body.status();
      bodies_[rule] = std::move(*body);
      SkipSpace();
    }
    for (size_t r = 0; r < names_.size(); ++r) {
      if (defined_line_[r] == 0) {
        return InvalidArgument("grammar line " + std::to_string(use_line_[r]) +
                               ": undefined rule '" + names_[r] + "'");
      }
    }
    auto root = by_name_.find("root");
    if (root == by_name_.end())
      return InvalidArgument("grammar: missing rule 'root' (the start rule)");
    return Flatten(root->second);
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("grammar line " + std::to_string(line_) + ": " + what);
  }

  std::string Describe() const {
    if (pos_ >= text_.size()) return "end of grammar";
    return "'" + std::string(1, text_[pos_]) + "'";
  }

  // Skips spaces, tabs, newlines and # comments, counting lines.
  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '\n') {
        ++line_;
        ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ReadName() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsWordChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // True iff the text at pos_ is `name ::=` (the start of the next rule).
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsWordChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  int32_t RuleIndex(const std::string& name, int line) {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return it->second;
    const int32_t index = static_cast<int32_t>(names_.size());
    names_.push_back(name);
    bodies_.emplace_back();
    defined_line_.push_back(0);
    use_line_.push_back(line);
    by_name_[name] = index;
    return index;
  }

  int32_t NewHelper(Alts body, int line) {
    const int32_t index = static_cast<int32_t>(names_.size());
    names_.push_back("(helper " + std::to_string(index) + " of line " + std::to_string(line) + ")");
    bodies_.push_back(std::move(body));
    defined_line_.push_back(line);
    use_line_.push_back(line);
    return index;
  }

  int32_t ByteSetIndex(const ByteSet& set) {
    auto [it, inserted] = set_index_.try_emplace(set.words, static_cast<int32_t>(sets_.size()));
    if (inserted) sets_.push_back(set);
    return it->second;
  }

  Sym ByteSym(const ByteSet& set) { return {false, ByteSetIndex(set)}; }

  // The symbol of a code-point class (one byte set when ASCII only, else a helper rule).
  Sym ClassSym(const Ranges& ranges) {
    auto cached = class_rule_.find(ranges);
    if (cached != class_rule_.end()) return cached->second;
    ByteSet ascii;
    bool has_ascii = false;
    std::vector<std::vector<ByteSet>> seqs;
    for (const auto& [lo, hi] : ranges) {
      if (lo < 0x80) {
        ascii.AddRange(static_cast<uint8_t>(lo),
                       static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
        has_ascii = true;
      }
      if (hi >= 0x80) Utf8RangeSequences(std::max<uint32_t>(lo, 0x80), hi, &seqs);
    }
    Sym sym;
    if (seqs.empty() && has_ascii) {
      sym = ByteSym(ascii);
    } else {
      Alts alts;
      if (has_ascii) alts.push_back({ByteSym(ascii)});
      for (const auto& seq : seqs) {
        Seq s;
        for (const ByteSet& b : seq) s.push_back(ByteSym(b));
        alts.push_back(std::move(s));
      }
      sym = {true, NewHelper(std::move(alts), line_)};
    }
    class_rule_[ranges] = sym;
    return sym;
  }

  StatusOr<Alts> ParseAlternatives(bool nested, int open_line) {
    Alts alts;
    while (true) {
      StatusOr<Seq> seq = ParseSequence(nested, open_line);
      if (!seq.ok()) return seq.status();
      alts.push_back(std::move(*seq));
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return alts;
    }
  }

  StatusOr<Seq> ParseSequence(bool nested, int open_line) {
    Seq seq;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || AtRuleStart()) {
        if (nested) {
          return InvalidArgument("grammar line " + std::to_string(open_line) +
                                 ": unbalanced '(' (no matching ')')");
        }
        return seq;
      }
      const char c = text_[pos_];
      if (c == '|') return seq;
      if (c == ')') {
        if (!nested) return Error("unbalanced ')'");
        return seq;
      }
      const int item_line = line_;
      StatusOr<Seq> item = ParseItem();
      if (!item.ok()) return item.status();
      Seq current = std::move(*item);
      // Postfix repetitions.
      while (pos_ < text_.size() && (text_[pos_] == '*' || text_[pos_] == '+' ||
                                     text_[pos_] == '?' || text_[pos_] == '{')) {
        int min = 0, max = -1;  // max -1: unbounded
        const char op = text_[pos_++];
        if (op == '+') {
          min = 1;
        } else if (op == '?') {
          max = 1;
        } else if (op == '{') {
          Status st = ParseBraces(&min, &max);
          if (!st.ok()) return st;
        }
        current = Repeat(current, min, max, item_line);
      }
      seq.insert(seq.end(), current.begin(), current.end());
    }
  }

  Status ParseBraces(int* min, int* max) {
    auto read_int = [&](int* out) {
      const size_t start = pos_;
      long v = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        v = v * 10 + (text_[pos_] - '0');
        if (v > kMaxRepetition) v = kMaxRepetition + 1;
        ++pos_;
      }
      *out = static_cast<int>(v);
      return pos_ > start;
    };
    auto skip = [&] {
      while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
    };
    skip();
    const bool has_min = read_int(min);
    if (!has_min) *min = 0;
    skip();
    if (pos_ < text_.size() && text_[pos_] == ',') {
      ++pos_;
      skip();
      if (!read_int(max)) *max = -1;
      skip();
    } else {
      if (!has_min) return Error("expected a number in '{...}'");
      *max = *min;
    }
    if (pos_ >= text_.size() || text_[pos_] != '}')
      return Error("expected '}' after repetition bounds");
    ++pos_;
    if (*min > kMaxRepetition || *max > kMaxRepetition) {
      return Error("repetition bound above " + std::to_string(kMaxRepetition));
    }
    if (*max >= 0 && *max < *min) return Error("repetition {m,n} with n < m");
    return Status::Ok();
  }

  Sym AsSym(const Seq& seq, int line) {
    if (seq.size() == 1) return seq[0];
    return {true, NewHelper({seq}, line)};
  }

  Seq Repeat(const Seq& x, int min, int max, int line) {
    if (x.empty()) return {};
    const Sym s = AsSym(x, line);
    Seq out;
    for (int i = 0; i < min; ++i) out.push_back(s);
    if (max < 0) {
      const int32_t star = NewHelper({}, line);
      bodies_[star] = {{s, Sym{true, star}}, {}};
      out.push_back({true, star});
    } else if (max > min) {
      int32_t inner = NewHelper({{s}, {}}, line);
      for (int i = min + 1; i < max; ++i) inner = NewHelper({{s, Sym{true, inner}}, {}}, line);
      out.push_back({true, inner});
    }
    return out;
  }

  // Decodes one UTF-8 code point of the grammar text at pos_.
  StatusOr<uint32_t> ReadCodePoint() {
    const auto b0 = static_cast<uint8_t>(text_[pos_]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) return Error("invalid UTF-8 in the grammar text");
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<uint8_t>(text_[pos_ + i]);
      if ((b >> 6) != 2) return Error("invalid UTF-8 in the grammar text");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += len;
    return cp;
  }

  // One char of a literal or class, escapes decoded.
  StatusOr<uint32_t> ReadChar() {
    if (text_[pos_] != '\\') return ReadCodePoint();
    ++pos_;
    if (pos_ >= text_.size()) return Error("unterminated escape");
    const char e = text_[pos_++];
    switch (e) {
      case 'n':
        return uint32_t{'\n'};
      case 'r':
        return uint32_t{'\r'};
      case 't':
        return uint32_t{'\t'};
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '\'':
      case '/':
      case '^':
        return static_cast<uint32_t>(e);
      case 'x':
      case 'u':
      case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
            return Error(std::string("escape \\") + e + " needs " + std::to_string(digits) +
                         " hex digits");
          }
          const char h = text_[pos_++];
          v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v > kMaxCodePoint) return Error("escape names a code point above U+10FFFF");
        return v;
      }
      default:
        return Error(std::string("unknown escape '\\") + e + "'");
    }
  }

  StatusOr<Seq> ParseItem() {
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (true) {
        if (pos_ >= text_.size() || text_[pos_] == '\n')
          return Error("unterminated string literal");
        if (text_[pos_] == '"') break;
        StatusOr<uint32_t> cp = ReadChar();
        if (!cp.ok()) return cp.status();
        AppendUtf8(*cp, &bytes);
      }
      ++pos_;
      Seq seq;
      for (char b : bytes) {
        ByteSet set;
        set.Add(static_cast<uint8_t>(b));
        seq.push_back(ByteSym(set));
      }
      return seq;
    }
    if (c == '[') {
      ++pos_;
      bool negated = false;
      if (pos_ < text_.size() && text_[pos_] == '^') {
        negated = true;
        ++pos_;
      }
      Ranges ranges;
      while (true) {
        if (pos_ >= text_.size() || text_[pos_] == '\n')
          return Error("unterminated char class '['");
        if (text_[pos_] == ']') break;
        StatusOr<uint32_t> lo = ReadChar();
        if (!lo.ok()) return lo.status();
        uint32_t hi = *lo;
        if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
          ++pos_;
          StatusOr<uint32_t> h = ReadChar();
          if (!h.ok()) return h.status();
          hi = *h;
          if (hi < *lo) return Error("char class range with its end before its start");
        }
        ranges.push_back({*lo, hi});
      }
      ++pos_;
      ranges = Normalize(std::move(ranges));
      if (negated) ranges = Complement(ranges);
      if (ranges.empty()) return Error("char class matches nothing");
      return Seq{ClassSym(ranges)};
    }
    if (c == '.') {
      ++pos_;
      return Seq{ClassSym({{0, kMaxCodePoint}})};
    }
    if (c == '(') {
      const int open_line = line_;
      if (group_depth_ == kMaxGroupDepth) {
        return Error("groups nest deeper than the limit of " + std::to_string(kMaxGroupDepth));
      }
      ++pos_;
      ++group_depth_;
      StatusOr<Alts> alts = ParseAlternatives(/*nested=*/true, open_line);
      --group_depth_;
      if (!alts.ok()) return alts.status();
      if (pos_ >= text_.size() || text_[pos_] != ')') {
        return InvalidArgument("grammar line " + std::to_string(open_line) +
                               ": unbalanced '(' (no matching ')')");
      }
      ++pos_;
      if (alts->size() == 1) return std::move((*alts)[0]);
      return Seq{Sym{true, NewHelper(std::move(*alts), open_line)}};
    }
    if (IsWordChar(c)) {
      const int use_line = line_;
      std::string name = ReadName();
      return Seq{Sym{true, RuleIndex(name, use_line)}};
    }
    return Error("unexpected " + Describe());
  }

  StatusOr<Grammar> Flatten(int32_t root) {
    Grammar g;
    g.rule_names = names_;
    g.byte_sets = sets_;
    g.root = root;
    g.rule_alternatives.resize(names_.size());
    for (size_t r = 0; r < names_.size(); ++r) {
      for (const Seq& seq : bodies_[r]) {
        g.rule_alternatives[r].push_back(static_cast<int32_t>(g.elements.size()));
        for (const Sym& s : seq) {
          g.elements.push_back(
              {s.is_ref ? Element::Kind::kRuleRef : Element::Kind::kBytes, s.value});
        }
        g.elements.push_back({Element::Kind::kEnd, 0});
      }
    }
    // Left recursion: a rule reaching itself through references that can be first.
    const size_t n = names_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& seq : bodies_[r]) {
          if (std::all_of(seq.begin(), seq.end(),
                          [&](const Sym& s) { return s.is_ref && nullable[s.value]; })) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& seq : bodies_[r]) {
        for (const Sym& s : seq) {
          if (!s.is_ref) break;
          first[r].push_back(s.value);
          if (!nullable[s.value]) break;
        }
      }
    }
    // Depth first with an explicit path (a chain of rules can be as long as the grammar): each
    // entry is a rule and how many of its first references have been followed.
    std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
    int32_t cycle_at = -1;
    std::vector<std::pair<int32_t, size_t>> path;
    for (size_t start = 0; start < n && cycle_at < 0; ++start) {
      if (color[start] != 0) continue;
      color[start] = 1;
      path.push_back({static_cast<int32_t>(start), 0});
      while (!path.empty() && cycle_at < 0) {
        auto& [r, i] = path.back();
        if (i == first[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const int32_t next = first[r][i++];
        if (color[next] == 1) {
          cycle_at = next;
        } else if (color[next] == 0) {
          color[next] = 1;
          path.push_back({next, 0});
        }
      }
    }
    if (cycle_at >= 0) {
      return InvalidArgument("grammar line " + std::to_string(defined_line_[cycle_at]) +
                             ": rule '" + names_[cycle_at] +
                             "' is left-recursive (it can reach itself before consuming input; a "
                             "repetition of something that can be empty does this too)");
    }
    return g;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  int group_depth_ = 0;  // ( ) groups open at pos_
  std::vector<std::string> names_;
  std::vector<Alts> bodies_;
  std::vector<int> defined_line_;  // 0: not (yet) defined
  std::vector<int> use_line_;      // where first referenced
  std::unordered_map<std::string, int32_t> by_name_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, int32_t> set_index_;
  std::map<Ranges, Sym> class_rule_;
};

}  // namespace

void Utf8RangeSequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteSet>>* out) {
  // Split at the encoded-length boundaries and around the surrogates.
  const std::pair<uint32_t, uint32_t> pieces[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, kMaxCodePoint}};
  for (const auto& [plo, phi] : pieces) {
    const uint32_t a = std::max(lo, plo), b = std::min(hi, phi);
    if (a <= b) SplitSameLength(a, b, out);
  }
}

StatusOr<Grammar> ParseGbnf(std::string_view text) { return Parser(text).Parse(); }

}  // namespace tinyserve::structured
