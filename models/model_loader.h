// Model resolution and loading: which model to load, and loading it with its tokenizer.
//
// Order: --model PATH, else $TINYSERVE_MODEL, else the default stories260K model in the shared
// data folder, else an error that says how to get a model. PATH may be:
//   - a Hugging Face directory (config.json, safetensors, tokenizer.json; hf_model.h and
//     models/tokenizer/hf_tokenizer.h): BOS, add_bos and the chat template come from its tokenizer
//     files; the stop ids are config.json's eos_token_id(s), then the tokenizer files' EOS ids;
//   - a GGUF file (gguf_model.h): tokenizer, BOS/EOS and chat template from its metadata;
//   - a llama2.c checkpoint: the tokenizer is --tokenizer PATH, else found beside the model:
//     tok<vocab_size>.bin (llama2.c's naming), then tokenizer.bin, taking the first that loads with
//     the model's vocabulary size; BOS 1 added, stop on BOS, no chat template.
// --tokenizer is only for llama2.c checkpoints (the others carry their own).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "models/llama_weights.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

struct ModelSource {
  std::string model_path;      // "" = not given
  std::string tokenizer_path;  // "" = find beside the model
};

enum class ModelFormat { kLlama2c, kHfDirectory, kGguf };

struct LoadedModel {
  std::string model_path;
  std::string tokenizer_path;
  ModelFormat format = ModelFormat::kLlama2c;
  // config.bos_token_id and config.stop_token_ids say the model's BOS and stop ids.
  std::shared_ptr<const LlamaWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  bool add_bos = true;        // prepend BOS to prompts (== tokenizer->add_bos_by_default())
  std::string chat_template;  // the model's chat template family ("chatml", ...); "" = none
  // Why the model's chat template was not recognised (names the file), or "" (see
  // ChooseChatTemplate: an error unless --chat-template overrides it).
  std::string chat_template_error;
};

// `default_shared_dir` is where ../shared was at build time; the default model is looked up there
// and in ../shared relative to the working directory.
StatusOr<LoadedModel> ResolveAndLoadModel(const ModelSource& source,
                                          const std::string& default_shared_dir);

// The weights alone of a Hugging Face directory, a GGUF file or a llama2.c checkpoint (chosen as
// ResolveAndLoadModel chooses), for tools that need no tokenizer (benchmarks).
StatusOr<std::shared_ptr<const LlamaWeights>> LoadModelWeights(const std::string& path);

}  // namespace tinyserve
