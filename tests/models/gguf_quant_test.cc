// Quantized GGUF files: what `convert --to gguf --dtype q8_0|q4_0|q4_k|q5_k|q6_k|q4_k_m` writes
// (each tensor's type, llama-quantize's Q4_K_M mix), that they load with the blocks kept as they
// are, that the weights come back within each type's error and the model generates (close to the
// fp32 model's logits, and the same tokens alone and in a batch), and that other types are
// refused naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "models/gguf_model.h"
#include "models/llama2c.h"
#include "models/static_batch_generator.h"
#include "models/tokenizer/gguf.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

using testing_util::ScratchDir;

const std::string kQuantModels = std::string(TINYSERVE_SHARED_DIR) + "/models";

class GgufQuantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto v = Llama2cVocabForGguf(kQuantModels + "/tok512.bin", 512);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vocab_ = *v;
  }
  std::shared_ptr<const LlamaWeights> Write(bool tied, GgufWeightType type,
                                            const std::string& name) {
    auto w = testing_util::RandomWeights(testing_util::QuantBlockConfig(tied), 17);
    const Status s = WriteGgufModel(*w, vocab_, type, dir_ / name);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return w;
  }
  GgufLlamaVocab vocab_;
  ScratchDir dir_{"gguf_quant"};
};

std::map<std::string, std::string> TensorTypes(const std::string& path) {
  std::map<std::string, std::string> types;
  auto g = GgufFile::Open(path);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  if (!g.ok()) return types;
  for (const GgufTensorInfo& t : g->tensors()) types[t.name] = GgmlTypeName(t.ggml_type);
  return types;
}

TEST_F(GgufQuantTest, WritesEachTypeAsLlamaQuantizeDoes) {
  Write(false, GgufWeightType::kQ4_K_M, "q4_k_m.gguf");
  std::map<std::string, std::string> t = TensorTypes(dir_ / "q4_k_m.gguf");
  EXPECT_EQ(t["output.weight"], "q6_K");
  EXPECT_EQ(t["token_embd.weight"], "q4_K");
  EXPECT_EQ(t["output_norm.weight"], "f32");
  for (int l = 0; l < 8; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    EXPECT_EQ(t[blk + "attn_v.weight"], more ? "q6_K" : "q4_K") << l;
    EXPECT_EQ(t[blk + "ffn_down.weight"], more ? "q6_K" : "q4_K") << l;
    for (const char* m : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight",
                          "ffn_up.weight"}) {
      EXPECT_EQ(t[blk + m], "q4_K") << blk << m;
    }
    EXPECT_EQ(t[blk + "attn_norm.weight"], "f32");
  }
  // Tied: the embedding is the output matrix, so Q6_K; q4_0 also moves the output to Q6_K.
  Write(true, GgufWeightType::kQ4_K_M, "tied.gguf");
  EXPECT_EQ(TensorTypes(dir_ / "tied.gguf")["token_embd.weight"], "q6_K");
  Write(false, GgufWeightType::kQ4_0, "q4_0.gguf");
  t = TensorTypes(dir_ / "q4_0.gguf");
  EXPECT_EQ(t["output.weight"], "q6_K");
  EXPECT_EQ(t["blk.5.ffn_down.weight"], "q4_0");
  Write(false, GgufWeightType::kQ8_0, "q8_0.gguf");
  EXPECT_EQ(TensorTypes(dir_ / "q8_0.gguf")["output.weight"], "q8_0");
  // Pure types put every matrix in the type.
  Write(false, GgufWeightType::kQ5_K, "q5_k.gguf");
  t = TensorTypes(dir_ / "q5_k.gguf");
  EXPECT_EQ(t["output.weight"], "q5_K");
  EXPECT_EQ(t["blk.0.attn_v.weight"], "q5_K");
  EXPECT_FALSE(ParseGgufWeightType("q2_k").has_value());
  EXPECT_EQ(ParseGgufWeightType("Q4_K_M"), GgufWeightType::kQ4_K_M);
}

// Columns that are not a multiple of 256 fall back as llama-quantize's (q4_K -> q5_0), and of 32
// to f16. stories260K has dim 64 and hidden 172.
TEST_F(GgufQuantTest, UnblockableShapesFallBack) {
  auto w = LoadLlama2cCheckpoint(kQuantModels + "/stories260K.bin");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(WriteGgufModel(**w, vocab_, GgufWeightType::kQ4_K, dir_ / "s.gguf").ok());
  std::map<std::string, std::string> t = TensorTypes(dir_ / "s.gguf");
  EXPECT_EQ(t["blk.0.attn_q.weight"], "q5_0");   // 64 columns
  EXPECT_EQ(t["blk.0.ffn_down.weight"], "f16");  // 172 columns
  auto m = LoadGgufModel(dir_ / "s.gguf");       // a mixed f16 + q5_0 model loads and generates
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_FALSE(m->weights->layers[0].q_wqkv.empty());
  EXPECT_TRUE(m->weights->layers[0].q_w2.empty());
  EXPECT_EQ(m->weights->layers[0].w2.size(), 64u * 172u);
}

double RelativeRms(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (a[i] - b[i]) * (a[i] - b[i]);
    n += b[i] * b[i];
  }
  return std::sqrt(e / n);
}

std::vector<float> DequantizedRows(const QuantizedMatrix& q, int32_t cols) {
  std::vector<float> out(static_cast<size_t>(q.rows()) * cols);
  float* o = out.data();
  for (const QuantPart& p : q.parts) {
    for (int32_t r = 0; r < p.rows; ++r, o += cols) {
      DequantizeRow(p.type, static_cast<const uint8_t*>(p.blocks) + QuantRowBytes(p.type, cols) * r,
                    cols, o);
    }
  }
  return out;
}

StatusOr<std::vector<GeneratedSequence>> Generate(std::shared_ptr<const LlamaWeights> w,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int32_t max_tokens) {
  ModelRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 64;
  auto runner = ModelRunner::Create(std::move(w), CreateCpuBackend(2), o);
  if (!runner.ok()) return runner.status();
  return GenerateStaticBatch(**runner, prompts, std::vector<int32_t>(prompts.size(), max_tokens),
                             StaticBatchOptions{}, /*keep_logits=*/true);
}

TEST_F(GgufQuantTest, QuantizedFilesLoadQuantizedAndGenerate) {
  struct Case {
    GgufWeightType type;
    const char* name;
    double weight_rms;  // the weights' relative rms error (uniform values)
    double logit_rms;   // first-step logits against the fp32 model's
  };
  // Measured (relative rms of the first logits; this 8-layer random model amplifies the weights'
  // error ~8x, and the int8 activations add to it): q8_0 0.049-0.057, q4_0 0.28-0.41, q4_k
  // 0.35-0.43, q5_k 0.16-0.21, q6_k 0.07-0.10, q4_k_m 0.28-0.40. A wrong scale or layout gives
  // ~1.
  const Case cases[] = {{GgufWeightType::kQ8_0, "q8_0", 0.006, 0.075},
                        {GgufWeightType::kQ4_0, "q4_0", 0.11, 0.55},
                        {GgufWeightType::kQ4_K, "q4_k", 0.09, 0.55},
                        {GgufWeightType::kQ5_K, "q5_k", 0.045, 0.28},
                        {GgufWeightType::kQ6_K, "q6_k", 0.022, 0.14},
                        {GgufWeightType::kQ4_K_M, "q4_k_m", 0.09, 0.52}};
  const std::vector<std::vector<int32_t>> prompts = {{1, 45, 300, 7, 99}, {1, 12}, {1, 400, 3}};
  std::shared_ptr<const LlamaWeights> fp32;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fp32 = Write(false, c.type, std::string(c.name) + ".gguf");
    auto m = LoadGgufModel(dir_ / (std::string(c.name) + ".gguf"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const LlamaWeights& q = *m->weights;
    ASSERT_TRUE(q.is_quantized());
    EXPECT_TRUE(q.layers[2].wqkv.empty());  // the blocks are kept, no fp32 copy
    ASSERT_EQ(q.layers[2].q_wqkv.parts.size(), 3u);
    EXPECT_EQ(q.layers[2].q_wqkv.rows(), 256 + 2 * 128);
    EXPECT_LT(RelativeRms(DequantizedRows(q.layers[2].q_w13, 256), fp32->layers[2].w13),
              c.weight_rms);
    EXPECT_LT(RelativeRms(DequantizedRows(q.q_classifier, 256), fp32->classifier), c.weight_rms);
    // The model generates; its first logits are near the fp32 model's.
    auto got = Generate(m->weights, prompts, 8);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto want = Generate(fp32, prompts, 1);
    ASSERT_TRUE(want.ok());
    for (size_t p = 0; p < prompts.size(); ++p) {
      ASSERT_EQ((*got)[p].output_ids.size(), 8u);
      EXPECT_LT(RelativeRms((*got)[p].logits[0], (*want)[p].logits[0]), c.logit_rms) << p;
      // Batch invariance: each prompt alone gives the batch's tokens and logits, bit for bit.
      auto alone = Generate(m->weights, {prompts[p]}, 8);
      ASSERT_TRUE(alone.ok());
      EXPECT_EQ((*alone)[0].output_ids, (*got)[p].output_ids);
      EXPECT_EQ((*alone)[0].logits, (*got)[p].logits);
    }
  }
}

// Patches the ggml type of tensor `name` in the file's tensor infos (after its name, n_dims and
// dims).
void PatchType(const std::string& path, const std::string& name, int dims, uint32_t type) {
  std::string bytes = testing_util::ReadFile(path);
  std::string key(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(&key[0], &len, 8);
  key += name;
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos) << name;
  std::memcpy(&bytes[at + key.size() + 4 + 8 * dims], &type, 4);
  testing_util::WriteFile(path, bytes);
}

TEST_F(GgufQuantTest, OtherTypesAreRefusedNamingTheTensor) {
  Write(false, GgufWeightType::kQ8_0, "bad.gguf");
  PatchType(dir_ / "bad.gguf", "blk.1.attn_k.weight", 2, 10);  // q2_K
  auto m = LoadGgufModel(dir_ / "bad.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.1.attn_k.weight has type q2_K (supported: f32, f16, "
                                      "bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K)"),
            std::string::npos)
      << m.status().message();
  Write(false, GgufWeightType::kQ8_0, "norm.gguf");
  PatchType(dir_ / "norm.gguf", "output_norm.weight", 1, 8);  // q8_0
  m = LoadGgufModel(dir_ / "norm.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(
                "output_norm.weight has type q8_0 (a 1-D tensor must be f32, f16 or bf16)"),
            std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace tinyserve
