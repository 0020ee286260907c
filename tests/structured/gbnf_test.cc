// The GBNF parser: the grammars it accepts (checked through a Matcher on byte strings) and the
// exact errors of the ones it refuses.
#include <gtest/gtest.h>

#include "structured/grammar.h"
#include "structured/grammar_ir.h"
#include "tests/structured/test_vocab.h"

namespace tinyserve::structured {
namespace {

std::string ErrorOf(std::string_view gbnf) {
  StatusOr<Grammar> g = ParseGbnf(gbnf);
  if (g.ok()) return "ok";
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  return g.status().message();
}

TEST(GbnfTest, ErrorsNameTheLineAndTheProblem) {
  EXPECT_EQ(ErrorOf("root ::= foo\n"), "grammar line 1: undefined rule 'foo'");
  EXPECT_EQ(ErrorOf("# comment\nroot ::= \"a\"\n\nx ::= y\n"),
            "grammar line 4: undefined rule 'y'");
  EXPECT_EQ(ErrorOf("start ::= \"a\"\n"), "grammar: missing rule 'root' (the start rule)");
  EXPECT_EQ(ErrorOf(""), "grammar: missing rule 'root' (the start rule)");
  EXPECT_EQ(ErrorOf("root ::= ( \"a\"\n"), "grammar line 1: unbalanced '(' (no matching ')')");
  EXPECT_EQ(ErrorOf("root ::= \"a\" )\n"), "grammar line 1: unbalanced ')'");
  EXPECT_EQ(ErrorOf("root ::= \"abc\n"), "grammar line 1: unterminated string literal");
  EXPECT_EQ(ErrorOf("root ::= [abc\n"), "grammar line 1: unterminated char class '['");
  EXPECT_EQ(ErrorOf("root ::= \"a\"\nroot ::= \"b\"\n"),
            "grammar line 2: rule 'root' is defined twice (first on line 1)");
  EXPECT_EQ(ErrorOf("root ::= \"\\q\"\n"), "grammar line 1: unknown escape '\\q'");
  EXPECT_EQ(ErrorOf("root ::= \"a\"{3,2}\n"), "grammar line 1: repetition {m,n} with n < m");
  EXPECT_EQ(ErrorOf("root ::= x \"a\"\nx ::= root \"b\" | \"c\"\n"),
            "grammar line 1: rule 'root' is left-recursive (it can reach itself before consuming "
            "input; a repetition of something that can be empty does this too)");
  EXPECT_EQ(ErrorOf("root = \"a\"\n"), "grammar line 1: expected '::=' after rule name 'root'");
  EXPECT_EQ(ErrorOf("root ::= \"a\" @\n"), "grammar line 1: unexpected '@'");
  EXPECT_EQ(ErrorOf("root ::= [z-a]\n"),
            "grammar line 1: char class range with its end before its start");
}

struct Case {
  std::string gbnf;
  std::vector<std::string> accepted;  // complete strings of the language
  std::vector<std::string> rejected;  // strings that are not (not even as a prefix of one)
};

// ( ) groups nest at most 256 deep (the parser recurses once per level).
TEST(GbnfTest, GroupsNestAtMost256Deep) {
  auto groups = [](int n) {
    return "root ::= " + std::string(n, '(') + "\"a\"" + std::string(n, ')') + "\n";
  };
  EXPECT_EQ(ErrorOf(groups(256)), "ok");
  EXPECT_EQ(ErrorOf(groups(257)), "grammar line 1: groups nest deeper than the limit of 256");
  EXPECT_EQ(ErrorOf(groups(100000)), "grammar line 1: groups nest deeper than the limit of 256");
}

// Grammars as deep as they are long: a chain of 100,000 rules each first referring to the next
// (a left-recursion check and an expansion that recursed once per rule), a run of 100,000 empty
// rules (an expansion that recursed once per rule), 60 rules in a row with two empty alternatives
// each (2^60 expansion paths), and a left recursion at the end of a chain of 100,000 rules.
TEST(GbnfTest, LongChainsAndAmbiguousEmptyRulesMatchWithoutRecursion) {
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 100000; ++i) {
    chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  }
  std::string empties = "root ::= ";
  for (int i = 0; i < 100000; ++i) empties += "e ";
  std::string ambiguous = "root ::= ";
  for (int i = 0; i < 60; ++i) ambiguous += "e ";
  const std::vector<Case> cases = {
      {chain + "r100000 ::= \"a\"\n", {"a"}, {"b", "aa"}},
      {empties + "\"a\"\ne ::= \"\" | \"\"\n", {"a"}, {"b", "aa"}},
      {ambiguous + "\"a\"\ne ::= f | g\nf ::= \"\" | \"b\"\ng ::= \"\" | \"b\"\n",
       {"a", "ba", std::string(60, 'b') + "a"},
       {std::string(61, 'b') + "a", "c"}},
  };
  for (const Case& c : cases) {
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kGrammar;
    spec.text = c.gbnf;
    auto g = Compile(spec, ByteVocab());
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    for (const std::string& s : c.accepted) EXPECT_EQ(Accepts(*g, s), Verdict::kComplete) << s;
    for (const std::string& s : c.rejected) EXPECT_EQ(Accepts(*g, s), Verdict::kRejected) << s;
  }
  EXPECT_NE(ErrorOf(chain + "r100000 ::= r5 \"a\"\n").find("is left-recursive"), std::string::npos);
}

TEST(GbnfTest, TheLanguageOfEachConstructIsExact) {
  const std::vector<Case> cases = {
      {"root ::= \"ab\" | \"cd\"", {"ab", "cd"}, {"ac", "abc", "x"}},
      {"root ::= [a-c]+ \"!\"", {"a!", "abcabc!"}, {"!", "ad!", "a!!"}},
      {"root ::= [^a-c]", {"d", "\xC3\xA9", "\xF0\x9F\x98\x80"}, {"a", "b", "\xC3\x28"}},
      {"root ::= .", {"x", "\n", "\xE2\x82\xAC"}, {"xy", "\xED\xA0\x80"}},  // no surrogates
      {"root ::= \"x\"{2,3}", {"xx", "xxx"}, {"xxxx"}},
      {"root ::= \"x\"{2}", {"xx"}, {"xxx"}},
      {"root ::= \"x\"{2,} \"y\"", {"xxy", "xxxxxy"}, {"xy"}},
      {"root ::= \"a\"? \"b\"*", {"", "a", "abbb", "bb"}, {"aa", "ba"}},
      {"root ::= ( \"a\" | \"b\" ) ( \"c\" d )\nd ::= [0-9]", {"ac1", "bc9"}, {"ad", "c1"}},
      {"root ::= \"\\u00e9\\x41\\n\\t\\\\\\\"\"",
       {"\xC3\xA9"
        "A\n\t\\\""},
       {"A"}},
      {"root ::= [\\u0100-\\u0101\\x30]", {"\xC4\x80", "\xC4\x81", "0"}, {"\xC4\x82", "1"}},
      {"root ::= a\n  | b # comment\na ::= \"a\"\nb ::=\n  \"b\"\n", {"a", "b"}, {"ab"}},
  };
  auto vocab = ByteVocab();
  for (const Case& c : cases) {
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kGrammar;
    spec.text = c.gbnf;
    auto g = Compile(spec, vocab);
    ASSERT_TRUE(g.ok()) << c.gbnf << ": " << g.status().ToString();
    for (const std::string& s : c.accepted) {
      EXPECT_EQ(Accepts(*g, s), Verdict::kComplete) << c.gbnf << " on '" << s << "'";
    }
    for (const std::string& s : c.rejected) {
      EXPECT_EQ(Accepts(*g, s), Verdict::kRejected) << c.gbnf << " on '" << s << "'";
    }
  }
}

TEST(GbnfTest, Utf8RangesSplitIntoByteSequences) {
  std::vector<std::vector<ByteSet>> seqs;
  Utf8RangeSequences(0x80, 0x10FFFF, &seqs);
  // C2-DF 80-BF | E0 A0-BF 80-BF | E1-EC .. | ED 80-9F .. | EE-EF .. | F0 90-BF .. | F1-F3 .. |
  // F4 80-8F ..
  ASSERT_EQ(seqs.size(), 8u);
  EXPECT_EQ(seqs[0].size(), 2u);
  EXPECT_TRUE(seqs[0][0].Has(0xC2) && seqs[0][0].Has(0xDF) && !seqs[0][0].Has(0xC1));
  EXPECT_TRUE(seqs[3][0].Has(0xED) && seqs[3][1].Has(0x9F) && !seqs[3][1].Has(0xA0));
  EXPECT_TRUE(seqs[7][0].Has(0xF4) && seqs[7][1].Has(0x8F) && !seqs[7][1].Has(0x90));
}

}  // namespace
}  // namespace tinyserve::structured

namespace tinyserve::structured {
namespace {

// Tool calling composes schema grammars under prefixes: two schemas in one grammar, each with
// its own rules (and whitespace), inside literal tags.
TEST(GbnfTest, JsonSchemaRulesComposeUnderPrefixes) {
  auto a = JsonSchemaToGbnf(R"({"type":"object","properties":{"x":{"type":"integer"}},
    "required":["x"]})",
                            "t1-");
  auto b = JsonSchemaToGbnf(R"({"enum":["on","off"]})", "t2_");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->find("t1-root ::="), std::string::npos) << *a;
  EXPECT_EQ(a->find("\nroot ::="), std::string::npos);
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kGrammar;
  spec.text = "root ::= " + GbnfLiteral("<tool>\n") + " ( t1-root | t2_root ) " +
              GbnfLiteral("</tool>") + "\n" + *a + *b;
  auto g = Compile(spec, ByteVocab());
  ASSERT_TRUE(g.ok()) << g.status().ToString() << "\n" << spec.text;
  EXPECT_EQ(Accepts(*g, "<tool>\n{\"x\": -3}</tool>"), Verdict::kComplete);
  EXPECT_EQ(Accepts(*g, "<tool>\n\"off\"</tool>"), Verdict::kComplete);
  EXPECT_EQ(Accepts(*g, "<tool>\n{\"x\": \"a\"}</tool>"), Verdict::kRejected);
  EXPECT_FALSE(JsonSchemaToGbnf("{}", "bad prefix").ok());
}

TEST(GbnfTest, GbnfLiteralMatchesExactlyItsBytes) {
  EXPECT_EQ(GbnfLiteral("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\x01\"");
  const std::string bytes = "say \"hi\"\t\\ \xC3\xA9\x7F";
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kGrammar;
  spec.text = "root ::= " + GbnfLiteral(bytes);
  auto g = Compile(spec, ByteVocab());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(Accepts(*g, bytes), Verdict::kComplete);
  EXPECT_EQ(Accepts(*g, bytes.substr(0, 5)), Verdict::kPrefix);
}

}  // namespace
}  // namespace tinyserve::structured
