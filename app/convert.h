// `tinyserve convert`: a llama2.c checkpoint (+ tokenizer.bin) to a Hugging Face directory
// (model.safetensors, config.json, tokenizer.json, tokenizer_config.json) or, --to gguf, a GGUF
// file (models/convert.h).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace tinyserve {

struct ConvertFlags {
  std::string model;
  std::string tokenizer;  // default: found beside the model
  std::string to = "hf";
  std::string dtype = "f32";
  std::string out;
};

CLI::App* AddConvertCommand(CLI::App& app, ConvertFlags& flags);
int RunConvert(const ConvertFlags& flags, const std::string& default_shared_dir);

}  // namespace tinyserve
