#include "models/hf_presets.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "models/hf_config.h"
#include "models/safetensors.h"

namespace tinyserve {
namespace {

ModelConfig Shape(int32_t dim, int32_t hidden, int32_t layers, int32_t heads, int32_t kv_heads,
                  int32_t vocab, int32_t ctx, float eps, float theta, bool tied, int32_t bos,
                  std::vector<int32_t> eos) {
  ModelConfig c;
  c.dim = dim;
  c.hidden_dim = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.vocab_size = vocab;
  c.max_seq_len = ctx;
  c.rms_norm_eps = eps;
  c.rope_theta = theta;
  c.rope_style = RopeStyle::kNeox;
  c.shared_classifier = tied;
  c.bos_token_id = bos;
  c.stop_token_ids = std::move(eos);
  return c;
}

std::vector<HfPreset> MakeHfPresets() {
  std::vector<HfPreset> p;
  ModelConfig llama32 =
      Shape(2048, 8192, 16, 32, 8, 128256, 131072, 1e-5f, 500000.0f, true, 128000, {128001});
  llama32.rope_scaling = {RopeScaling::Type::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
  p.push_back({"llama-3.2-1b", "LlamaForCausalLM", llama32, HfTokenizerStyle::kLlama3});
  ModelConfig qwen =
      Shape(896, 4864, 24, 14, 2, 151936, 32768, 1e-6f, 1000000.0f, true, 151643, {151643});
  qwen.attention_bias = true;
  p.push_back({"qwen2.5-0.5b", "Qwen2ForCausalLM", qwen, HfTokenizerStyle::kQwen2});
  p.push_back({"tinyllama-1.1b", "LlamaForCausalLM",
               Shape(2048, 5632, 22, 32, 4, 32000, 2048, 1e-5f, 10000.0f, false, 1, {2}),
               HfTokenizerStyle::kTinyLlama});
  p.push_back({"smollm-135m", "LlamaForCausalLM",
               Shape(576, 1536, 30, 9, 3, 49152, 2048, 1e-5f, 10000.0f, true, 0, {0}),
               HfTokenizerStyle::kSmolLM});
  return p;
}

}  // namespace

const std::vector<HfPreset>& HfPresets() {
  static const std::vector<HfPreset> presets = MakeHfPresets();
  return presets;
}

std::optional<HfPreset> FindHfPreset(const std::string& name) {
  for (const HfPreset& p : HfPresets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

Status WriteRandomHfModel(const HfPreset& preset, TensorDtype dtype, uint64_t seed,
                          const std::string& dir) {
  namespace fs = std::filesystem;
  const ModelConfig& c = preset.config;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InvalidArgument(dir + ": cannot create directory: " + ec.message());
  {
    const fs::path p = fs::path(dir) / "config.json";
    std::ofstream out(p);
    out << HfConfigJson(preset.architecture, c, dtype);
    out.close();
    if (!out) return InvalidArgument(p.string() + ": write failed");
  }
  // One generator over the tensors in file order: the writer asks for each tensor's chunks in
  // order, so the values depend only on (preset, seed).
  auto rng = std::make_shared<std::mt19937_64>(seed);
  auto random = [rng](int64_t, int64_t count, float* out) {
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (int64_t i = 0; i < count; ++i) out[i] = u(*rng);
  };
  auto ones = [](int64_t, int64_t count, float* out) { std::fill(out, out + count, 1.0f); };
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
  std::vector<SafetensorsWriteTensor> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, d}, random});
  for (int32_t l = 0; l < c.num_layers; ++l) {
    t.push_back({HfLayerName(l, "input_layernorm.weight"), {d}, ones});
    t.push_back({HfLayerName(l, "self_attn.q_proj.weight"), {q, d}, random});
    t.push_back({HfLayerName(l, "self_attn.k_proj.weight"), {kv, d}, random});
    t.push_back({HfLayerName(l, "self_attn.v_proj.weight"), {kv, d}, random});
    if (c.attention_bias) {
      t.push_back({HfLayerName(l, "self_attn.q_proj.bias"), {q}, random});
      t.push_back({HfLayerName(l, "self_attn.k_proj.bias"), {kv}, random});
      t.push_back({HfLayerName(l, "self_attn.v_proj.bias"), {kv}, random});
    }
    t.push_back({HfLayerName(l, "self_attn.o_proj.weight"), {d, q}, random});
    t.push_back({HfLayerName(l, "post_attention_layernorm.weight"), {d}, ones});
    t.push_back({HfLayerName(l, "mlp.gate_proj.weight"), {h, d}, random});
    t.push_back({HfLayerName(l, "mlp.up_proj.weight"), {h, d}, random});
    t.push_back({HfLayerName(l, "mlp.down_proj.weight"), {d, h}, random});
  }
  t.push_back({"model.norm.weight", {d}, ones});
  if (!c.shared_classifier) t.push_back({"lm_head.weight", {c.vocab_size, d}, random});
  TS_RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / "model.safetensors").string(), t, dtype,
                                      {{"format", "pt"}}));
  return WriteSyntheticHfTokenizer(c.vocab_size, preset.tokenizer, dir);
}

}  // namespace tinyserve
