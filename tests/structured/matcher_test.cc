// The Matcher on a small hand-made vocabulary: the exact allowed id sets, stop tokens, partial
// UTF-8, AcceptToken's refusals, Reset, and the GrammarCache.
#include <gtest/gtest.h>

#include "structured/grammar.h"
#include "tests/structured/test_vocab.h"

namespace tinyserve::structured {
namespace {

// 0 is the stop token; 13 is a special token without bytes.
std::shared_ptr<const Vocabulary> HandVocab() {
  std::vector<std::string> t = {"",   "{", "}", "\"",    "a", "\":",  " ",    "{\"", "1",
                                "12", "-", ",", "\"a\"", "",  "\xC3", "\xA9", "true"};
  return std::make_shared<const Vocabulary>(std::move(t), std::vector<int32_t>{0});
}

std::shared_ptr<const CompiledGrammar> MustCompile(const ConstraintSpec& spec,
                                                   std::shared_ptr<const Vocabulary> v) {
  auto g = Compile(spec, std::move(v));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : nullptr;
}

TEST(MatcherTest, JsonObjectMasksAreExact) {
  ConstraintSpec spec;  // kJsonObject
  Matcher m(MustCompile(spec, HandVocab()));
  EXPECT_EQ(m.vocab_size(), 17);
  EXPECT_EQ(m.bitmask_words(), 1);
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{1, 7}));  // the output starts with '{'
  ASSERT_TRUE(m.AcceptToken(1));
  // A key, the end, one space; `":` opens a key whose first char is ':'; `"a"` is a whole key.
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{2, 3, 5, 6, 12}));
  ASSERT_TRUE(m.AcceptToken(3));
  // Inside a string: every char, the closing quote (and `":` after it), a lead byte of é; not a
  // lone continuation byte, not `"a"` (a key cannot be followed by 'a'), never the stop token.
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 14, 16}));
  ASSERT_TRUE(m.AcceptToken(14));
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{15}));  // only the continuation byte of é
  EXPECT_FALSE(m.AcceptToken(4));                        // refused, state unchanged
  ASSERT_TRUE(m.AcceptToken(15));
  ASSERT_TRUE(m.AcceptToken(5));  // {"é":
  // A value: `":` opens a string whose first char is ':'.
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{1, 3, 5, 6, 7, 8, 9, 10, 12, 16}));
  ASSERT_TRUE(m.AcceptToken(10));
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{8, 9}));  // '-' needs a digit
  ASSERT_TRUE(m.AcceptToken(9));
  EXPECT_FALSE(m.CanTerminate());
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{2, 6, 8, 9, 11}));
  ASSERT_TRUE(m.AcceptToken(2));  // {"é":-12}
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_TRUE(m.IsClosed());
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{0}));  // only the stop token
  EXPECT_FALSE(m.AcceptToken(13));                      // a special token is never allowed
  ASSERT_TRUE(m.AcceptToken(0));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.AcceptToken(0));
  m.Reset();
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{1, 7}));
}

TEST(MatcherTest, LeadingZerosAndStopBeforeTheEndAreRefused) {
  ConstraintSpec spec;
  Matcher m(MustCompile(spec, HandVocab()));
  for (int32_t t : {7, 4, 5}) ASSERT_TRUE(m.AcceptToken(t));  // {"a":
  EXPECT_FALSE(m.AcceptToken(0));                             // not complete: no stop
  ASSERT_TRUE(m.AcceptToken(8));                              // 1
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{2, 6, 8, 9, 11}));
  EXPECT_FALSE(m.AcceptToken(7));
}

TEST(MatcherTest, ChoiceAllowsExactlyThePrefixesOfTheChoices) {
  std::vector<std::string> t = {"", "y", "es", "yes", "no", "n", "o", "yesno", "x"};
  auto vocab = std::make_shared<const Vocabulary>(std::move(t), std::vector<int32_t>{0});
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kChoice;
  spec.choices = {"yes", "no", "yesno"};
  Matcher m(MustCompile(spec, vocab));
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{1, 3, 4, 5, 7}));
  ASSERT_TRUE(m.AcceptToken(3));
  EXPECT_TRUE(m.CanTerminate());
  EXPECT_FALSE(m.IsClosed());  // "yesno" can still follow
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{0, 4, 5}));
  ASSERT_TRUE(m.AcceptToken(5));
  EXPECT_EQ(AllowedIds(m), (std::vector<int32_t>{6}));
  ASSERT_TRUE(m.AcceptToken(6));
  EXPECT_TRUE(m.IsClosed());
}

TEST(MatcherTest, BadConstraintsAreInvalidArgumentNamingTheProblem) {
  auto vocab = HandVocab();
  auto error = [&](ConstraintKind kind, std::string text, std::vector<std::string> choices = {}) {
    ConstraintSpec spec;
    spec.kind = kind;
    spec.text = std::move(text);
    spec.choices = std::move(choices);
    auto g = Compile(spec, vocab);
    EXPECT_FALSE(g.ok());
    if (g.ok()) return std::string("ok");
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    return g.status().message();
  };
  EXPECT_EQ(error(ConstraintKind::kChoice, ""), "choice: needs at least one choice");
  EXPECT_EQ(error(ConstraintKind::kGrammar, ""), "grammar: empty grammar");
  EXPECT_EQ(error(ConstraintKind::kGrammar, "root ::= x"), "grammar line 1: undefined rule 'x'");
  EXPECT_EQ(error(ConstraintKind::kChoice, "", {"ok", "\xC3"}), "choice 1: not valid UTF-8");
}

TEST(GrammarCacheTest, EqualSpecsShareOneGrammar) {
  GrammarCache cache(2);
  auto vocab = HandVocab();
  ConstraintSpec a;
  a.kind = ConstraintKind::kChoice;
  a.choices = {"a", "b"};
  ConstraintSpec b = a;
  b.choices = {"a", "b", ""};
  ConstraintSpec c = a;
  c.choices = {"ab"};  // not confused with {"a", "b"}
  auto ga = cache.Get(a, vocab);
  auto ga2 = cache.Get(a, vocab);
  ASSERT_TRUE(ga.ok() && ga2.ok());
  EXPECT_EQ(ga->get(), ga2->get());
  auto gb = cache.Get(b, vocab);
  ASSERT_TRUE(gb.ok());
  EXPECT_NE(ga->get(), gb->get());
  EXPECT_NE(a.CacheKey(), c.CacheKey());
  EXPECT_EQ(cache.size(), 2u);
  // Another vocabulary with other bytes is another grammar.
  auto other = std::make_shared<const Vocabulary>(std::vector<std::string>{"", "a"},
                                                  std::vector<int32_t>{0});
  auto go = cache.Get(a, other);
  ASSERT_TRUE(go.ok());
  EXPECT_NE(go->get(), ga->get());
  EXPECT_EQ(cache.size(), 2u);  // capacity 2: `a` on HandVocab, the least recent, was dropped
  auto ga3 = cache.Get(a, vocab);
  ASSERT_TRUE(ga3.ok());
  EXPECT_NE(ga3->get(), ga->get());  // compiled again
  // Errors are not cached.
  ConstraintSpec bad;
  bad.kind = ConstraintKind::kGrammar;
  bad.text = "root ::= (";
  EXPECT_FALSE(cache.Get(bad, vocab).ok());
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace tinyserve::structured
