// Bad and unsupported constraints: each is InvalidArgument whose message names the problem and
// where it is (a JSON pointer, a regex offset, a JSON offset).
#include <gtest/gtest.h>

#include "structured/grammar.h"
#include "tests/structured/test_vocab.h"

namespace tinyserve::structured {
namespace {

std::string ErrorOf(ConstraintKind kind, const std::string& text,
                    std::optional<std::string> ws = std::nullopt) {
  ConstraintSpec spec;
  spec.kind = kind;
  spec.text = text;
  spec.whitespace_pattern = std::move(ws);
  auto g = Compile(spec, ByteVocab());
  if (g.ok()) return "ok";
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().ToString();
  return g.status().message();
}

std::string SchemaError(const std::string& schema) {
  return ErrorOf(ConstraintKind::kJsonSchema, schema);
}

TEST(BadInputTest, UnsupportedSchemaKeywordsAreNamedWithTheirPointer) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","patternProperties":{"^a":{}}})", "at /: keyword 'patternProperties'"},
      {R"({"properties":{"a":{"not":{"type":"string"}}}})", "at /properties/a: keyword 'not'"},
      {R"({"if":{"type":"string"},"then":{"minLength":1}})", "keyword 'if'"},
      {R"({"type":"number","multipleOf":3})", "keyword 'multipleOf'"},
      {R"({"type":"array","items":{"type":"array","uniqueItems":true}})",
       "at /items: keyword 'uniqueItems'"},
      {R"({"dependentRequired":{"a":["b"]}})", "keyword 'dependentRequired'"},
      {R"({"$defs":{"x":{"minProperties":1}},"$ref":"#/$defs/x"})",
       "at /$defs/x: keyword 'minProperties'"},
      {R"({"prefixItems":[{"type":"integer"}]})", "keyword 'prefixItems'"},
      {R"({"type":"string","format":"hostname"})",
       "at /format: format 'hostname' is not supported"},
      {R"({"$ref":"https://example.com/s.json"})", "$ref 'https://example.com/s.json'"},
      {R"({"$ref":"#/$defs/missing"})", "at /$ref: $ref '#/$defs/missing' does not resolve"},
      {R"({"allOf":[{"type":"string"},{"minLength":2}]})", "allOf is supported with exactly one"},
      {R"({"type":"strnig"})", "at /type: unknown type 'strnig'"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "the bounds leave no value"},
      {R"({"type":"array","items":[{"type":"integer"}]})", "at /items: items as an array"},
      {R"j({"type":"object","properties":{"a":{"type":"string","pattern":"(?=a)"}}})j",
       "at /properties/a/pattern: regex offset 0: lookaround is not supported"},
      {R"({"type":"object","required":["x"],"additionalProperties":false})",
       "required property 'x' is not in properties"},
      {R"(false)", "schema false matches nothing"},
  };
  for (const auto& [schema, want] : cases) {
    const std::string got = SchemaError(schema);
    EXPECT_NE(got.find(want), std::string::npos) << schema << " -> " << got;
    EXPECT_EQ(got.rfind("json schema", 0), 0u) << got;
  }
}

TEST(BadInputTest, InvalidSchemaJsonNamesTheOffset) {
  const std::string got = SchemaError(R"({"type": "object",})");
  EXPECT_EQ(got.rfind("json schema: invalid JSON at offset 19", 0), 0u) << got;
}

TEST(BadInputTest, AnnotationsAreIgnored) {
  EXPECT_EQ(SchemaError(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x",
    "title":"t","description":"d","examples":[1],"default":1,"$comment":"c","type":"integer"})"),
            "ok");
}

TEST(BadInputTest, InvalidRegexesNameTheOffset) {
  const std::pair<const char*, const char*> cases[] = {
      {"(a)\\1", "regex: regex offset 3: backreference is not supported"},
      {"a(?=b)", "regex: regex offset 1: lookaround is not supported"},
      {"a(?<!b)", "regex: regex offset 1: lookaround is not supported"},
      {"ab(c", "regex: regex offset 2: unbalanced '(' (no matching ')')"},
      {"ab)", "regex: regex offset 2: unbalanced ')'"},
      {"[abc", "regex: regex offset 0: unterminated character class '['"},
      {"*a", "regex: regex offset 0: quantifier '*' with nothing to repeat"},
      {"a^b", "regex: regex offset 1: anchor '^' is only supported at the start"},
      {"a$b", "regex: regex offset 1: anchor '$' is only supported at the end"},
      {"\\bword", "regex: regex offset 0: word boundary \\b is not supported"},
      {"a{3,2}", "regex: regex offset 1: repetition {m,n} with n < m"},
      {"a++", "regex: regex offset 2: possessive quantifier is not supported"},
      {"[z-a]", "regex: regex offset 2: class range out of order"},
      {"\\q", "regex: regex offset 0: unknown escape \\q"},
  };
  for (const auto& [pattern, want] : cases) {
    EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, pattern), want) << pattern;
  }
}

// Nesting that would recurse once per level past a thread's stack is refused at a limit, named;
// the limit itself compiles. Python refuses stacked quantifiers too ("multiple repeat").
TEST(BadInputTest, NestingPastTheLimitsIsRefusedAndTheLimitsCompile) {
  auto groups = [](int n) { return std::string(n, '(') + "a" + std::string(n, ')'); };
  EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, groups(64)), "ok");
  // The deepest GBNF a regex makes: a group, its alternatives and a quantifier a level, an
  // escaped char set at the bottom.
  std::string deepest = "[\"\\n]";
  for (int i = 0; i < 64; ++i) deepest = "(a|" + deepest + ")+";
  EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, deepest), "ok");
  EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, groups(65)),
            "regex: regex offset 64: groups nest deeper than the limit of 64");
  EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, groups(100000)),
            "regex: regex offset 64: groups nest deeper than the limit of 64");
  EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, "a**"),
            "regex: regex offset 2: a quantifier may not follow a quantifier ('*' after offset 1)");
  EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, "a{2}{3}"),
            "regex: regex offset 4: a quantifier may not follow a quantifier ('{' after offset 1)");
  EXPECT_EQ(ErrorOf(ConstraintKind::kRegex, "a*?b+?c??"), "ok");  // lazy forms stay one quantifier
  // $refs that refer on down a chain, and subschemas, nest at most 256 deep.
  auto chain = [](int n) {
    std::string s = R"({"$ref":"#/$defs/d0","$defs":{)";
    for (int i = 0; i < n; ++i) {
      s += "\"d" + std::to_string(i) + "\":{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"},";
    }
    return s + "\"d" + std::to_string(n) + "\":{\"type\":\"integer\"}}}";
  };
  EXPECT_EQ(SchemaError(chain(254)), "ok");
  EXPECT_EQ(SchemaError(chain(255)),
            "json schema at /$defs/d255: subschemas and $refs nest deeper than the limit of 256");
  EXPECT_EQ(SchemaError(chain(20000)),
            "json schema at /$defs/d255: subschemas and $refs nest deeper than the limit of 256");
  // An array index too long for any array does not resolve (it threw before).
  EXPECT_EQ(SchemaError(R"({"$ref":"#/$defs/a/99999999999999999999","$defs":{"a":[true]}})"),
            "json schema at /$ref: $ref '#/$defs/a/99999999999999999999' does not resolve");
}

TEST(BadInputTest, WhitespacePatternIsARegex) {
  EXPECT_EQ(ErrorOf(ConstraintKind::kJsonObject, "", "[ "),
            "whitespace_pattern: regex offset 0: unterminated character class '['");
  ConstraintSpec spec;
  spec.whitespace_pattern = "[ ]?";  // at most one space between tokens
  auto g = Compile(spec, ByteVocab());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(Accepts(*g, "{ \"a\": 1 }"), Verdict::kComplete);
  EXPECT_EQ(Accepts(*g, "{\n\"a\": 1}"), Verdict::kRejected);
  EXPECT_EQ(Accepts(*g, "{  \"a\": 1}"), Verdict::kRejected);
}

}  // namespace
}  // namespace tinyserve::structured
