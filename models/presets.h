// Benchmark model shapes (llama2.c's TinyStories family), for checkpoints with random weights.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/llama2c.h"

namespace tinyserve {

struct ModelPreset {
  std::string name;
  Llama2cHeader header;
};

// stories260K (dim 64, 5 layers, vocab 512), stories15M (dim 288, hidden 768, 6 layers, 6 heads),
// stories42M (dim 512, hidden 1376, 8 layers, 8 heads), stories110M (dim 768, hidden 2048,
// 12 layers, 12 heads); the last three with vocab 32000 as llama2.c's.
const std::vector<ModelPreset>& ModelPresets();
std::optional<ModelPreset> FindModelPreset(const std::string& name);

}  // namespace tinyserve
