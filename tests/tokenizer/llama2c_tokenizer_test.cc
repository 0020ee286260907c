// llama2.c tokenizer.bin / tok512.bin: run.c's encoding and decoding, and the loader's errors.
#include "models/tokenizer/llama2c_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "tests/tokenizer/test_data.h"

namespace tinyserve {
namespace {

using ::testing::HasSubstr;
using tinyserve::testing::ReadFileBytes;
using tinyserve::testing::ReadVocabInputs;
using tinyserve::testing::ReadVocabOutputs;
using tinyserve::testing::SharedPath;
using tinyserve::testing::TempFile;

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& relative, int32_t vocab_size) {
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadLlama2cTokenizer(SharedPath(relative), vocab_size);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

class Llama2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { llama2_ = LoadOrDie("models/tokenizer.bin", 32000).release(); }
  static void TearDownTestSuite() {
    delete llama2_;
    llama2_ = nullptr;
  }
  static const Tokenizer* llama2_;
};
const Tokenizer* Llama2TokenizerTest::llama2_ = nullptr;

TEST_F(Llama2TokenizerTest, Properties) {
  ASSERT_NE(llama2_, nullptr);
  EXPECT_EQ(llama2_->vocab_size(), 32000);
  EXPECT_EQ(llama2_->bos_id(), 1);
  EXPECT_EQ(llama2_->eos_id(), 2);
  EXPECT_TRUE(llama2_->add_bos_by_default());
  EXPECT_TRUE(llama2_->is_special(0));
  EXPECT_TRUE(llama2_->is_special(1));
  EXPECT_TRUE(llama2_->is_special(2));
  EXPECT_FALSE(llama2_->is_special(3));
  EXPECT_FALSE(llama2_->is_special(29871));
}

// llama2.c test.c's vectors (ids from Meta's SentencePiece), BOS prepended.
TEST_F(Llama2TokenizerTest, MatchesLlama2cTestVectors) {
  ASSERT_NE(llama2_, nullptr);
  const auto json =
      nlohmann::json::parse(ReadFileBytes(SharedPath("models/tokenizer_llama2_vectors.json")));
  ASSERT_EQ(json["cases"].size(), 5u);
  for (const auto& c : json["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> expected = c["ids"];
    EXPECT_EQ(llama2_->Encode(text, /*add_bos=*/true), expected) << "text: " << text;
  }
}

// models/README.md: run.c's encode(bos=0) reproduces all 46 lines made by HF transformers.
TEST_F(Llama2TokenizerTest, MatchesAll46LlamaCppVocabLines) {
  ASSERT_NE(llama2_, nullptr);
  const auto inputs =
      ReadVocabInputs(SharedPath("models/llamacpp_vocab/ggml-vocab-llama-spm.gguf.inp"));
  const auto outputs =
      ReadVocabOutputs(SharedPath("models/llamacpp_vocab/ggml-vocab-llama-spm.gguf.out"));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(outputs.size(), 46u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(llama2_->Encode(inputs[i], /*add_bos=*/false), outputs[i])
        << "line " << i + 1 << ": '" << inputs[i] << "'";
  }
}

// SentencePiece BPE with byte fallback loses nothing: every byte has a token, and the one space
// the encoder adds (the dummy prefix) is the one the decoder drops after BOS. So with BOS,
// Decode(Encode(x)) == x for all 46 inputs (empty, whitespace runs, emoji, Khmer, code...).
TEST_F(Llama2TokenizerTest, DecodeInvertsEncodeWithBos) {
  ASSERT_NE(llama2_, nullptr);
  for (const std::string& text :
       ReadVocabInputs(SharedPath("models/llamacpp_vocab/ggml-vocab-llama-spm.gguf.inp"))) {
    EXPECT_EQ(llama2_->Decode(llama2_->Encode(text, /*add_bos=*/true)), text);
  }
  // Without BOS the dummy prefix stays: the result is " " + text.
  EXPECT_EQ(llama2_->Decode(llama2_->Encode("Hello world", /*add_bos=*/false)), " Hello world");
}

TEST_F(Llama2TokenizerTest, DecodeIsTheConcatenationOfPieces) {
  ASSERT_NE(llama2_, nullptr);
  const std::vector<int32_t> ids = llama2_->Encode("Héllo 🦙 world", /*add_bos=*/true);
  std::string pieces;
  int32_t prev = -1;
  for (int32_t id : ids) {
    pieces += llama2_->DecodePiece(prev, id);
    prev = id;
  }
  EXPECT_EQ(pieces, llama2_->Decode(ids));
  EXPECT_EQ(pieces, "Héllo 🦙 world");
  // Byte-fallback pieces are raw bytes: the llama emoji (not in the vocab) is 4 byte tokens.
  EXPECT_EQ(llama2_->DecodePiece(-1, 0xF0 + 3), "\xF0");
  // The space is dropped only after BOS.
  EXPECT_EQ(llama2_->DecodePiece(1, 29871), "");
  EXPECT_EQ(llama2_->DecodePiece(-1, 29871), " ");
  EXPECT_EQ(llama2_->DecodePiece(5, 29871), " ");
  // Special tokens and ids out of range decode to nothing.
  EXPECT_EQ(llama2_->DecodePiece(-1, 2), "");
  EXPECT_EQ(llama2_->DecodePiece(-1, 32000), "");
  EXPECT_EQ(llama2_->DecodePiece(-1, -7), "");
}

TEST_F(Llama2TokenizerTest, InvalidUtf8AndNulBytesEncodeAsBytes) {
  ASSERT_NE(llama2_, nullptr);
  const std::string text("a\xFF\x80\x80\x80\x80\x80 b\0c", 11);
  const std::vector<int32_t> ids = llama2_->Encode(text, /*add_bos=*/true);
  EXPECT_EQ(llama2_->Decode(ids), text);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 0xFF + 3), ids.end());
  EXPECT_NE(std::find(ids.begin(), ids.end(), 0x00 + 3), ids.end());  // NUL -> <0x00>
}

TEST_F(Llama2TokenizerTest, HundredKilobytePromptEncodesFast) {
  ASSERT_NE(llama2_, nullptr);
  std::string text;
  std::mt19937 rng(7);
  const char* words[] = {"the ",  "cat ",   "sat ",  "on ", "a ",
                         "mat, ", "naïve ", "🦙 ", "\n",  "1234 "};
  while (text.size() < 100 * 1024) text += words[rng() % 10];
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = llama2_->Encode(text, /*add_bos=*/true);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 30.0) << ids.size() << " tokens";
  EXPECT_EQ(llama2_->Decode(ids), text);
}

TEST(Tok512Test, EncodesTheGoldenPrompts) {
  std::unique_ptr<Tokenizer> tok = LoadOrDie("models/tok512.bin", 512);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->Encode("Once upon a time", true), std::vector<int32_t>({1, 403, 407, 261, 378}));
  const auto golden =
      nlohmann::json::parse(ReadFileBytes(SharedPath("golden/stories260K_greedy.json")));
  ASSERT_FALSE(golden["cases"].empty());
  for (const auto& c : golden["cases"]) {
    const std::string prompt = c["prompt"];
    const std::vector<int32_t> expected = c["prompt_token_ids"];
    EXPECT_EQ(tok->Encode(prompt, /*add_bos=*/true), expected) << "prompt: " << prompt;
  }
}

// run.c prints DecodePiece(prev, next) for every position after BOS, then a final "\n"; the
// golden outputs hold no byte tokens that its printer would skip, so the texts must be equal.
TEST(Tok512Test, DecodesTheGoldenOutputs) {
  std::unique_ptr<Tokenizer> tok = LoadOrDie("models/tok512.bin", 512);
  ASSERT_NE(tok, nullptr);
  const auto golden =
      nlohmann::json::parse(ReadFileBytes(SharedPath("golden/stories260K_greedy.json")));
  for (const auto& c : golden["cases"]) {
    std::vector<int32_t> ids = c["prompt_token_ids"];
    const std::vector<int32_t> output = c["output_token_ids"];
    ids.insert(ids.end(), output.begin(), output.end());
    EXPECT_EQ(tok->Decode(ids) + "\n", c["output_text"].get<std::string>());
  }
}

// tok512 also has all 256 byte tokens, so it is lossless with BOS on every input too.
TEST(Tok512Test, DecodeInvertsEncodeWithBos) {
  std::unique_ptr<Tokenizer> tok = LoadOrDie("models/tok512.bin", 512);
  ASSERT_NE(tok, nullptr);
  for (const std::string& text :
       ReadVocabInputs(SharedPath("models/llamacpp_vocab/ggml-vocab-llama-spm.gguf.inp"))) {
    EXPECT_EQ(tok->Decode(tok->Encode(text, /*add_bos=*/true)), text);
  }
  EXPECT_EQ(tok->Decode(tok->Encode("Lily had a big red ball", true)), "Lily had a big red ball");
}

// ---- loader errors -------------------------------------------------------------------------

std::string Record(float score, int32_t length, const std::string& text) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &score, 4);
  std::memcpy(bytes.data() + 4, &length, 4);
  return bytes + text;
}

// A well-formed llama2.c tokenizer with 259 + `extra.size()` tokens.
std::string TinyTokenizerFile(const std::vector<std::string>& extra, uint32_t max_len = 8) {
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), &max_len, 4);
  bytes += Record(0, 5, "<unk>") + Record(0, 5, "\n<s>\n") + Record(0, 6, "\n</s>\n");
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    bytes += Record(0, 6, piece);
  }
  float score = 0;
  for (const std::string& piece : extra) {
    bytes += Record(score, static_cast<int32_t>(piece.size()), piece);
    score -= 1;
  }
  return bytes;
}

Status LoadBytes(const std::string& bytes, int32_t vocab_size) {
  static const TempFile file("", "tokenizer.bin");  // rewritten for each load
  file.Write(bytes);
  StatusOr<std::unique_ptr<Tokenizer>> tok = LoadLlama2cTokenizer(file.path(), vocab_size);
  return tok.status();
}

TEST(Llama2cLoaderTest, SmallWellFormedFileLoadsAndMerges) {
  TempFile file(TinyTokenizerFile({" ", "a", "b", "ab", " ab"}), "tokenizer.bin");
  StatusOr<std::unique_ptr<Tokenizer>> tok = LoadLlama2cTokenizer(file.path(), 264);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // " ", "a", "b" -> "ab" (score -3) beats nothing else; then " " + "ab" -> " ab" (-4).
  EXPECT_EQ((*tok)->Encode("ab", true), std::vector<int32_t>({1, 263}));
  EXPECT_EQ((*tok)->Encode("abc", false), std::vector<int32_t>({263, 'c' + 3}));
}

TEST(Llama2cLoaderTest, MissingFile) {
  StatusOr<std::unique_ptr<Tokenizer>> tok = LoadLlama2cTokenizer("/nonexistent/tok.bin", 512);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(tok.status().message(), HasSubstr("/nonexistent/tok.bin"));
  EXPECT_THAT(tok.status().message(), HasSubstr("no such file"));
}

TEST(Llama2cLoaderTest, EmptyFile) {
  const Status s = LoadBytes("", 512);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer.bin"));
  EXPECT_THAT(s.message(), HasSubstr("max_token_length header"));
}

TEST(Llama2cLoaderTest, TruncatedRecord) {
  const std::string full = TinyTokenizerFile({"hello"});
  // Cut inside the text of the last record, then inside its score/length.
  Status s = LoadBytes(full.substr(0, full.size() - 2), 260);
  EXPECT_THAT(s.message(), HasSubstr("token 259 of 260"));
  EXPECT_THAT(s.message(), HasSubstr("truncated record: needs 5 bytes of text, 3 left"));
  s = LoadBytes(full.substr(0, full.size() - 5 - 3), 260);
  EXPECT_THAT(s.message(), HasSubstr("truncated record: needs 8 bytes of score and length"));
}

TEST(Llama2cLoaderTest, WrongVocabSizeForTheFile) {
  const std::string tok512 = ReadFileBytes(SharedPath("models/tok512.bin"));
  Status s = LoadBytes(tok512, 32000);
  EXPECT_THAT(s.message(), HasSubstr("truncated: file is 6227 bytes, but 32000 token records"));
  s = LoadBytes(tok512, 511);
  EXPECT_THAT(s.message(), HasSubstr("trailing bytes after 511 tokens (is vocab_size right?)"));
  s = LoadBytes(tok512, 100);
  EXPECT_THAT(s.message(), HasSubstr("vocab_size 100 is too small"));
  s = LoadBytes(tok512, 2000000000);
  EXPECT_THAT(s.message(), HasSubstr("truncated"));
}

TEST(Llama2cLoaderTest, NegativeLength) {
  std::string bytes = TinyTokenizerFile({"x"});
  const int32_t negative = -3;
  std::memcpy(bytes.data() + bytes.size() - 1 - 4, &negative, 4);
  const Status s = LoadBytes(bytes, 260);
  EXPECT_THAT(s.message(), HasSubstr("token 259 of 260"));
  EXPECT_THAT(s.message(), HasSubstr("negative length -3"));
}

TEST(Llama2cLoaderTest, LengthAboveMaxTokenLength) {
  const Status s = LoadBytes(TinyTokenizerFile({"much too long"}, /*max_len=*/8), 260);
  EXPECT_THAT(s.message(), HasSubstr("length 13 exceeds max_token_length 8"));
}

TEST(Llama2cLoaderTest, TrailingBytes) {
  const Status s = LoadBytes(TinyTokenizerFile({"x"}) + "junk", 260);
  EXPECT_THAT(s.message(), HasSubstr("4 trailing bytes after 260 tokens"));
}

TEST(Llama2cLoaderTest, GarbageNeverCrashes) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 100; ++trial) {
    std::string bytes(rng() % 5000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const Status s = LoadBytes(bytes, 259 + static_cast<int32_t>(rng() % 300));
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("tokenizer.bin"));
  }
  // Every prefix of a real file fails cleanly.
  const std::string tok512 = ReadFileBytes(SharedPath("models/tok512.bin"));
  for (size_t n = 0; n < tok512.size(); n += 13)
    EXPECT_FALSE(LoadBytes(tok512.substr(0, n), 512).ok());
}

}  // namespace
}  // namespace tinyserve
