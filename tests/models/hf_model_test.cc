// Hugging Face model directories: a llama2.c checkpoint converted to HF (q/k rows permuted to the
// half split) gives run.c's greedy tokens; config.json fields and errors; RoPE scaling frequencies;
// the Qwen2 q/k/v bias against a hand computation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/hf_config.h"
#include "models/hf_model.h"
#include "models/llama2c.h"
#include "models/model_runner.h"
#include "models/static_batch_generator.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

namespace fs = std::filesystem;
using testing_util::ExpectGoldenGreedy;
using testing_util::ScratchDir;

TEST(HfModelTest, InterleavedToHalfSplitIsConvertScriptPermute) {
  // permute(w) = w.view(heads, d/2, 2, k).transpose(1, 2): new row (h, j, i) = old (h, i, j).
  EXPECT_EQ(InterleavedToHalfSplitRows(1, 8), (std::vector<int32_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(InterleavedToHalfSplitRows(2, 4), (std::vector<int32_t>{0, 2, 1, 3, 4, 6, 5, 7}));
}

TEST(HfModelTest, ConvertedStories260KGivesRunCGreedyTokens) {
  auto w = LoadLlama2cCheckpoint(std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ScratchDir dir("hf_stories");
  ASSERT_TRUE(WriteHfModel(**w, "LlamaForCausalLM", TensorDtype::kF32, dir.path()).ok());
  auto hf = LoadHfModel(dir.path());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  const ModelConfig& c = (*hf)->config;
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c.Describe(), (*w)->config.Describe());
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.stop_token_ids, std::vector<int32_t>{1});
  // v, o, norms and FFN are stored as they were; q and k rows moved within each head.
  const auto& a = (*w)->layers[2];
  const auto& b = (*hf)->layers[2];
  const int64_t dim = c.dim;
  for (int64_t r = 0; r < c.q_dim() + 2 * c.kv_dim(); ++r) {
    int64_t from = r;
    if (r < c.q_dim() + c.kv_dim()) {
      const int64_t base = r < c.q_dim() ? 0 : c.q_dim();
      const int64_t h = (r - base) / c.head_dim, d = (r - base) % c.head_dim;
      const int64_t half = c.head_dim / 2;
      from = base + h * c.head_dim + (d < half ? 2 * d : 2 * (d - half) + 1);
    }
    ASSERT_EQ(std::vector<float>(b.wqkv.begin() + r * dim, b.wqkv.begin() + (r + 1) * dim),
              std::vector<float>(a.wqkv.begin() + from * dim, a.wqkv.begin() + (from + 1) * dim))
        << "row " << r;
  }
  EXPECT_EQ(b.w13, a.w13);
  ExpectGoldenGreedy(*hf);
}

TEST(HfModelTest, Bf16CheckpointLoadsTheRoundedWeights) {
  auto w = LoadLlama2cCheckpoint(std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin");
  ASSERT_TRUE(w.ok());
  ScratchDir dir("hf_bf16");
  ASSERT_TRUE(WriteHfModel(**w, "LlamaForCausalLM", TensorDtype::kBF16, dir.path()).ok());
  auto hf = LoadHfModel(dir.path());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  const auto& emb = (*hf)->token_embedding;
  for (size_t i = 0; i < emb.size(); ++i) {
    ASSERT_EQ(emb[i], Bf16ToF32(F32ToBf16((*w)->token_embedding[i]))) << i;
  }
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir.path() + "/config.json"));
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
}

}  // namespace
}  // namespace tinyserve
