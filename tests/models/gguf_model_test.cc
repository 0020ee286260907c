// GGUF model files: stories260K written as GGUF (f32; and from its HF conversion, whose q/k rows
// go back to the interleaved order) gives run.c's greedy tokens with the tokenizer from the file's
// metadata; f16 tensors; mismatched tensors are named.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "models/gguf_model.h"
#include "models/hf_model.h"
#include "models/llama2c.h"
#include "models/tokenizer/gguf.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

using testing_util::ExpectGoldenGreedy;
using testing_util::ScratchDir;

const std::string kModels = std::string(TINYSERVE_SHARED_DIR) + "/models";

class GgufModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = LoadLlama2cCheckpoint(kModels + "/stories260K.bin");
    ASSERT_TRUE(w.ok());
    weights_ = *w;
    auto v = Llama2cVocabForGguf(kModels + "/tok512.bin", 512);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vocab_ = *v;
  }
  std::shared_ptr<const LlamaWeights> weights_;
  GgufLlamaVocab vocab_;
  ScratchDir dir_{"gguf_model"};
};

TEST_F(GgufModelTest, ConvertedStories260KGivesRunCGreedyTokensAndPrompts) {
  const std::string path = dir_ / "stories260K.gguf";
  ASSERT_TRUE(WriteGgufModel(*weights_, vocab_, TensorDtype::kF32, path).ok());
  EXPECT_TRUE(IsGgufFile(path));
  EXPECT_FALSE(IsGgufFile(kModels + "/stories260K.bin"));
  auto m = LoadGgufModel(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->weights->config.Describe(), weights_->config.Describe());
  EXPECT_EQ(m->weights->config.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(m->weights->layers[4].wqkv, weights_->layers[4].wqkv);
  EXPECT_EQ(m->weights->config.bos_token_id, 1);
  EXPECT_EQ(m->weights->config.stop_token_ids, std::vector<int32_t>{2});
  EXPECT_TRUE(m->tokenizer->add_bos_by_default());
  ExpectGoldenGreedy(m->weights);
  // The tokenizer from the metadata encodes the golden prompts as run.c did.
  std::ifstream in(std::string(TINYSERVE_SHARED_DIR) + "/golden/stories260K_greedy.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  for (const auto& c : g["cases"]) {
    EXPECT_EQ(m->tokenizer->Encode(c["prompt"].get<std::string>(), true),
              c["prompt_token_ids"].get<std::vector<int32_t>>())
        << c["prompt"];
  }
}

TEST_F(GgufModelTest, HfLayoutIsPermutedBackToInterleaved) {
  ASSERT_TRUE(WriteHfModel(*weights_, "LlamaForCausalLM", TensorDtype::kF32, dir_ / "hf").ok());
  auto hf = LoadHfModel(dir_ / "hf");
  ASSERT_TRUE(hf.ok());
  ASSERT_TRUE(WriteGgufModel(**hf, vocab_, TensorDtype::kF32, dir_ / "from_hf.gguf").ok());
  auto m = LoadGgufModel(dir_ / "from_hf.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (size_t l = 0; l < weights_->layers.size(); ++l) {
    EXPECT_EQ(m->weights->layers[l].wqkv, weights_->layers[l].wqkv) << "layer " << l;
  }
}

TEST_F(GgufModelTest, F16TensorsLoadRounded) {
  ASSERT_TRUE(WriteGgufModel(*weights_, vocab_, TensorDtype::kF16, dir_ / "f16.gguf").ok());
  auto m = LoadGgufModel(dir_ / "f16.gguf");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (size_t i = 0; i < weights_->layers[0].w2.size(); ++i) {
    ASSERT_EQ(m->weights->layers[0].w2[i], F16ToF32(F32ToF16(weights_->layers[0].w2[i]))) << i;
  }
}

// llama.cpp aborts on f16/bf16 norm weights (binary_op: unsupported types): 1-D tensors stay F32.
TEST_F(GgufModelTest, HalfPrecisionFilesKeepOneDimensionalTensorsInF32) {
  for (TensorDtype dtype : {TensorDtype::kF16, TensorDtype::kBF16}) {
    const std::string path = dir_ / (std::string(TensorDtypeName(dtype)) + ".gguf");
    ASSERT_TRUE(WriteGgufModel(*weights_, vocab_, dtype, path).ok());
    auto g = GgufFile::Open(path);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const uint32_t matrix_type = dtype == TensorDtype::kF16 ? 1 : 30;
    int num_vectors = 0;
    for (const GgufTensorInfo& t : g->tensors()) {
      if (t.dims.size() == 1) {
        ++num_vectors;
        EXPECT_EQ(t.ggml_type, 0u) << t.name;
        EXPECT_EQ(t.num_bytes, 4 * t.num_elements) << t.name;
      } else {
        EXPECT_EQ(t.ggml_type, matrix_type) << t.name;
      }
    }
    EXPECT_EQ(num_vectors, 1 + 2 * weights_->config.num_layers);
    auto m = LoadGgufModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->weights->final_norm, weights_->final_norm);  // exact: f32
    EXPECT_EQ(m->weights->layers[3].ffn_norm, weights_->layers[3].ffn_norm);
  }
}

TEST_F(GgufModelTest, ShapeMismatchAndWrongVocabAreErrors) {
  const std::string path = dir_ / "bad.gguf";
  ASSERT_TRUE(WriteGgufModel(*weights_, vocab_, TensorDtype::kF32, path).ok());
  // Patch llama.feed_forward_length (a u32 after its key and type) from 172 to 100.
  std::string bytes = testing_util::ReadFile(path);
  const std::string key = "llama.feed_forward_length";
  const size_t at = bytes.find(key) + key.size() + 4;
  ASSERT_EQ(static_cast<uint8_t>(bytes[at]), 172);
  bytes[at] = 100;
  testing_util::WriteFile(path, bytes);
  auto m = LoadGgufModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("the tensors do not match the llama metadata: "
                                      "blk.0.ffn_gate.weight has dims [64, 172], the metadata "
                                      "implies [64, 100]"),
            std::string::npos)
      << m.status().message();
  GgufLlamaVocab small = vocab_;
  small.pieces.pop_back();
  EXPECT_FALSE(WriteGgufModel(*weights_, small, TensorDtype::kF32, path).ok());
}

TEST_F(GgufModelTest, NonFiniteFloatMetadataIsAnError) {
  const std::string path = dir_ / "inf.gguf";
  ASSERT_TRUE(WriteGgufModel(*weights_, vocab_, TensorDtype::kF32, path).ok());
  // Patch llama.rope.freq_base (an f32 after its key and type) to +inf.
  std::string bytes = testing_util::ReadFile(path);
  const std::string key = "llama.rope.freq_base";
  ASSERT_NE(bytes.find(key), std::string::npos);
  const size_t at = bytes.find(key) + key.size() + 4;
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(&bytes[at], &inf, sizeof(inf));
  testing_util::WriteFile(path, bytes);
  auto m = LoadGgufModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("llama.rope.freq_base = inf is not a positive float32"),
            std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace tinyserve
