#include "models/model_config.h"

namespace tinyserve {

int64_t ModelConfig::num_parameters() const {
  const int64_t d = dim, h = hidden_dim, v = vocab_size, L = num_layers;
  const int64_t per_layer = 2 * d + d * (q_dim() + 2 * static_cast<int64_t>(kv_dim())) +
                            static_cast<int64_t>(q_dim()) * d + 3 * d * h;
  return v * d + L * per_layer + d + (shared_classifier ? 0 : v * d);
}

std::string ModelConfig::Describe() const {
  return "dim " + std::to_string(dim) + ", hidden " + std::to_string(hidden_dim) + ", " +
         std::to_string(num_layers) + " layers, " + std::to_string(num_heads) + " heads (" +
         std::to_string(num_kv_heads) + " kv), head_dim " + std::to_string(head_dim) + ", vocab " +
         std::to_string(vocab_size) + ", ctx " + std::to_string(max_seq_len) +
         (shared_classifier ? ", shared classifier" : ", separate classifier");
}

}  // namespace tinyserve
