// The llama2.c checkpoint loader on arbitrary files: every input loads or gives an error naming
// the file; a checkpoint that loads has tensors of the sizes its config implies.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "models/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  const std::string& path =
      fuzz::WriteScratchFile(std::string_view(reinterpret_cast<const char*>(data), size));
  StatusOr<std::shared_ptr<const LlamaWeights>> weights = LoadLlama2cCheckpoint(path);
  if (!weights.ok()) {
    FUZZ_CHECK(weights.status().message().find(path) != std::string::npos);
    return 0;
  }
  const ModelConfig& c = (*weights)->config;
  FUZZ_CHECK(c.dim > 0 && c.num_layers > 0 && c.vocab_size > 0);
  FUZZ_CHECK((*weights)->token_embedding.size() == static_cast<size_t>(c.vocab_size) * c.dim);
  FUZZ_CHECK((*weights)->layers.size() == static_cast<size_t>(c.num_layers));
  FUZZ_CHECK((*weights)->final_norm.size() == static_cast<size_t>(c.dim));
  return 0;
}
