#include "models/presets.h"

namespace tinyserve {

const std::vector<ModelPreset>& ModelPresets() {
  // Header fields: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
  static const std::vector<ModelPreset> presets = {
      {"stories260K", {64, 172, 5, 8, 4, 512, 512}},
      {"stories15M", {288, 768, 6, 6, 6, 32000, 256}},
      {"stories42M", {512, 1376, 8, 8, 8, 32000, 1024}},
      {"stories110M", {768, 2048, 12, 12, 12, 32000, 1024}},
  };
  return presets;
}

std::optional<ModelPreset> FindModelPreset(const std::string& name) {
  for (const ModelPreset& p : ModelPresets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

}  // namespace tinyserve
