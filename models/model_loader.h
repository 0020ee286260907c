// Model resolution and loading: which model file and tokenizer to load, and loading them.
//
// Order: --model PATH, else $TINYSERVE_MODEL, else the default stories260K model in the shared
// data folder, else an error that says how to get a model. The tokenizer is --tokenizer PATH, else
// found beside the model: tok<vocab_size>.bin (llama2.c's naming), then tokenizer.bin, taking the
// first that loads with the model's vocabulary size.
#pragma once

#include <memory>
#include <string>

#include "engine/status.h"
#include "models/llama_weights.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

struct ModelSource {
  std::string model_path;      // "" = not given
  std::string tokenizer_path;  // "" = find beside the model
};

struct LoadedModel {
  std::string model_path;
  std::string tokenizer_path;
  std::shared_ptr<const LlamaWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  // The chat template the model's files name (HfTokenizerFiles::chat_template_name); "" for
  // none (llama2.c models): serve then uses --chat-template, or "plain".
  std::string chat_template_name;
};

// `default_shared_dir` is where ../shared was at build time; the default model is looked up there
// and in ../shared relative to the working directory.
StatusOr<LoadedModel> ResolveAndLoadModel(const ModelSource& source,
                                          const std::string& default_shared_dir);

}  // namespace tinyserve
