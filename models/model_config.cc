#include "models/model_config.h"

#include <cmath>

namespace tinyserve {

int64_t ModelConfig::num_parameters() const {
  const int64_t d = dim, h = hidden_dim, v = vocab_size, L = num_layers;
  const int64_t per_layer = 2 * d + d * (q_dim() + 2 * static_cast<int64_t>(kv_dim())) +
                            static_cast<int64_t>(q_dim()) * d + 3 * d * h;
  return v * d + L * per_layer + d + (shared_classifier ? 0 : v * d);
}

std::vector<float> ModelConfig::RopeInvFreq() const {
  const int32_t half = head_dim / 2;
  std::vector<float> inv_freq(half);
  for (int32_t i = 0; i < half; ++i) {
    // As run.c and HF's _compute_default_rope_parameters, in float.
    inv_freq[i] =
        1.0f / std::pow(rope_theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  const RopeScaling& s = rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) {
    for (float& f : inv_freq) f /= s.factor;
  } else if (s.type == RopeScaling::Type::kLlama3) {
    // HF's _compute_llama3_parameters, step by step in float32: long wavelengths are divided by
    // the factor, short ones kept, the band between interpolated smoothly.
    const float old_len = static_cast<float>(s.original_max_position_embeddings);
    const float low_freq_wavelen = old_len / s.low_freq_factor;
    const float high_freq_wavelen = old_len / s.high_freq_factor;
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (float& f : inv_freq) {
      const float wavelen = two_pi / f;
      if (wavelen > low_freq_wavelen) {
        f = f / s.factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const float smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0f - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  if (!rope_freq_factors.empty()) {
    for (int32_t i = 0; i < half && i < static_cast<int32_t>(rope_freq_factors.size()); ++i) {
      inv_freq[i] /= rope_freq_factors[i];
    }
  }
  return inv_freq;
}

std::string ModelConfig::Describe() const {
  return "dim " + std::to_string(dim) + ", hidden " + std::to_string(hidden_dim) + ", " +
         std::to_string(num_layers) + " layers, " + std::to_string(num_heads) + " heads (" +
         std::to_string(num_kv_heads) + " kv), head_dim " + std::to_string(head_dim) + ", vocab " +
         std::to_string(vocab_size) + ", ctx " + std::to_string(max_seq_len) +
         (shared_classifier ? ", shared classifier" : ", separate classifier") +
         (attention_bias ? ", qkv bias" : "") +
         (rope_scaling.type == RopeScaling::Type::kLinear
              ? ", rope linear x" + std::to_string(rope_scaling.factor)
          : rope_scaling.type == RopeScaling::Type::kLlama3
              ? ", rope llama3 x" + std::to_string(rope_scaling.factor)
              : "");
}

}  // namespace tinyserve
