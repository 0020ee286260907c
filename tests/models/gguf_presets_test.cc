// gen-model --format gguf (models/gguf_presets.h): every preset's small shape keeps the
// architecture of the full one, is written as a GGUF file and loads back to the same config and
// weights; Llama-3 RoPE scaling survives as rope_freqs.weight. (That llama.cpp computes the same
// log-probabilities on these files is tests/oracle, label oracle.)
#include "models/gguf_presets.h"

#include <gtest/gtest.h>

#include <set>

#include "models/gguf_model.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

using testing_util::ReadFile;
using testing_util::ScratchDir;

TEST(GgufPresetsTest, SmallShapesKeepTheArchitecture) {
  ASSERT_EQ(GgufPresets().size(), 6u);
  for (const GgufPreset& p : GgufPresets()) {
    SCOPED_TRACE(p.name);
    const ModelConfig& full = p.config;
    const ModelConfig small = SmallShape(full);
    EXPECT_EQ(small.head_dim, full.head_dim);
    EXPECT_EQ(small.num_heads / small.num_kv_heads, full.num_heads / full.num_kv_heads);
    EXPECT_EQ(small.num_heads % small.num_kv_heads, 0);
    EXPECT_EQ(small.dim, small.num_heads * small.head_dim);
    EXPECT_EQ(small.num_layers, 2);
    EXPECT_EQ(small.vocab_size, 512);
    EXPECT_EQ(small.hidden_dim % 16, 0);
    EXPECT_EQ(small.attention_bias, full.attention_bias);
    EXPECT_EQ(small.shared_classifier, full.shared_classifier);
    EXPECT_EQ(small.rope_theta, full.rope_theta);
    EXPECT_EQ(small.rope_scaling.type, full.rope_scaling.type);
    EXPECT_EQ(small.rms_norm_eps, full.rms_norm_eps);
  }
  // The architecture paths the presets must cover between them.
  const auto qwen = FindGgufPreset("qwen2.5-0.5b");
  ASSERT_TRUE(qwen);
  EXPECT_TRUE(qwen->config.attention_bias);
  EXPECT_EQ(FindGgufPreset("llama-3.2-1b")->config.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(FindGgufPreset("llama-2-linear-rope")->config.rope_scaling.type,
            RopeScaling::Type::kLinear);
  EXPECT_FALSE(FindGgufPreset("mistral-7b")->config.shared_classifier);
  EXPECT_EQ(FindGgufPreset("mistral-7b")->config.head_dim, 128);
  EXPECT_TRUE(FindGgufPreset("smollm-135m")->config.shared_classifier);
  EXPECT_FALSE(FindGgufPreset("no-such-model"));
}

TEST(GgufPresetsTest, SyntheticVocabHasUniquePiecesBytesAndSpecials) {
  const GgufLlamaVocab v = SyntheticGgufLlamaVocab(512);
  ASSERT_EQ(v.pieces.size(), 512u);
  ASSERT_EQ(v.scores.size(), 512u);
  ASSERT_EQ(v.token_types.size(), 512u);
  EXPECT_EQ(std::set<std::string>(v.pieces.begin(), v.pieces.end()).size(), 512u);
  EXPECT_EQ(v.pieces[0], "<unk>");
  EXPECT_EQ(v.token_types[0], 2);
  EXPECT_EQ(v.pieces[1], "<s>");
  EXPECT_EQ(v.token_types[2], 3);
  EXPECT_EQ(v.pieces[3], "<0x00>");
  EXPECT_EQ(v.pieces[258], "<0xFF>");
  EXPECT_EQ(v.token_types[258], 6);
  EXPECT_EQ(v.pieces[259], "\xe2\x96\x81");
  EXPECT_EQ(v.pieces[260], "!");
  EXPECT_EQ(v.pieces[261], "\xe2\x96\x81!");
  EXPECT_GT(v.scores[260], v.scores[261]);
  // Big enough for the full shapes' vocabularies too.
  const GgufLlamaVocab big = SyntheticGgufLlamaVocab(151936);
  EXPECT_EQ(std::set<std::string>(big.pieces.begin(), big.pieces.end()).size(), 151936u);
}

TEST(GgufPresetsTest, EveryPresetWritesAndLoadsBackExactly) {
  ScratchDir dir("gguf_presets");
  for (const GgufPreset& p : GgufPresets()) {
    SCOPED_TRACE(p.name);
    const std::string path = dir / (p.name + ".gguf");
    ASSERT_TRUE(WriteRandomGgufModel(p, /*small=*/true, GgufWeightType::kF32, 7, path).ok());
    StatusOr<GgufModel> m = LoadGgufModel(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const ModelConfig want = SmallShape(p.config);
    const ModelConfig& got = m->weights->config;
    EXPECT_EQ(got.dim, want.dim);
    EXPECT_EQ(got.hidden_dim, want.hidden_dim);
    EXPECT_EQ(got.num_heads, want.num_heads);
    EXPECT_EQ(got.num_kv_heads, want.num_kv_heads);
    EXPECT_EQ(got.head_dim, want.head_dim);
    EXPECT_EQ(got.attention_bias, want.attention_bias);
    EXPECT_EQ(got.shared_classifier, want.shared_classifier);
    EXPECT_EQ(got.rope_theta, want.rope_theta);
    EXPECT_EQ(got.rms_norm_eps, want.rms_norm_eps);
    EXPECT_EQ(m->tokenizer->vocab_size(), 512);
    // Llama-3 scaling comes back as rope_freqs divisors that give the same frequencies.
    const std::vector<float> want_freq = want.RopeInvFreq(), got_freq = got.RopeInvFreq();
    ASSERT_EQ(got_freq.size(), want_freq.size());
    for (size_t i = 0; i < want_freq.size(); ++i) {
      EXPECT_NEAR(got_freq[i], want_freq[i], 1e-6f * want_freq[i]) << "pair " << i;
    }
    EXPECT_EQ(got.rope_freq_factors.empty(), want.rope_scaling.type != RopeScaling::Type::kLlama3);
    // F32 weights: bit for bit what the generator drew.
    const LlamaWeights drawn = RandomLlamaWeights(want, 7);
    EXPECT_EQ(m->weights->token_embedding, drawn.token_embedding);
    EXPECT_EQ(m->weights->classifier, drawn.classifier);
    EXPECT_EQ(m->weights->layers[1].w2, drawn.layers[1].w2);
    EXPECT_EQ(m->weights->layers[1].bqkv.empty(), !want.attention_bias);
  }
}

TEST(GgufPresetsTest, SameSeedSameBytesOtherSeedOtherBytes) {
  ScratchDir dir("gguf_presets_seed");
  const GgufPreset p = *FindGgufPreset("qwen2.5-0.5b");
  ASSERT_TRUE(WriteRandomGgufModel(p, true, GgufWeightType::kBF16, 1, dir / "a.gguf").ok());
  ASSERT_TRUE(WriteRandomGgufModel(p, true, GgufWeightType::kBF16, 1, dir / "b.gguf").ok());
  ASSERT_TRUE(WriteRandomGgufModel(p, true, GgufWeightType::kBF16, 2, dir / "c.gguf").ok());
  EXPECT_EQ(ReadFile(dir / "a.gguf"), ReadFile(dir / "b.gguf"));
  EXPECT_NE(ReadFile(dir / "a.gguf"), ReadFile(dir / "c.gguf"));
  EXPECT_TRUE(LoadGgufModel(dir / "a.gguf").ok());
}

}  // namespace
}  // namespace tinyserve
