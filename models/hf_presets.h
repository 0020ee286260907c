// Benchmark model shapes of real Hugging Face models (their published config.json), written as HF
// directories with seeded random weights and a synthetic tokenizer of the right vocabulary size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/model_config.h"
#include "models/tensor_dtype.h"
#include "models/tokenizer/hf_tokenizer.h"

namespace tinyserve {

struct HfPreset {
  std::string name;          // "llama-3.2-1b"
  std::string architecture;  // config.json's
  ModelConfig config;        // rope_style kNeox
  HfTokenizerStyle tokenizer;
};

// llama-3.2-1b (meta-llama/Llama-3.2-1B), qwen2.5-0.5b (Qwen/Qwen2.5-0.5B), tinyllama-1.1b
// (TinyLlama/TinyLlama-1.1B-Chat-v1.0), smollm-135m (HuggingFaceTB/SmolLM-135M).
const std::vector<HfPreset>& HfPresets();
std::optional<HfPreset> FindHfPreset(const std::string& name);

// Writes `dir` (created if missing): config.json, model.safetensors in `dtype` with weights drawn
// uniformly from [-0.05, 0.05] (norm weights 1) by a generator seeded with `seed`, streamed so the
// model is never whole in memory, and the preset's synthetic tokenizer files. Same arguments, same
// bytes.
Status WriteRandomHfModel(const HfPreset& preset, TensorDtype dtype, uint64_t seed,
                          const std::string& dir);

}  // namespace tinyserve
