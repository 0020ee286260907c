// Hugging Face model directories: a llama2.c checkpoint converted to HF (q/k rows permuted to the
// half split) gives run.c's greedy tokens; config.json fields and errors; RoPE scaling frequencies;
// the Qwen2 q/k/v bias against a hand computation; the fp8 KV cache's per-tensor scales.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "models/hf_config.h"
#include "models/hf_model.h"
#include "models/llama2c.h"
#include "models/model_runner.h"
#include "models/safetensors.h"
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

// The checkpoint in dir rewritten (fp32) with `extra` tensors added: (name, shape, values).
struct ExtraTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
void AddTensors(const std::string& dir, const std::vector<ExtraTensor>& extra) {
  const std::string path = dir + "/model.safetensors";
  std::vector<std::vector<float>> values;
  std::vector<SafetensorsWriteTensor> tensors;
  {
    StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    values.reserve(f->tensors().size() + extra.size());
    for (const SafetensorsTensor& t : f->tensors()) {
      values.emplace_back(t.num_elements());
      f->ReadF32(t, values.back().data());
      tensors.push_back(TensorFromFloats(t.name, t.shape, values.back().data()));
    }
  }
  for (const ExtraTensor& e : extra) {
    tensors.push_back(TensorFromFloats(e.name, e.shape, e.values.data()));
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors, TensorDtype::kF32).ok());
}

TEST(HfModelTest, Fp8KvCacheScalesAreWrittenReadAndChecked) {
  auto loaded =
      LoadLlama2cCheckpoint(std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin");
  ASSERT_TRUE(loaded.ok());
  auto w = std::make_shared<LlamaWeights>(**loaded);
  w->layers[0].k_scale = 0.3f;
  w->layers[0].v_scale = 2.5f;
  w->layers[3].k_scale = 0.125f;
  ScratchDir dir("hf_kv_scales");
  // A bf16 checkpoint keeps its scales in fp32, as scalars (vLLM's k_scale / v_scale).
  ASSERT_TRUE(WriteHfModel(*w, "LlamaForCausalLM", TensorDtype::kBF16, dir.path()).ok());
  {
    StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir.path() + "/model.safetensors");
    ASSERT_TRUE(f.ok());
    const SafetensorsTensor* k0 = f->Find("model.layers.0.self_attn.k_scale");
    ASSERT_NE(k0, nullptr);
    EXPECT_EQ(k0->dtype, TensorDtype::kF32);
    EXPECT_TRUE(k0->shape.empty());
    EXPECT_NE(f->Find("model.layers.3.self_attn.v_scale"), nullptr);
    EXPECT_EQ(f->Find("model.layers.1.self_attn.k_scale"), nullptr);  // 1.0: not written
  }
  {
    auto hf = LoadHfModel(dir.path());
    ASSERT_TRUE(hf.ok()) << hf.status().ToString();
    const auto& L = (*hf)->layers;
    EXPECT_EQ(L[0].k_scale, 0.3f);
    EXPECT_EQ(L[0].v_scale, 2.5f);
    EXPECT_EQ(L[1].k_scale, 1.0f);
    EXPECT_EQ(L[1].v_scale, 1.0f);
    EXPECT_EQ(L[3].k_scale, 0.125f);
    EXPECT_EQ(L[3].v_scale, 1.0f);
  }
  // An older checkpoint's one kv_scale sets both; a layer's k_scale / v_scale win over it; [1]
  // is one value too.
  AddTensors(dir.path(), {{"model.layers.1.self_attn.kv_scale", {}, {0.75f}},
                          {"model.layers.2.self_attn.kv_scale", {1}, {0.5f}},
                          {"model.layers.2.self_attn.k_scale", {1}, {0.25f}}});
  {
    auto hf = LoadHfModel(dir.path());
    ASSERT_TRUE(hf.ok()) << hf.status().ToString();
    const auto& L = (*hf)->layers;
    EXPECT_EQ(L[1].k_scale, 0.75f);
    EXPECT_EQ(L[1].v_scale, 0.75f);
    EXPECT_EQ(L[2].k_scale, 0.25f);
    EXPECT_EQ(L[2].v_scale, 0.5f);
    EXPECT_EQ(L[0].k_scale, 0.3f);
  }
  // A scale that is not one positive finite number is an error naming the tensor.
  for (const ExtraTensor& bad :
       {ExtraTensor{"model.layers.4.self_attn.v_scale", {}, {-1.0f}},
        ExtraTensor{"model.layers.4.self_attn.v_scale", {}, {0.0f}},
        ExtraTensor{"model.layers.4.self_attn.v_scale", {}, {NAN}},
        ExtraTensor{"model.layers.4.self_attn.v_scale", {2}, {1.0f, 2.0f}}}) {
    ScratchDir bad_dir("hf_kv_scales_bad");
    ASSERT_TRUE(WriteHfModel(*w, "LlamaForCausalLM", TensorDtype::kF32, bad_dir.path()).ok());
    AddTensors(bad_dir.path(), {bad});
    auto hf = LoadHfModel(bad_dir.path());
    ASSERT_FALSE(hf.ok());
    const std::string& msg = hf.status().message();
    EXPECT_NE(msg.find("model.layers.4.self_attn.v_scale"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad.shape.empty() ? "want a positive finite scale" : "want one value"),
              std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace tinyserve
