// The GPT-2 pre-tokenizer regex, as PCRE2 runs it.
#include "models/tokenizer/gpt2_pretokenizer.h"

#include <gtest/gtest.h>

namespace tinyserve {
namespace {

std::vector<std::string> Split(std::string_view text) {
  StatusOr<std::unique_ptr<Gpt2PreTokenizer>> pre = Gpt2PreTokenizer::Create();
  EXPECT_TRUE(pre.ok()) << pre.status().ToString();
  std::vector<std::string> out;
  if (!pre.ok()) return out;
  for (std::string_view chunk : (*pre)->Split(text)) out.emplace_back(chunk);
  return out;
}

using Chunks = std::vector<std::string>;

TEST(Gpt2PreTokenizerTest, SplitsLikeGpt2) {
  EXPECT_EQ(Split(""), Chunks{});
  EXPECT_EQ(Split("Hello world"), (Chunks{"Hello", " world"}));
  EXPECT_EQ(Split("I'm can't we'll"), (Chunks{"I", "'m", " can", "'t", " we", "'ll"}));
  EXPECT_EQ(Split("abc123 4.5!!"), (Chunks{"abc", "123", " 4", ".", "5", "!!"}));
  // Whitespace before a word goes with it; a run keeps its last space for the next word.
  EXPECT_EQ(Split("a   b"), (Chunks{"a", "  ", " b"}));
  EXPECT_EQ(Split("a\n\n b "), (Chunks{"a", "\n\n", " b", " "}));
  EXPECT_EQ(Split("naïve Ünïcödé"), (Chunks{"naïve", " Ünïcödé"}));
}

TEST(Gpt2PreTokenizerTest, InvalidUtf8BytesBecomeTheirOwnChunks) {
  const std::string text = "ab\xFF\xFE cd \xC3";
  const Chunks chunks = Split(text);
  std::string joined;
  for (const std::string& c : chunks) joined += c;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(chunks.front(), "ab");
  EXPECT_EQ(chunks.back(), "\xC3");
}

// Long runs must match in one piece: a PCRE2 resource error must not cut the text short.
TEST(Gpt2PreTokenizerTest, LongRunsSplitCorrectly) {
  const std::string letters(300000, 'a');
  EXPECT_EQ(Split(letters), Chunks{letters});
  const std::string spaces(300000, ' ');
  EXPECT_EQ(Split(spaces + "a"), (Chunks{spaces.substr(1), " a"}));
  EXPECT_EQ(Split(spaces), Chunks{spaces});
  const std::string digits(300000, '7');
  EXPECT_EQ(Split("x" + digits), (Chunks{"x", digits}));
  std::string mixed;
  for (int i = 0; i < 50000; ++i) mixed += "é!\n";
  EXPECT_EQ(Split(mixed).size(), 150000u);  // "é", "!", "\n" each
}

}  // namespace
}  // namespace tinyserve
