// config.json parsing: the three architectures, defaults, rope_scaling frequencies (hand-computed
// from HF's formulas in double), and errors that name the field.
#include <gtest/gtest.h>

#include <cmath>

#include "models/hf_config.h"

namespace tinyserve {
namespace {

StatusOr<HfConfig> Parse(const std::string& text) { return ParseHfConfig(text, "m/config.json"); }

std::string Error(const std::string& text) {
  auto c = Parse(text);
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? "" : c.status().message();
}

const char* kSmolLM = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
  "hidden_act": "silu", "hidden_size": 576, "intermediate_size": 1536,
  "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 9,
  "num_hidden_layers": 30, "num_key_value_heads": 3, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "vocab_size": 49152})";

TEST(HfConfigTest, ReadsSmolLM) {
  auto c = Parse(kSmolLM);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const ModelConfig& m = c->model;
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.dim, 576);
  EXPECT_EQ(m.hidden_dim, 1536);
  EXPECT_EQ(m.num_layers, 30);
  EXPECT_EQ(m.num_heads, 9);
  EXPECT_EQ(m.num_kv_heads, 3);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.vocab_size, 49152);
  EXPECT_EQ(m.max_seq_len, 2048);
  EXPECT_EQ(m.rms_norm_eps, 1e-5f);
  EXPECT_EQ(m.rope_theta, 10000.0f);
  EXPECT_EQ(m.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(m.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_TRUE(m.shared_classifier);
  EXPECT_FALSE(m.attention_bias);
  EXPECT_EQ(m.bos_token_id, 0);
  EXPECT_EQ(m.stop_token_ids, std::vector<int32_t>{0});
  EXPECT_EQ(c->torch_dtype, TensorDtype::kBF16);
}

TEST(HfConfigTest, Qwen2HasQkvBiasAndMistralWindowCapsTheContext) {
  auto q = Parse(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
    "intermediate_size": 4864, "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "vocab_size": 151936, "eos_token_id": [151645, 151643],
    "sliding_window": 32768, "use_sliding_window": false})");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_TRUE(q->model.attention_bias);
  EXPECT_EQ(q->model.max_seq_len, 32768);  // Qwen2's default
  EXPECT_EQ(q->model.rms_norm_eps, 1e-6f);
  EXPECT_EQ(q->model.bos_token_id, -1);
  EXPECT_EQ(q->model.stop_token_ids, (std::vector<int32_t>{151645, 151643}));
  EXPECT_EQ(q->torch_dtype, TensorDtype::kF32);
  auto m = Parse(R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
    "sliding_window": 4096})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->model.max_seq_len, 4096);
  EXPECT_EQ(m->model.head_dim, 128);
}

TEST(HfConfigTest, Llama3RopeScalingFrequenciesMatchHandComputedValues) {
  // Llama-3.2-1B: theta 500000, head_dim 64, factor 32, low 1, high 4, original context 8192, so
  // wavelengths below 2048 keep their frequency, above 8192 divide it by 32, and between blend.
  auto c = Parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "rope_theta": 500000.0,
    "max_position_embeddings": 131072, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
    "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.rope_scaling.type, RopeScaling::Type::kLlama3);
  const std::vector<float> f = c->model.RopeInvFreq();
  ASSERT_EQ(f.size(), 32u);
  // inv = 500000^(-2i/64); wavelen = 2 pi / inv; i = 15..17 are in the band, with
  // smooth = (8192 / wavelen - 1) / 3 and (1 - smooth) * inv / 32 + smooth * inv.
  const std::pair<int, double> want[] = {{0, 1.0},
                                         {10, 0.016560440080994446},
                                         {15, 0.001290547928209264},
                                         {16, 0.00042955679655936815},
                                         {17, 9.70828780262767e-05},
                                         {20, 8.570255489881478e-06},
                                         {31, 9.41830672543491e-08}};
  for (const auto& [i, v] : want) EXPECT_NEAR(f[i], v, 2e-6 * v) << "pair " << i;
}

TEST(HfConfigTest, LinearRopeScalingDividesEveryFrequency) {
  auto c = Parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 16,
    "intermediate_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 8,
    "rope_scaling": {"type": "linear", "factor": 4.0}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<float> f = c->model.RopeInvFreq();  // head_dim 8, theta 10000
  const double want[] = {0.25, 0.025, 0.0025, 0.00025};
  ASSERT_EQ(f.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], want[i], 1e-6 * want[i]) << i;
  // Unscaled, the frequencies are run.c's: 1 / 10000^(2i / 8) in float.
  ModelConfig plain = c->model;
  plain.rope_scaling = {};
  EXPECT_EQ(plain.RopeInvFreq()[1], 1.0f / std::pow(10000.0f, 2.0f / 8.0f));
}

TEST(HfConfigTest, ErrorsNameTheField) {
  const std::string base = R"("hidden_size": 64, "intermediate_size": 128,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100)";
  auto with = [&](const std::string& extra) {
    return "{\"architectures\": [\"LlamaForCausalLM\"], " + base + extra + "}";
  };
  EXPECT_NE(Error(R"({"architectures": ["GPT2LMHeadModel"], )" + base + "}")
                .find("m/config.json: \"architectures\" = \"GPT2LMHeadModel\" is not supported"),
            std::string::npos);
  EXPECT_NE(Error("{" + base + "}").find("\"architectures\" is missing"), std::string::npos);
  EXPECT_NE(Error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})")
                .find("\"num_hidden_layers\" is missing"),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "num_key_value_heads": 3)")).find("\"num_key_value_heads\" = 3"),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})"))
                .find("\"rope_scaling.rope_type\" = \"yarn\" is not supported"),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"))
                .find("\"rope_scaling.low_freq_factor\" is missing"),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "torch_dtype": "int8")")).find("\"torch_dtype\" = \"int8\""),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "hidden_act": "gelu")")).find("\"hidden_act\""), std::string::npos);
  EXPECT_NE(Error(with(R"(, "mlp_bias": true)")).find("\"mlp_bias\""), std::string::npos);
  EXPECT_NE(Error(with(R"(, "partial_rotary_factor": 0.5)")).find("\"partial_rotary_factor\""),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "head_dim": 15)")).find("\"head_dim\" = 15 is odd"), std::string::npos);
  EXPECT_NE(Error(with(R"(, "tie_word_embeddings": "yes")")).find("\"tie_word_embeddings\""),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "eos_token_id": 100)")).find("\"eos_token_id\" is outside"),
            std::string::npos);
  // Numbers kept as float32 must fit one (a larger double converts with undefined behaviour).
  EXPECT_NE(Error(with(R"(, "rope_theta": 1e300)"))
                .find("\"rope_theta\" = 1e+300 is not a finite float32"),
            std::string::npos);
  EXPECT_NE(Error(with(R"(, "rope_scaling": {"rope_type": "linear", "factor": 1e39})"))
                .find("\"rope_scaling.factor\" must be a positive number, got 1e+39"),
            std::string::npos);
  EXPECT_NE(Error("[1, 2]").find("m/config.json: not a JSON object"), std::string::npos);
}

TEST(HfConfigTest, WrittenConfigReadsBackTheSameModel) {
  auto c = Parse(kSmolLM);
  ASSERT_TRUE(c.ok());
  ModelConfig m = c->model;
  m.rope_scaling = {RopeScaling::Type::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  m.stop_token_ids = {0, 2};
  auto back = Parse(HfConfigJson("LlamaForCausalLM", m, TensorDtype::kF16));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model.Describe(), m.Describe());
  EXPECT_EQ(back->model.rms_norm_eps, m.rms_norm_eps);
  EXPECT_EQ(back->model.RopeInvFreq(), m.RopeInvFreq());
  EXPECT_EQ(back->model.stop_token_ids, m.stop_token_ids);
  EXPECT_EQ(back->torch_dtype, TensorDtype::kF16);
  EXPECT_NE(HfConfigJson("LlamaForCausalLM", m, TensorDtype::kF16).find("\"rms_norm_eps\": 1e-05"),
            std::string::npos);
}

}  // namespace
}  // namespace tinyserve
