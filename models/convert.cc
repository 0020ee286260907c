#include "models/convert.h"

#include "models/gguf_model.h"
#include "models/hf_model.h"
#include "models/llama2c.h"
#include "models/tokenizer/hf_tokenizer.h"

namespace tinyserve {

Status ConvertLlama2cToHf(const std::string& model_path, const std::string& tokenizer_path,
                          TensorDtype dtype, const std::string& out_dir) {
  StatusOr<std::shared_ptr<const LlamaWeights>> w = LoadLlama2cCheckpoint(model_path);
  if (!w.ok()) return w.status();
  TS_RETURN_IF_ERROR(WriteHfModel(**w, "LlamaForCausalLM", dtype, out_dir));
  return WriteHfTokenizerFromLlama2c(tokenizer_path, (*w)->config.vocab_size, out_dir);
}

Status ConvertLlama2cToGguf(const std::string& model_path, const std::string& tokenizer_path,
                            TensorDtype dtype, const std::string& out_path) {
  StatusOr<std::shared_ptr<const LlamaWeights>> w = LoadLlama2cCheckpoint(model_path);
  if (!w.ok()) return w.status();
  StatusOr<GgufLlamaVocab> vocab = Llama2cVocabForGguf(tokenizer_path, (*w)->config.vocab_size);
  if (!vocab.ok()) return vocab.status();
  return WriteGgufModel(**w, *vocab, dtype, out_path);
}

Status ConvertLlama2cToGguf(const std::string& model_path, const std::string& tokenizer_path,
                            GgufWeightType type, const std::string& out_path) {
  StatusOr<std::shared_ptr<const LlamaWeights>> w = LoadLlama2cCheckpoint(model_path);
  if (!w.ok()) return w.status();
  StatusOr<GgufLlamaVocab> vocab = Llama2cVocabForGguf(tokenizer_path, (*w)->config.vocab_size);
  if (!vocab.ok()) return vocab.status();
  return WriteGgufModel(**w, *vocab, type, out_path);
}

}  // namespace tinyserve
