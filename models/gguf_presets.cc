#include "models/gguf_presets.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "models/hf_presets.h"

namespace tinyserve {
namespace {

std::vector<GgufPreset> MakeGgufPresets() {
  std::vector<GgufPreset> p;
  for (const HfPreset& hf : HfPresets()) {
    ModelConfig c = hf.config;
    c.name = hf.name;
    c.rope_style = RopeStyle::kInterleaved;
    p.push_back({hf.name, c});
  }
  ModelConfig mistral;
  mistral.name = "mistral-7b";
  mistral.dim = 4096;
  mistral.hidden_dim = 14336;
  mistral.num_layers = 32;
  mistral.num_heads = 32;
  mistral.num_kv_heads = 8;
  mistral.head_dim = 128;
  mistral.vocab_size = 32000;
  mistral.max_seq_len = 32768;
  mistral.rms_norm_eps = 1e-5f;
  mistral.rope_theta = 1000000.0f;
  mistral.shared_classifier = false;
  mistral.bos_token_id = 1;
  mistral.stop_token_ids = {2};
  p.push_back({mistral.name, mistral});
  ModelConfig linear = mistral;
  linear.name = "llama-2-linear-rope";
  linear.hidden_dim = 11008;
  linear.num_kv_heads = 32;
  linear.max_seq_len = 16384;
  linear.rope_theta = 10000.0f;
  linear.rope_scaling.type = RopeScaling::Type::kLinear;
  linear.rope_scaling.factor = 4.0f;
  p.push_back({linear.name, linear});
  return p;
}

// Uniform in [-bound, bound], or [center - half, center + half], from one shared generator.
void Fill(std::mt19937_64& rng, float center, float half, std::vector<float>& out) {
  std::uniform_real_distribution<float> u(center - half, center + half);
  for (float& v : out) v = u(rng);
}

}  // namespace

const std::vector<GgufPreset>& GgufPresets() {
  static const std::vector<GgufPreset> presets = MakeGgufPresets();
  return presets;
}

std::optional<GgufPreset> FindGgufPreset(const std::string& name) {
  for (const GgufPreset& p : GgufPresets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

ModelConfig SmallShape(const ModelConfig& full) {
  ModelConfig c = full;
  const int32_t ratio = full.num_heads / full.num_kv_heads;
  c.num_kv_heads = ratio >= 4 ? 1 : 2;
  c.num_heads = c.num_kv_heads * ratio;
  c.dim = c.num_heads * c.head_dim;
  // The FFN keeps its ratio to the hidden size, rounded to a multiple of 16.
  const double ffn_ratio = static_cast<double>(full.hidden_dim) / full.dim;
  c.hidden_dim =
      std::max<int32_t>(16, static_cast<int32_t>(std::lround(c.dim * ffn_ratio / 16)) * 16);
  c.num_layers = 2;
  c.vocab_size = 512;
  c.max_seq_len = std::min(full.max_seq_len, 4096);
  c.bos_token_id = 1;
  c.stop_token_ids = {2};
  return c;
}

GgufLlamaVocab SyntheticGgufLlamaVocab(int32_t vocab_size) {
  GgufLlamaVocab v;
  auto add = [&v](std::string piece, int32_t type) {
    v.pieces.push_back(std::move(piece));
    v.token_types.push_back(type);
    v.scores.push_back(type == 1 ? -static_cast<float>(v.pieces.size()) : 0.0f);
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 6);
  const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space
  std::vector<std::string> alphabet;
  for (char ch = '!'; ch <= '~'; ++ch) alphabet.emplace_back(1, ch);
  if (static_cast<int32_t>(v.pieces.size()) < vocab_size) add(kSpace, 1);
  // Strings over the alphabet by length (1, 2, ...), each bare and after "▁".
  std::vector<std::string> level = {""};
  while (static_cast<int32_t>(v.pieces.size()) < vocab_size) {
    std::vector<std::string> next;
    for (const std::string& prefix : level) {
      for (const std::string& ch : alphabet) {
        if (static_cast<int32_t>(v.pieces.size()) >= vocab_size) break;
        next.push_back(prefix + ch);
        add(next.back(), 1);
        if (static_cast<int32_t>(v.pieces.size()) < vocab_size) add(kSpace + next.back(), 1);
      }
    }
    level = std::move(next);
  }
  v.pieces.resize(vocab_size);
  v.scores.resize(vocab_size);
  v.token_types.resize(vocab_size);
  return v;
}

LlamaWeights RandomLlamaWeights(const ModelConfig& config, uint64_t seed) {
  const ModelConfig& c = config;
  LlamaWeights w;
  w.config = c;
  std::mt19937_64 rng(seed);
  const size_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, v = c.vocab_size;
  auto matrix = [&rng](size_t rows, size_t in) {
    std::vector<float> m(rows * in);
    Fill(rng, 0.0f, std::sqrt(3.0f / static_cast<float>(in)), m);
    return m;
  };
  auto norm = [&rng](size_t n) {
    std::vector<float> m(n);
    Fill(rng, 1.0f, 0.5f, m);
    return m;
  };
  // Logits = lm_head . (normed hidden of rms ~1): std ~ sqrt(dim) * sigma = 3.
  const float head_bound = 3.0f * std::sqrt(3.0f / static_cast<float>(d));
  w.token_embedding.resize(v * d);
  Fill(rng, 0.0f, head_bound, w.token_embedding);
  w.layers.resize(c.num_layers);
  for (LlamaLayerWeights& L : w.layers) {
    L.attn_norm = norm(d);
    L.wqkv = matrix(q + 2 * kv, d);
    if (c.attention_bias) {
      L.bqkv.resize(q + 2 * kv);
      Fill(rng, 0.0f, 0.5f, L.bqkv);
    }
    L.wo = matrix(d, q);
    L.ffn_norm = norm(d);
    L.w13 = matrix(2 * h, d);
    L.w2 = matrix(d, h);
  }
  w.final_norm = norm(d);
  if (!c.shared_classifier) {
    w.classifier.resize(v * d);
    Fill(rng, 0.0f, head_bound, w.classifier);
  }
  return w;
}

Status WriteRandomGgufModel(const GgufPreset& preset, bool small, GgufWeightType type,
                            uint64_t seed, const std::string& path) {
  const ModelConfig c = small ? SmallShape(preset.config) : preset.config;
  const LlamaWeights w = RandomLlamaWeights(c, seed);
  return WriteGgufModel(w, SyntheticGgufLlamaVocab(c.vocab_size), type, path);
}

}  // namespace tinyserve
