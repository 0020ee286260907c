// Hugging Face tokenizer.json files: the real Llama-2 and GPT-2 files against llama.cpp's vocab
// test vectors (made by HF tokenizers), decoding, the model-directory config files and errors.
#include "models/tokenizer/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/tokenizer/test_data.h"

namespace tinyserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using tinyserve::testing::ReadVocabInputs;
using tinyserve::testing::ReadVocabOutputs;
using tinyserve::testing::SharedPath;

const std::string kVocabDir = "models/llamacpp_vocab/";

std::unique_ptr<Tokenizer> LoadJson(const std::string& relative) {
  StatusOr<std::unique_ptr<Tokenizer>> tok = LoadHfTokenizerJson(SharedPath(relative));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

void ExpectAllLines(const Tokenizer& tok, const std::string& out_file) {
  const auto inputs = ReadVocabInputs(SharedPath(kVocabDir + "ggml-vocab-llama-spm.gguf.inp"));
  const auto outputs = ReadVocabOutputs(SharedPath(kVocabDir + out_file));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(outputs.size(), 46u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = tok.Encode(inputs[i], /*add_bos=*/false);
    EXPECT_EQ(ids, outputs[i]) << out_file << " line " << i + 1 << ": '" << inputs[i] << "'";
    // Both tokenizers are lossless on these (valid UTF-8) inputs.
    EXPECT_EQ(tok.Decode(ids), inputs[i]) << "line " << i + 1;
    EXPECT_EQ(tok.Decode(tok.Encode(inputs[i], /*add_bos=*/true)), inputs[i]) << "line " << i + 1;
  }
}

TEST(HfTokenizerJsonTest, Llama2ReproducesEveryLlamaCppLine) {
  auto tok = LoadJson("models/hf_tokenizers/llama2/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_by_default());
  EXPECT_TRUE(tok->is_special(0));
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(3));
  ExpectAllLines(*tok, "ggml-vocab-llama-spm.gguf.out");
}

TEST(HfTokenizerJsonTest, Gpt2ReproducesEveryLlamaCppLine) {
  auto tok = LoadJson("models/hf_tokenizers/gpt2/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos_by_default());
  ExpectAllLines(*tok, "ggml-vocab-gpt-2.gguf.out");
}

}  // namespace
}  // namespace tinyserve
