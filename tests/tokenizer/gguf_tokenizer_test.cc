// The tokenizers GGUF files describe: llama.cpp's vocab test vectors (made by HF transformers).
#include "models/tokenizer/gguf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "models/tokenizer/llama2c_tokenizer.h"
#include "tests/tokenizer/gguf_writer.h"
#include "tests/tokenizer/test_data.h"

namespace tinyserve {
namespace {

using ::testing::HasSubstr;
using tinyserve::testing::GgufWriter;
using tinyserve::testing::ReadVocabInputs;
using tinyserve::testing::ReadVocabOutputs;
using tinyserve::testing::SharedPath;
using tinyserve::testing::TempFile;

const std::string kVocabDir = "models/llamacpp_vocab/";

class GgufTokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (auto [name, slot] : {std::pair{"ggml-vocab-llama-spm.gguf", &spm_},
                              std::pair{"ggml-vocab-gpt-2.gguf", &gpt2_}}) {
      StatusOr<std::unique_ptr<Tokenizer>> tok = LoadGgufTokenizer(SharedPath(kVocabDir + name));
      ASSERT_TRUE(tok.ok()) << tok.status().ToString();
      *slot = std::move(tok).value().release();
    }
    inputs_ = new std::vector<std::string>(
        ReadVocabInputs(SharedPath(kVocabDir + "ggml-vocab-llama-spm.gguf.inp")));
  }
  static void TearDownTestSuite() {
    delete spm_;
    delete gpt2_;
    delete inputs_;
  }
  static const Tokenizer* spm_;
  static const Tokenizer* gpt2_;
  static const std::vector<std::string>* inputs_;
};
const Tokenizer* GgufTokenizerTest::spm_ = nullptr;
const Tokenizer* GgufTokenizerTest::gpt2_ = nullptr;
const std::vector<std::string>* GgufTokenizerTest::inputs_ = nullptr;

void ExpectAllLines(const Tokenizer& tok, const std::vector<std::string>& inputs,
                    const std::string& out_file) {
  const auto outputs = ReadVocabOutputs(SharedPath(kVocabDir + out_file));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(outputs.size(), 46u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(tok.Encode(inputs[i], /*add_bos=*/false), outputs[i])
        << out_file << " line " << i + 1 << ": '" << inputs[i] << "'";
  }
}

TEST_F(GgufTokenizerTest, LlamaSpmMatchesAll46Lines) {
  ASSERT_NE(spm_, nullptr);
  ExpectAllLines(*spm_, *inputs_, "ggml-vocab-llama-spm.gguf.out");
}

TEST_F(GgufTokenizerTest, Gpt2MatchesAll46Lines) {
  ASSERT_NE(gpt2_, nullptr);
  ExpectAllLines(*gpt2_, *inputs_, "ggml-vocab-gpt-2.gguf.out");
}

// Found by the llama.cpp oracle (tests/oracle): a U+2581 typed in the text is a space to
// SentencePiece and llama.cpp ("<<SYS>> \u2581 \u2581\u2581 <s>" gives one 5-space piece and
// "\u2581<"), not three byte-fallback tokens.
TEST_F(GgufTokenizerTest, LiteralSentencePieceSpaceInTheTextIsASpace) {
  const std::vector<int32_t> got =
      spm_->Encode("<<SYS>> \xE2\x96\x81 \xE2\x96\x81\xE2\x96\x81 <s>", false);
  EXPECT_EQ(got, spm_->Encode("<<SYS>>      <s>", false));
  EXPECT_EQ(got, (std::vector<int32_t>{3532, 14816, 29903, 6778, 418, 529, 29879, 29958}));
}

TEST_F(GgufTokenizerTest, SpecialTokensAreTheControlTokens) {
  EXPECT_EQ(spm_->special_tokens(),
            (std::vector<std::pair<std::string, int32_t>>{{"<s>", 1}, {"</s>", 2}}));
  EXPECT_EQ(gpt2_->special_tokens(),
            (std::vector<std::pair<std::string, int32_t>>{{"<|endoftext|>", 50256}}));
  auto llama2c = LoadLlama2cTokenizer(SharedPath("models/tok512.bin"), 512);
  ASSERT_TRUE(llama2c.ok());
  EXPECT_TRUE((*llama2c)->special_tokens().empty());
}

TEST_F(GgufTokenizerTest, Properties) {
  ASSERT_NE(spm_, nullptr);
  ASSERT_NE(gpt2_, nullptr);
  EXPECT_EQ(spm_->vocab_size(), 32000);
  EXPECT_EQ(spm_->bos_id(), 1);
  EXPECT_EQ(spm_->eos_id(), 2);
  EXPECT_TRUE(spm_->add_bos_by_default());
  EXPECT_TRUE(spm_->is_special(0));
  EXPECT_TRUE(spm_->is_special(1));
  EXPECT_FALSE(spm_->is_special(3));  // a byte token
  EXPECT_EQ(spm_->Encode("Hi", true).front(), 1);
  EXPECT_EQ(gpt2_->vocab_size(), 50257);
  EXPECT_EQ(gpt2_->bos_id(), 50256);
  EXPECT_EQ(gpt2_->eos_id(), 50256);
  EXPECT_FALSE(gpt2_->add_bos_by_default());
  EXPECT_TRUE(gpt2_->is_special(50256));
  EXPECT_FALSE(gpt2_->is_special(220));
}

// The GGUF and the llama2.c export hold the same Llama-2 vocabulary: same ids on every input.
TEST_F(GgufTokenizerTest, LlamaSpmAgreesWithTokenizerBin) {
  ASSERT_NE(spm_, nullptr);
  StatusOr<std::unique_ptr<Tokenizer>> bin =
      LoadLlama2cTokenizer(SharedPath("models/tokenizer.bin"), 32000);
  ASSERT_TRUE(bin.ok()) << bin.status().ToString();
  for (const std::string& text : *inputs_) {
    EXPECT_EQ(spm_->Encode(text, true), (*bin)->Encode(text, true));
  }
}

// Lossless cases. Byte-level BPE maps every byte to a token, so Decode(Encode(x)) == x for any
// bytes, with or without BOS (BOS is special and decodes to nothing). SentencePiece BPE with byte
// fallback is lossless with BOS (the dummy-prefix space is dropped after BOS); without BOS the
// dummy prefix shows up as a leading " ".
TEST_F(GgufTokenizerTest, DecodeInvertsEncode) {
  ASSERT_NE(spm_, nullptr);
  ASSERT_NE(gpt2_, nullptr);
  for (const std::string& text : *inputs_) {
    EXPECT_EQ(spm_->Decode(spm_->Encode(text, true)), text);
    EXPECT_EQ(gpt2_->Decode(gpt2_->Encode(text, false)), text);
    EXPECT_EQ(gpt2_->Decode(gpt2_->Encode(text, true)), text);
  }
  EXPECT_EQ(spm_->Decode(spm_->Encode("Hello", false)), " Hello");
}

TEST_F(GgufTokenizerTest, Gpt2PiecesAreBytes) {
  ASSERT_NE(gpt2_, nullptr);
  EXPECT_EQ(gpt2_->DecodePiece(-1, 220), " ");     // "Ġ"
  EXPECT_EQ(gpt2_->DecodePiece(50256, 220), " ");  // no BOS rule for byte-level BPE
  EXPECT_EQ(gpt2_->DecodePiece(-1, 198), "\n");    // "Ċ"
  EXPECT_EQ(gpt2_->DecodePiece(-1, 50256), "");    // <|endoftext|> is special
  EXPECT_EQ(gpt2_->Decode({15496, 995}), "Hello world");
}

// Special tokens written in the text are plain text, never the special id.
TEST_F(GgufTokenizerTest, SpecialTokenTextIsNotSpecial) {
  ASSERT_NE(spm_, nullptr);
  ASSERT_NE(gpt2_, nullptr);
  for (int32_t id : gpt2_->Encode("<|endoftext|>", false)) EXPECT_NE(id, 50256);
  for (int32_t id : spm_->Encode("<s></s><unk>", false)) EXPECT_FALSE(spm_->is_special(id));
}

TEST_F(GgufTokenizerTest, InvalidUtf8NeverCrashesAndRoundTrips) {
  ASSERT_NE(spm_, nullptr);
  ASSERT_NE(gpt2_, nullptr);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text(rng() % 40, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 3 == 0 ? 'a' + rng() % 3 : rng());
    EXPECT_EQ(gpt2_->Decode(gpt2_->Encode(text, false)), text);
    EXPECT_EQ(spm_->Decode(spm_->Encode(text, true)), text);
  }
  const std::string broken = "caf\xC3 \xE2\x82 x\xF0\x9F\xA6 \xFF\xFE end";
  EXPECT_EQ(gpt2_->Decode(gpt2_->Encode(broken, false)), broken);
}

TEST_F(GgufTokenizerTest, HundredKilobytePromptEncodesFast) {
  ASSERT_NE(spm_, nullptr);
  ASSERT_NE(gpt2_, nullptr);
  std::string text;
  for (size_t i = 0; text.size() < 100 * 1024; ++i) text += (*inputs_)[i % inputs_->size()] + " ";
  for (const Tokenizer* tok : {spm_, gpt2_}) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok->Encode(text, false);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 30.0);
    EXPECT_EQ(tok->Decode(ids), tok == spm_ ? " " + text : text);
  }
}

// Const methods are safe from many threads: encode the inputs from 4 threads at once.
TEST_F(GgufTokenizerTest, ConcurrentEncodesAgree) {
  ASSERT_NE(gpt2_, nullptr);
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : *inputs_) expected.push_back(gpt2_->Encode(text, false));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < inputs_->size(); ++i) {
          if (gpt2_->Encode((*inputs_)[i], false) != expected[i]) ++mismatches;
          if (spm_->Decode(spm_->Encode((*inputs_)[i], true)) != (*inputs_)[i]) ++mismatches;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- errors ----------------------------------------------------------------------------------

std::string LoadError(const std::string& bytes) {
  TempFile file(bytes, "vocab.gguf");
  StatusOr<std::unique_ptr<Tokenizer>> tok = LoadGgufTokenizer(file.path());
  EXPECT_FALSE(tok.ok());
  if (tok.ok()) return "";
  EXPECT_THAT(tok.status().message(), HasSubstr("vocab.gguf"));
  return tok.status().message();
}

TEST(GgufTokenizerErrorTest, MissingOrUnsupportedKeys) {
  EXPECT_THAT(LoadError(GgufWriter().Header(0, 0).bytes()),
              HasSubstr("GGUF key 'tokenizer.ggml.model' is missing"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 2)
                            .KeyString("tokenizer.ggml.model", "bert")
                            .KeyStringArray("tokenizer.ggml.tokens", {"a"})
                            .bytes()),
              HasSubstr("tokenizer.ggml.model 'bert' is not supported"));
  EXPECT_THAT(
      LoadError(GgufWriter().Header(0, 1).KeyString("tokenizer.ggml.model", "llama").bytes()),
      HasSubstr("'tokenizer.ggml.tokens' is missing"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 2)
                            .KeyString("tokenizer.ggml.model", "gpt2")
                            .KeyStringArray("tokenizer.ggml.tokens", {"a"})
                            .bytes()),
              HasSubstr("'tokenizer.ggml.merges' is missing"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 3)
                            .KeyString("tokenizer.ggml.model", "llama")
                            .KeyStringArray("tokenizer.ggml.tokens", {"a", "b"})
                            .KeyF32Array("tokenizer.ggml.scores", {0.0f})
                            .bytes()),
              HasSubstr("tokenizer.ggml.scores has 1 entries for 2 tokens"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 3)
                            .KeyString("tokenizer.ggml.model", "llama")
                            .KeyStringArray("tokenizer.ggml.tokens", {"a", "b"})
                            .KeyI32Array("tokenizer.ggml.token_type", {1, 9})
                            .bytes()),
              HasSubstr("token_type of token 1 is 9"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 3)
                            .KeyString("tokenizer.ggml.model", "llama")
                            .KeyStringArray("tokenizer.ggml.tokens", {"a", "b", "c"})
                            .Key("tokenizer.ggml.bos_token_id", GgufType::kUint32)
                            .Raw<uint32_t>(7)
                            .bytes()),
              HasSubstr("BOS token id 7 is outside the vocabulary of 3"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 3)
                            .KeyString("tokenizer.ggml.model", "gpt2")
                            .KeyStringArray("tokenizer.ggml.tokens", {"a"})
                            .KeyStringArray("tokenizer.ggml.merges", {})
                            .bytes()),
              HasSubstr("no token for byte 0"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 2)
                            .KeyString("tokenizer.ggml.model", "gpt2")
                            .KeyString("tokenizer.ggml.pre", "llama-bpe")
                            .bytes()),
              HasSubstr("'tokenizer.ggml.tokens' is missing"));
  EXPECT_THAT(LoadError(GgufWriter()
                            .Header(0, 2)
                            .KeyString("tokenizer.ggml.model", "llama")
                            .Key("tokenizer.ggml.tokens", GgufType::kUint32)
                            .Raw<uint32_t>(5)
                            .bytes()),
              HasSubstr("'tokenizer.ggml.tokens' is u32, expected array of string"));
}

TEST(GgufTokenizerErrorTest, UnsupportedPreTokenizer) {
  GgufWriter w;
  w.Header(0, 4)
      .KeyString("tokenizer.ggml.model", "gpt2")
      .KeyString("tokenizer.ggml.pre", "llama-bpe");
  w.KeyStringArray("tokenizer.ggml.tokens", {"a"}).KeyStringArray("tokenizer.ggml.merges", {});
  EXPECT_THAT(LoadError(w.bytes()), HasSubstr("tokenizer.ggml.pre = 'llama-bpe' is not supported"));
}

TEST(GgufTokenizerErrorTest, GarbageFile) {
  EXPECT_THAT(LoadError("this is not a model"), HasSubstr("not a GGUF file"));
  EXPECT_THAT(LoadError(GgufWriter().Header(0, 1ull << 40).bytes()), HasSubstr("n_kv"));
}

}  // namespace
}  // namespace tinyserve
