// `tinyserve gen-model`: writes a model with seeded random weights in a benchmark shape: a llama2.c
// checkpoint (stories* presets, --out FILE), a Hugging Face directory (llama-3.2-1b,
// qwen2.5-0.5b, tinyllama-1.1b, smollm-135m; --out DIR, --dtype), or with --format gguf a GGUF
// file (those four, mistral-7b and llama-2-linear-rope; --small for the test-sized shape).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace tinyserve {

struct GenModelFlags {
  std::string preset = "stories15M";
  std::string dtype = "bf16";   // HF and GGUF presets only
  std::string format = "auto";  // auto (by preset) | gguf
  bool small = false;           // GGUF presets: the test-sized shape (models/gguf_presets.h)
  uint64_t seed = 0;
  std::string out;
};

CLI::App* AddGenModelCommand(CLI::App& app, GenModelFlags& flags);
int RunGenModel(const GenModelFlags& flags);

}  // namespace tinyserve
