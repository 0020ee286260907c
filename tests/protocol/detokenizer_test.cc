#include "server/protocol/detokenizer.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "models/tokenizer/llama2c_tokenizer.h"
#include "tests/protocol/fake_tokenizer.h"

namespace tinyserve::protocol {
namespace {

// ---- utf8 -------------------------------------------------------------------------------------

TEST(Utf8Test, ValidAndInvalid) {
  EXPECT_TRUE(IsValidUtf8("abc \xC3\xA9 \xE4\xB8\x96 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // > U+10FFFF
}

// IsValidUtf8 agrees with the lossy decoder (valid iff nothing would be replaced) on random bytes
// drawn to hit every lead byte, continuation range and truncation.
TEST(Utf8Test, ValidIffTheLossyDecodeChangesNothing) {
  std::mt19937 rng(3);
  const std::string alphabet =
      "a\x7F\x80\x8F\x90\x9F\xA0\xBF\xC0\xC2\xDF\xE0\xE1\xED\xEE\xF0\xF1\xF4\xF5\xFF";
  std::uniform_int_distribution<size_t> len(0, 8);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  int valid = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    for (size_t k = len(rng); k > 0; --k) s.push_back(alphabet[pick(rng)]);
    const bool expected = ToValidUtf8(s) == s;
    ASSERT_EQ(IsValidUtf8(s), expected) << "case " << i;
    valid += expected ? 1 : 0;
  }
  EXPECT_GT(valid, 1000);  // both answers are exercised
}

TEST(Utf8Test, MaximalSubpartsBecomeOneReplacementEach) {
  // As Python's b"...".decode("utf-8", "replace").
  EXPECT_EQ(ToValidUtf8("a\xF0\x9F\x98"
                        "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(ToValidUtf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ToValidUtf8("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // E0 80: two subparts
  EXPECT_EQ(ToValidUtf8("\xE4\xB8"), "\xEF\xBF\xBD");
}

TEST(Utf8Test, NonFinalKeepsAnIncompleteTail) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("ab\xF0\x9F\x98", false, &out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("ab\xF0\x41", false, &out), 4u);  // F0 then 'A': never valid
  EXPECT_EQ(out,
            "ab\xEF\xBF\xBD"
            "A");
}

TEST(Utf8Test, LengthCountsCodePoints) { EXPECT_EQ(Utf8Length("a\xC3\xA9\xF0\x9F\x98\x80"), 3u); }

// ---- the detokenizer on exact pieces ----------------------------------------------------------

TEST(DetokenizerTest, HoldsBackASplitCharacterUntilComplete) {
  FakeTokenizer tok({"Hi ", "\xF0", "\x9F", "\x98", "\x80", "!"});
  IncrementalDetokenizer detok(tok, /*prev_id=*/1);
  EXPECT_EQ(detok.Add(tok.Id("Hi ")), "Hi ");
  EXPECT_EQ(detok.Add(tok.Id("\xF0")), "");
  EXPECT_TRUE(detok.has_pending());
  EXPECT_EQ(detok.Add(tok.Id("\x9F")), "");
  EXPECT_EQ(detok.Add(tok.Id("\x98")), "");
  EXPECT_EQ(detok.Add(tok.Id("\x80")), "\xF0\x9F\x98\x80");
  EXPECT_FALSE(detok.has_pending());
  EXPECT_EQ(detok.Add(tok.Id("!")), "!");
  EXPECT_EQ(detok.Flush(), "");
}

TEST(DetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  FakeTokenizer tok({"\xE4", "\xB8", "a", "\xFF"});
  IncrementalDetokenizer detok(tok, -1);
  EXPECT_EQ(detok.Add(tok.Id("\xFF")), "\xEF\xBF\xBD");  // can never be valid: emitted at once
  EXPECT_EQ(detok.Add(tok.Id("\xE4")), "");
  EXPECT_EQ(detok.Add(tok.Id("\xB8")), "");
  EXPECT_EQ(detok.Add(tok.Id("a")),
            "\xEF\xBF\xBD"
            "a");  // E4 B8 then 'a': one U+FFFD
  EXPECT_EQ(detok.Add(tok.Id("\xE4")), "");
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");  // the incomplete tail at the end
  EXPECT_EQ(detok.Flush(), "");
}

TEST(DetokenizerTest, SpecialTokensAddNothing) {
  FakeTokenizer tok({"a", "b"});
  IncrementalDetokenizer detok(tok, -1);
  EXPECT_EQ(detok.Add(tok.Id("a")), "a");
  EXPECT_EQ(detok.Add(2), "");  // EOS
  EXPECT_EQ(detok.Add(0), "");  // <unk>
  EXPECT_EQ(detok.Add(tok.Id("b")), "b");
}

// ---- the Llama-2 tokenizer: characters split over byte-fallback tokens ------------------------

class Llama2DetokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = LoadLlama2cTokenizer(TINYSERVE_SHARED_DIR "/models/tokenizer.bin", 32000);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = std::move(tok).value();
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Llama2DetokenizerTest, DeltasAreValidAndConcatenateToTheFullDecode) {
  for (const std::string text : {
           "Hello 😀 world 🎉🎉!",
           "日本語のテキスト、漢字𠮷と絵文字🦙",
           "mixed: Ünïcödé ∑ 𝄞 👩‍👩‍👧 end",
           "🙂",
       }) {
    std::vector<int32_t> ids = tokenizer_->Encode(text, /*add_bos=*/true);
    ASSERT_GE(ids.size(), 2u);
    ASSERT_EQ(ids[0], 1);
    int num_byte_tokens = 0;
    int num_empty_deltas = 0;
    IncrementalDetokenizer detok(*tokenizer_, ids[0]);
    std::string joined;
    for (size_t i = 1; i < ids.size(); ++i) {
      if (ids[i] >= 3 && ids[i] < 3 + 256) ++num_byte_tokens;
      std::string delta = detok.Add(ids[i]);
      EXPECT_TRUE(IsValidUtf8(delta)) << text << " at token " << i;
      if (delta.empty()) ++num_empty_deltas;
      joined += delta;
    }
    joined += detok.Flush();
    EXPECT_GT(num_byte_tokens, 0) << text << ": no character was split over byte tokens";
    EXPECT_GT(num_empty_deltas, 0) << text;
    EXPECT_EQ(joined, tokenizer_->Decode(ids)) << text;
    EXPECT_EQ(joined, text) << text;
  }
}

TEST_F(Llama2DetokenizerTest, FirstPieceAfterBosDropsItsSpace) {
  std::vector<int32_t> ids = tokenizer_->Encode("Hello", true);
  IncrementalDetokenizer after_bos(*tokenizer_, 1);
  IncrementalDetokenizer mid_text(*tokenizer_, ids.back());
  EXPECT_EQ(after_bos.Add(ids[1]), "Hello");
  EXPECT_EQ(mid_text.Add(ids[1]), " Hello");
}

}  // namespace
}  // namespace tinyserve::protocol
