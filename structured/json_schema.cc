// JSON Schema -> GBNF (JsonSchemaToGbnf in grammar.h).
//
// What each keyword becomes, and where the grammar is narrower than the schema (every output
// still validates; some valid documents cannot be generated):
// - objects: `properties` in schema order, each `required` one present, optional ones may be left
//   out (any subset, in order); `additionalProperties` false, true or a schema. When it is absent,
//   no additional properties are generated (as llama.cpp does). A `required` name that is not in
//   `properties` is generated with the additionalProperties schema (an error when they are false).
//   Additional keys are any string (a key equal to a declared property name is not excluded).
// - arrays: `items` (one schema), `minItems`, `maxItems`.
// - strings: `minLength`/`maxLength` in code points, `pattern` (the whole string content matches
//   the pattern, as if anchored by ^...$: llama.cpp's rule; for an unanchored pattern this is
//   stricter than ECMA's search, so outputs still validate), `format` date, time, date-time,
//   uuid, email (dates never generate February 29, so every one is a real date).
// - numbers have at most 16 integer digits, 16 fraction digits and 2 exponent digits (llama.cpp
//   bounds them too: a small model cannot loop on digits, and every number fits a double).
// - integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` exactly (draft-4
//   boolean exclusives too). Numbers with bounds: an integer part within the bounds and a fraction
//   only where any fraction stays inside (e.g. maximum 5.7 generates at most 5), no exponent.
// - `enum`, `const` (values written compactly), `type` (one or an array), `anyOf`, `oneOf` (as
//   anyOf: exactly-one is not enforced, so keep branches disjoint), `allOf` of one schema,
//   `$ref` to `#`, `#/$defs/...`, `#/definitions/...` or any local JSON pointer (recursion too).
// - Annotations (title, description, examples, default, $schema, $id, $comment, ...) are
//   ignored; any other keyword that constrains values is InvalidArgument naming it and its JSON
//   pointer.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "structured/grammar.h"
#include "structured/json_grammar.h"
#include "structured/regex.h"

namespace tinyserve::structured {
namespace {

using Json = nlohmann::ordered_json;

// Keywords that constrain values and are not implemented: refused, never ignored.
const std::set<std::string> kUnsupported = {"patternProperties",
                                            "not",
                                            "if",
                                            "then",
                                            "else",
                                            "multipleOf",
                                            "uniqueItems",
                                            "dependentRequired",
                                            "dependentSchemas",
                                            "dependencies",
                                            "propertyNames",
                                            "minProperties",
                                            "maxProperties",
                                            "contains",
                                            "minContains",
                                            "maxContains",
                                            "prefixItems",
                                            "additionalItems",
                                            "unevaluatedProperties",
                                            "unevaluatedItems",
                                            "$dynamicRef",
                                            "$recursiveRef",
                                            "contentSchema"};

// The keywords that constrain values and are implemented.
const std::set<std::string> kImplemented = {"type",
                                            "properties",
                                            "required",
                                            "additionalProperties",
                                            "items",
                                            "minItems",
                                            "maxItems",
                                            "enum",
                                            "const",
                                            "minLength",
                                            "maxLength",
                                            "pattern",
                                            "format",
                                            "minimum",
                                            "maximum",
                                            "exclusiveMinimum",
                                            "exclusiveMaximum",
                                            "anyOf",
                                            "oneOf",
                                            "allOf",
                                            "$ref"};

std::string EscapePointerToken(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Where(const std::string& pointer) { return pointer.empty() ? "/" : pointer; }

// Digits of a non-negative integer.
std::string Digits(uint64_t v) { return std::to_string(v); }

// GBNF for the decimal integers with the same number of digits in [lo, hi] (as strings).
std::string SameLength(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  const size_t rest = lo.size() - 1;
  auto digit = [](char a, char b) {
    if (a == b) return "\"" + std::string(1, a) + "\"";
    return "[" + std::string(1, a) + "-" + std::string(1, b) + "]";
  };
  auto any = [&](size_t n) {
    return n == 0   ? std::string()
           : n == 1 ? std::string(" [0-9]")
                    : " [0-9]{" + std::to_string(n) + "}";
  };
  if (lo[0] == hi[0]) {
    const std::string tail = SameLength(lo.substr(1), hi.substr(1));
    return digit(lo[0], lo[0]) + (tail.empty() ? "" : " " + tail);
  }
  const bool lo_zeros = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_nines = hi.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> alts;
  char from = lo[0], to = hi[0];
  if (!lo_zeros) {
    alts.push_back(digit(lo[0], lo[0]) + " ( " + SameLength(lo.substr(1), std::string(rest, '9')) +
                   " )");
    ++from;
  }
  std::string last;
  if (!hi_nines) {
    last = digit(hi[0], hi[0]) + " ( " + SameLength(std::string(rest, '0'), hi.substr(1)) + " )";
    --to;
  }
  if (from <= to) alts.push_back(digit(from, to) + any(rest));
  if (!last.empty()) alts.push_back(last);
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

constexpr uint64_t kNoMax = std::numeric_limits<uint64_t>::max();

// How deep subschemas (properties, items, anyOf, ...) and $refs may nest (Converter::Visit).
constexpr int kMaxVisitDepth = 256;

// GBNF for the non-negative integers in [lo, hi] (hi kNoMax: unbounded), no leading zeros.
// REQUIRES: lo <= hi.
std::string NonNegativeRange(uint64_t lo, uint64_t hi) {
  std::vector<std::string> alts;
  const std::string lo_s = Digits(lo);
  const bool bounded = hi != kNoMax;
  const size_t max_len = bounded ? Digits(hi).size() : lo_s.size();
  for (size_t len = lo_s.size(); len <= max_len; ++len) {
    const std::string a = len == lo_s.size() ? lo_s : "1" + std::string(len - 1, '0');
    const std::string b = (bounded && len == max_len) ? Digits(hi) : std::string(len, '9');
    alts.push_back(SameLength(a, b));
  }
  // Unbounded: at most 16 digits (as the plain JSON numbers).
  if (!bounded && lo_s.size() < 16) {
    alts.push_back("[1-9] [0-9]{" + std::to_string(lo_s.size()) + ",15}");
  }
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

// GBNF for the integers in [lo, hi] (nullopt: unbounded). REQUIRES: lo <= hi when both given.
std::string IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!hi || *hi >= 0) {  // the non-negative part
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    alts.push_back(NonNegativeRange(a, hi ? static_cast<uint64_t>(*hi) : kNoMax));
  }
  if (!lo || *lo < 0) {  // the negative part, by magnitude
    const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    const uint64_t b = lo ? static_cast<uint64_t>(-*lo) : kNoMax;
    alts.push_back("\"-\" " + NonNegativeRange(a, b));
  }
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

class Converter {
 public:
  Converter(const Json& root, std::string prefix, std::string ws)
      : root_(root), prefix_(std::move(prefix)), ws_(std::move(ws)) {}

  StatusOr<std::string> Run(const std::optional<std::string>& whitespace_pattern) {
    const std::string root_name = prefix_ + "root";
    refs_["#"] = root_name;
    StatusOr<std::string> body = Visit(root_, "");
    if (!body.ok()) return body;
    std::string out = root_name + " ::= " + *body + "\n";
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    if (need_any_) out += JsonValueRules(prefix_ + "any-", ws_);
    StatusOr<std::string> ws = WhitespaceRule(ws_, whitespace_pattern);
    if (!ws.ok()) return ws;
    return out + patterns_ + *ws;
  }

 private:
  Status Error(const std::string& pointer, const std::string& what) const {
    return InvalidArgument("json schema at " + Where(pointer) + ": " + what);
  }

  std::string NewRule(const std::string& hint, const std::string& body) {
    const std::string name = prefix_ + hint + "-" + std::to_string(counter_++);
    rules_.emplace_back(name, body);
    return name;
  }

  std::string Any() {
    need_any_ = true;
    return prefix_ + "any-value";
  }
  std::string Char() {
    need_any_ = true;
    return prefix_ + "any-char";
  }

  StatusOr<std::string> Visit(const Json& schema, const std::string& pointer) {
    // Subschemas and $refs nest at most kMaxVisitDepth deep: each level is a frame of this
    // recursion, and a chain of $defs that refer to each other is as long as a request makes it.
    if (visit_depth_ == kMaxVisitDepth) {
      return Error(pointer, "subschemas and $refs nest deeper than the limit of " +
                                std::to_string(kMaxVisitDepth));
    }
    ++visit_depth_;
    StatusOr<std::string> out = VisitSchema(schema, pointer);
    --visit_depth_;
    return out;
  }

  StatusOr<std::string> VisitSchema(const Json& schema, const std::string& pointer) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return Any();
      return Error(pointer, "schema false matches nothing");
    }
    if (!schema.is_object()) return Error(pointer, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items()) {
      if (kUnsupported.count(key)) {
        return Error(pointer, "keyword '" + key + "' is not supported");
      }
    }
    auto has = [&](const char* k) { return schema.contains(k); };
    auto siblings_ok = [&](const char* keyword) -> Status {
      for (const auto& [key, value] : schema.items()) {
        if (key != keyword && kImplemented.count(key)) {
          return Error(pointer, "keyword '" + key + "' beside '" + keyword + "' is not supported");
        }
      }
      return Status::Ok();
    };
    if (has("$ref")) {
      if (Status st = siblings_ok("$ref"); !st.ok()) return st;
      return Ref(schema["$ref"], pointer + "/$ref");
    }
    if (has("const")) {
      if (Status st = siblings_ok("const"); !st.ok()) {
        if (!has("type")) return st;  // `type` beside `const` is harmless when it agrees
      }
      return GbnfLiteral(schema["const"].dump());
    }
    if (has("enum")) {
      const Json& e = schema["enum"];
      if (!e.is_array() || e.empty())
        return Error(pointer + "/enum", "enum must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < e.size(); ++i) out += (i ? " | " : " ") + GbnfLiteral(e[i].dump());
      return out + " )";
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!has(k)) continue;
      if (Status st = siblings_ok(k); !st.ok()) return st;
      const Json& list = schema[k];
      if (!list.is_array() || list.empty()) {
        return Error(pointer + "/" + k, std::string(k) + " must be a non-empty array");
      }
      std::string out = "(";
      for (size_t i = 0; i < list.size(); ++i) {
        StatusOr<std::string> alt = Visit(list[i], pointer + "/" + k + "/" + std::to_string(i));
        if (!alt.ok()) return alt;
        out += (i ? " | " : " ") + *alt;
      }
      return out + " )";
    }
    if (has("allOf")) {
      if (Status st = siblings_ok("allOf"); !st.ok()) return st;
      const Json& list = schema["allOf"];
      if (!list.is_array() || list.size() != 1) {
        return Error(pointer + "/allOf", "allOf is supported with exactly one schema");
      }
      return Visit(list[0], pointer + "/allOf/0");
    }
    if (has("type")) {
      const Json& t = schema["type"];
      if (t.is_string()) return Typed(schema, t.get<std::string>(), pointer);
      if (!t.is_array() || t.empty()) {
        return Error(pointer + "/type", "type must be a string or a non-empty array");
      }
      std::string out = "(";
      for (size_t i = 0; i < t.size(); ++i) {
        if (!t[i].is_string()) return Error(pointer + "/type/" + std::to_string(i), "not a string");
        StatusOr<std::string> alt = Typed(schema, t[i].get<std::string>(), pointer);
        if (!alt.ok()) return alt;
        out += (i ? " | " : " ") + *alt;
      }
      return out + " )";
    }
    // No type: infer it from the keywords present.
    if (has("properties") || has("additionalProperties") || has("required")) {
      return Typed(schema, "object", pointer);
    }
    if (has("items") || has("minItems") || has("maxItems")) return Typed(schema, "array", pointer);
    if (has("minLength") || has("maxLength") || has("pattern") || has("format")) {
      return Typed(schema, "string", pointer);
    }
    if (has("minimum") || has("maximum") || has("exclusiveMinimum") || has("exclusiveMaximum")) {
      return Typed(schema, "number", pointer);
    }
    return Any();
  }

  StatusOr<std::string> Ref(const Json& ref, const std::string& pointer) {
    if (!ref.is_string()) return Error(pointer, "$ref must be a string");
    const std::string r = ref.get<std::string>();
    auto it = refs_.find(r);
    if (it != refs_.end()) return it->second;
    if (r.empty() || r[0] != '#') {
      return Error(pointer, "$ref '" + r + "' is not supported (only local refs '#...')");
    }
    const Json* target = &root_;
    std::string path = r.substr(1);
    size_t pos = 0;
    if (!path.empty() && path[0] != '/') {
      return Error(pointer, "$ref '" + r + "': only JSON-pointer refs are supported");
    }
    while (pos < path.size()) {
      const size_t next = std::min(path.find('/', pos + 1), path.size());
      std::string token = path.substr(pos + 1, next - pos - 1);
      std::string unescaped;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() &&
            (token[i + 1] == '0' || token[i + 1] == '1')) {
          unescaped += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          unescaped += token[i];
        }
      }
      if (target->is_object() && target->contains(unescaped)) {
        target = &(*target)[unescaped];
      } else if (target->is_array() && !unescaped.empty() && unescaped.size() <= 9 &&
                 unescaped.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(unescaped) < target->size()) {
        target = &(*target)[std::stoul(unescaped)];
      } else {
        return Error(pointer, "$ref '" + r + "' does not resolve");
      }
      pos = next;
    }
    // Named before it is visited, so recursive refs end at the name.
    const std::string name = prefix_ + "ref-" + std::to_string(counter_++);
    refs_[r] = name;
    const size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    StatusOr<std::string> body = Visit(*target, path);
    if (!body.ok()) return body;
    rules_[slot].second = *body;
    return name;
  }

  StatusOr<std::optional<double>> Number(const Json& schema, const char* key,
                                         const std::string& pointer) {
    if (!schema.contains(key)) return std::optional<double>();
    const Json& v = schema[key];
    if (!v.is_number()) return Error(pointer + "/" + key, std::string(key) + " must be a number");
    return std::optional<double>(v.get<double>());
  }

  StatusOr<std::optional<int64_t>> Count(const Json& schema, const char* key,
                                         const std::string& pointer) {
    if (!schema.contains(key)) return std::optional<int64_t>();
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(pointer + "/" + key, std::string(key) + " must be a non-negative integer");
    }
    if (v.get<int64_t>() > 10000) {
      return Error(pointer + "/" + key, std::string(key) + " above 10000 is not supported");
    }
    return std::optional<int64_t>(v.get<int64_t>());
  }

  // The integer bounds [lo, hi] of a schema's minimum/maximum/exclusive* keywords.
  Status IntegerBounds(const Json& schema, const std::string& pointer, std::optional<int64_t>* lo,
                       std::optional<int64_t>* hi) {
    StatusOr<std::optional<double>> mn = Number(schema, "minimum", pointer);
    StatusOr<std::optional<double>> mx = Number(schema, "maximum", pointer);
    if (!mn.ok()) return mn.status();
    if (!mx.ok()) return mx.status();
    constexpr double kLimit = 1e18;
    auto clamp = [&](double v) { return std::abs(v) > kLimit; };
    std::optional<double> min_v = *mn, max_v = *mx;
    bool min_ex = false, max_ex = false;
    for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"}) {
      if (!schema.contains(k)) continue;
      const Json& v = schema[k];
      const bool is_min = k[9] == 'M' && k[10] == 'i';
      if (v.is_boolean()) {  // draft 4: a flag on minimum/maximum
        (is_min ? min_ex : max_ex) = v.get<bool>();
      } else if (v.is_number()) {
        const double d = v.get<double>();
        std::optional<double>& slot = is_min ? min_v : max_v;
        const bool stricter = !slot || (is_min ? d >= *slot : d <= *slot);
        if (stricter) {
          slot = d;
          (is_min ? min_ex : max_ex) = true;
        }
      } else {
        return Error(pointer + "/" + k, std::string(k) + " must be a number or a boolean");
      }
    }
    if (min_v && !clamp(*min_v)) {
      const double f = std::floor(*min_v);
      *lo = static_cast<int64_t>(min_ex || f != *min_v ? f + 1 : f);
    }
    if (max_v && !clamp(*max_v)) {
      const double c = std::ceil(*max_v);
      *hi = static_cast<int64_t>(max_ex || c != *max_v ? c - 1 : c);
    }
    if (*lo && *hi && **lo > **hi) return Error(pointer, "the bounds leave no value");
    return Status::Ok();
  }

  StatusOr<std::string> Typed(const Json& schema, const std::string& type,
                              const std::string& pointer) {
    if (type == "null") return std::string("\"null\"");
    if (type == "boolean") return std::string("( \"true\" | \"false\" )");
    if (type == "integer" || type == "number") {
      std::optional<int64_t> lo, hi;
      if (Status st = IntegerBounds(schema, pointer, &lo, &hi); !st.ok()) return st;
      if (type == "integer") {
        if (!lo && !hi) return std::string("( \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) )");
        return IntegerRange(lo, hi);
      }
      if (!lo && !hi) {
        need_any_ = true;
        return prefix_ + "any-number";
      }
      // Bounded numbers: integers in range, and fractions where any fraction stays inside.
      const std::string frac = " \".\" [0-9]{1,16}";
      std::string out = "( " + IntegerRange(lo, hi);
      if (!hi || *hi >= 1) {  // non-negative integer parts i with i + 1 <= hi
        const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
        const uint64_t b = hi ? static_cast<uint64_t>(*hi - 1) : kNoMax;
        if (a <= b) out += " | " + NonNegativeRange(a, b) + frac;
      }
      if (!lo || *lo <= -2) {  // negative integer parts i with i - 1 >= lo
        const uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
        const uint64_t b = lo ? static_cast<uint64_t>(-(*lo + 1)) : kNoMax;
        if (a <= b) out += " | \"-\" " + NonNegativeRange(a, b) + frac;
      }
      if ((!lo || *lo <= -1) && (!hi || *hi >= 0)) out += " | \"-0\"" + frac;
      return out + " )";
    }
    if (type == "string") return String(schema, pointer);
    if (type == "array") return Array(schema, pointer);
    if (type == "object") return Object(schema, pointer);
    return Error(pointer + "/type", "unknown type '" + type + "'");
  }

  StatusOr<std::string> String(const Json& schema, const std::string& pointer) {
    StatusOr<std::optional<int64_t>> mn = Count(schema, "minLength", pointer);
    StatusOr<std::optional<int64_t>> mx = Count(schema, "maxLength", pointer);
    if (!mn.ok()) return mn.status();
    if (!mx.ok()) return mx.status();
    const bool lengths = mn->has_value() || mx->has_value();
    if (schema.contains("pattern")) {
      if (lengths || schema.contains("format")) {
        return Error(pointer,
                     "pattern together with minLength, maxLength or format is not supported");
      }
      const Json& p = schema["pattern"];
      if (!p.is_string()) return Error(pointer + "/pattern", "pattern must be a string");
      const std::string name = prefix_ + "pattern-" + std::to_string(counter_++);
      StatusOr<std::string> rule =
          RegexToGbnf(p.get<std::string>(), name, RegexTarget::kJsonString);
      if (!rule.ok()) return Error(pointer + "/pattern", rule.status().message());
      patterns_ += *rule;
      rules_.emplace_back(name + "-str", "\"\\\"\" " + name + " \"\\\"\"");
      return name + "-str";
    }
    if (schema.contains("format")) {
      if (lengths)
        return Error(pointer, "format together with minLength/maxLength is not supported");
      const Json& f = schema["format"];
      if (!f.is_string()) return Error(pointer + "/format", "format must be a string");
      StatusOr<std::string> body = Format(f.get<std::string>(), pointer);
      if (!body.ok()) return body;
      return "\"\\\"\" " + *body + " \"\\\"\"";
    }
    const int64_t lo = mn->value_or(0);
    if (mx->has_value() && **mx < lo) return Error(pointer, "maxLength is below minLength");
    if (!lengths) return std::string("( \"\\\"\" " + Char() + "* \"\\\"\" )");
    const std::string rep = "{" + std::to_string(lo) + "," +
                            (mx->has_value() ? std::to_string(**mx) : std::string()) + "}";
    return "( \"\\\"\" ( " + Char() + " )" + rep + " \"\\\"\" )";
  }

  StatusOr<std::string> Format(const std::string& format, const std::string& pointer) {
    const std::string date =
        "[1-9] [0-9]{3} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
        "\"3\" "
        "[01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | \"02-\" ( "
        "\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )";
    const std::string time =
        "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]+ )? ( "
        "\"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
    if (format == "date") return "( " + date + " )";
    if (format == "time") return "( " + time + " )";
    if (format == "date-time") return "( " + date + " \"T\" " + time + " )";
    if (format == "uuid") {
      return std::string(
          "( [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12} "
          ")");
    }
    if (format == "email") {
      return std::string(
          "( [a-zA-Z0-9_+-]+ ( \".\" [a-zA-Z0-9_+-]+ )* \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]* ( \".\" "
          "[a-zA-Z0-9] [a-zA-Z0-9-]* )+ )");
    }
    return Error(pointer + "/format", "format '" + format + "' is not supported");
  }

  StatusOr<std::string> Array(const Json& schema, const std::string& pointer) {
    StatusOr<std::optional<int64_t>> mn = Count(schema, "minItems", pointer);
    StatusOr<std::optional<int64_t>> mx = Count(schema, "maxItems", pointer);
    if (!mn.ok()) return mn.status();
    if (!mx.ok()) return mx.status();
    std::string item = Any();
    if (schema.contains("items")) {
      if (schema["items"].is_array()) {
        return Error(pointer + "/items", "items as an array (tuple validation) is not supported");
      }
      StatusOr<std::string> it = Visit(schema["items"], pointer + "/items");
      if (!it.ok()) return it;
      item = *it;
    }
    const int64_t lo = mn->value_or(0);
    if (mx->has_value() && **mx < lo) return Error(pointer, "maxItems is below minItems");
    const std::string open = "\"[\" " + ws_ + " ", close = " \"]\"";
    if (mx->has_value() && **mx == 0) return NewRule("array", open + close);
    const std::string one = item + " " + ws_;
    const std::string more = "( \",\" " + ws_ + " " + one + " )";
    const int64_t more_lo = lo > 0 ? lo - 1 : 0;
    const std::string rep = "{" + std::to_string(more_lo) + "," +
                            (mx->has_value() ? std::to_string(**mx - 1) : std::string()) + "}";
    const std::string body = one + " " + more + rep;
    return NewRule("array", open + (lo > 0 ? body : "( " + body + " )?") + close);
  }

  StatusOr<std::string> Object(const Json& schema, const std::string& pointer) {
    std::vector<std::pair<std::string, std::string>> props;  // (key, value grammar)
    std::vector<bool> required;
    std::set<std::string> req;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return Error(pointer + "/required", "required must be an array");
      for (const Json& name : r) {
        if (!name.is_string())
          return Error(pointer + "/required", "required names must be strings");
        req.insert(name.get<std::string>());
      }
    }
    const bool has_props = schema.contains("properties");
    if (has_props) {
      const Json& p = schema["properties"];
      if (!p.is_object()) return Error(pointer + "/properties", "properties must be an object");
      for (const auto& [key, sub] : p.items()) {
        StatusOr<std::string> v = Visit(sub, pointer + "/properties/" + EscapePointerToken(key));
        if (!v.ok()) return v;
        props.emplace_back(key, *v);
        required.push_back(req.count(key) > 0);
      }
    }
    // additionalProperties: absent -> none (any object when there are no properties either).
    std::optional<std::string> additional;
    if (schema.contains("additionalProperties")) {
      const Json& a = schema["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        StatusOr<std::string> v = Visit(a, pointer + "/additionalProperties");
        if (!v.ok()) return v;
        additional = *v;
      }
    } else if (!has_props) {
      additional = Any();
    }
    for (const std::string& name : req) {
      bool found = false;
      for (const auto& p : props) found = found || p.first == name;
      if (found) continue;
      if (!additional) {
        return Error(pointer + "/required", "required property '" + name +
                                                "' is not in properties and additional "
                                                "properties are not allowed");
      }
      props.emplace_back(name, *additional);
      required.push_back(true);
    }
    auto kv = [&](const std::string& key, const std::string& value) {
      return GbnfLiteral(Json(key).dump()) + " " + ws_ + " \":\" " + ws_ + " " + value + " " + ws_;
    };
    // S_k: the properties from k on, none written yet; T_k: some written (each needs a comma).
    const size_t n = props.size();
    std::string s_next, t_next;
    {
      std::string tail;
      if (additional) {
        const std::string akv =
            prefix_ + "any-string " + ws_ + " \":\" " + ws_ + " " + *additional + " " + ws_;
        need_any_ = true;
        const std::string more = "( \",\" " + ws_ + " " + akv + " )*";
        t_next = NewRule("obj-tail", more);
        s_next = NewRule("obj-tail", "( " + akv + " " + more + " )?");
      } else {
        t_next = s_next = "";
      }
    }
    for (size_t k = n; k-- > 0;) {
      const std::string item = kv(props[k].first, props[k].second);
      const std::string s_body = item + (t_next.empty() ? "" : " " + t_next);
      const std::string t_body = "\",\" " + ws_ + " " + s_body;
      std::string s_rule, t_rule;
      if (required[k]) {
        s_rule = NewRule("obj-s", s_body);
        t_rule = NewRule("obj-t", t_body);
      } else {
        s_rule = NewRule("obj-s", s_body + (s_next.empty() ? " | " : " | " + s_next));
        t_rule = NewRule("obj-t", t_body + (t_next.empty() ? " | " : " | " + t_next));
      }
      s_next = s_rule;
      t_next = t_rule;
    }
    return NewRule("object", "\"{\" " + ws_ + " " + s_next + " \"}\"");
  }

 private:
  const Json& root_;
  std::string prefix_;
  std::string ws_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;
  int counter_ = 0;
  bool need_any_ = false;
  std::string patterns_;  // the rules of `pattern` regexes
  int visit_depth_ = 0;   // Visit calls open
};

}  // namespace

StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, std::string_view rule_prefix,
                                       const std::optional<std::string>& whitespace_pattern) {
  for (char c : rule_prefix) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      return InvalidArgument("json schema: rule prefix '" + std::string(rule_prefix) +
                             "' may hold only letters, digits, '-' and '_'");
    }
  }
  Json schema;
  try {
    schema = Json::parse(schema_json);
  } catch (const Json::parse_error& e) {
    return InvalidArgument("json schema: invalid JSON at offset " + std::to_string(e.byte) + ": " +
                           e.what());
  }
  Converter converter(schema, std::string(rule_prefix), std::string(rule_prefix) + "ws");
  return converter.Run(whitespace_pattern);
}

}  // namespace tinyserve::structured
