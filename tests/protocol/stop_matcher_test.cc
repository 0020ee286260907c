#include "server/protocol/stop_matcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tinyserve::protocol {
namespace {

// Feeds `deltas` and returns what was emitted, delta by delta, then the flush (if not stopped).
std::vector<std::string> FeedAll(StopMatcher& m, const std::vector<std::string>& deltas) {
  std::vector<std::string> out;
  for (const auto& d : deltas) out.push_back(m.Feed(d));
  if (!m.stopped()) out.push_back(m.Flush());
  return out;
}

TEST(StopMatcherTest, NoStopStringsPassThrough) {
  StopMatcher m({});
  EXPECT_EQ(FeedAll(m, {"a", "b"}), (std::vector<std::string>{"a", "b", ""}));
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, StopInsideOneDelta) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.Feed("hello STOP world"), "hello ");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.Feed("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, StopSplitOverTokensIsHeldBackThenDropped) {
  StopMatcher m({"</end>"});
  EXPECT_EQ(m.Feed("abc</"), "abc");
  EXPECT_EQ(m.held_back(), "</");
  EXPECT_EQ(m.Feed("en"), "");
  EXPECT_EQ(m.held_back(), "</en");
  EXPECT_EQ(m.Feed("d> tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "</end>");
}

TEST(StopMatcherTest, HeldBackTextIsReleasedWhenItStopsMatching) {
  StopMatcher m({"</end>"});
  EXPECT_EQ(FeedAll(m, {"a</", "en", "x", "!"}),
            (std::vector<std::string>{"a", "", "</enx", "!", ""}));
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcherTest, FlushReleasesAPartialMatchAtTheEnd) {
  StopMatcher m({"###"});
  EXPECT_EQ(m.Feed("x##"), "x");
  EXPECT_EQ(m.Flush(), "##");
}

TEST(StopMatcherTest, HeldBackSuffixRestartsInsideTheBuffer) {
  // "aab" with stop "aab": after "aa" both a's are held; "a" then makes "aaa" -> release one "a".
  StopMatcher m({"aab"});
  EXPECT_EQ(m.Feed("aa"), "");
  EXPECT_EQ(m.Feed("a"), "a");
  EXPECT_EQ(m.held_back(), "aa");
  EXPECT_EQ(m.Feed("b!"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, StopAtTheVeryStart) {
  StopMatcher m({"\n"});
  EXPECT_EQ(m.Feed("\nHello"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w", "o"});
  EXPECT_EQ(m.Feed("hello world"), "hel");  // "lo w" starts at 3, before "o" (4) and "world" (6)
  EXPECT_EQ(m.matched(), "lo w");
}

TEST(StopMatcherTest, AtTheSameStartTheLongerWins) {
  StopMatcher m({"ab", "abc"});
  EXPECT_EQ(m.Feed("xab"), "x");  // "ab" already matches: stop
  EXPECT_EQ(m.matched(), "ab");
  StopMatcher m2({"ab", "abc"});
  EXPECT_EQ(m2.Feed("xabc"), "x");
  EXPECT_EQ(m2.matched(), "abc");
}

TEST(StopMatcherTest, MultipleStopsHoldBackTheLongestPartial) {
  StopMatcher m({"xyz", "yq"});
  EXPECT_EQ(m.Feed("axy"), "a");  // "xy" could start "xyz"
  EXPECT_EQ(m.Feed("q"), "x");    // "xyq": "yq" matched; "x" before it is emitted
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "yq");
}

TEST(StopMatcherTest, IncludeStopStringInOutput) {
  StopMatcher m({"END"}, /*include_stop_str_in_output=*/true);
  EXPECT_EQ(m.Feed("fin E"), "fin ");
  EXPECT_EQ(m.Feed("ND after"), "END");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, MultibyteStopStrings) {
  StopMatcher m({"世界"});
  EXPECT_EQ(m.Feed("你好世"), "你好");
  EXPECT_EQ(m.Feed("界!"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcherTest, ConcatenationEqualsTextUpToTheStop) {
  const std::string text = "The quick brown fox jumps over the lazy dog";
  for (size_t step = 1; step <= 5; ++step) {
    StopMatcher m({"lazy", "dog"});
    std::string joined;
    for (size_t i = 0; i < text.size() && !m.stopped(); i += step) {
      joined += m.Feed(text.substr(i, step));
    }
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(joined, "The quick brown fox jumps over the ") << step;
  }
}

}  // namespace
}  // namespace tinyserve::protocol
