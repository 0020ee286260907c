// llama2.c checkpoints ("legacy version 0", as run.c reads them; format in
// ../shared/models/README.md): a 7 x int32 header, then fp32 tensors in a fixed order.
//
// Loading validates the header (positive dimensions, heads dividing dim, kv heads dividing heads)
// and requires the file size to match what the header implies exactly. Every error is a Status
// whose message names the file and the problem; no input file can crash the loader.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "models/llama_weights.h"

namespace tinyserve {

// The raw header of a llama2.c checkpoint. vocab_size < 0 means a separate classifier follows.
struct Llama2cHeader {
  int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0,
          seq_len = 0;
};

// Returns the exact file size in bytes a checkpoint with `header` must have, or an error naming
// `path` if the header is nonsensical.
StatusOr<int64_t> Llama2cExpectedFileSize(const Llama2cHeader& header, const std::string& path);

// Loads a llama2.c checkpoint. The config's stop tokens are {1} (BOS), as run.c stops on BOS.
StatusOr<std::shared_ptr<const LlamaWeights>> LoadLlama2cCheckpoint(const std::string& path);

// Writes a llama2.c checkpoint with weights drawn uniformly from [-scale, scale] (norm weights 1)
// by a generator seeded with `seed`; the same (header, seed) always gives the same file.
// vocab_size < 0 in the header writes a separate classifier. Used for benchmark shapes.
Status WriteRandomLlama2cCheckpoint(const std::string& path, const Llama2cHeader& header,
                                    uint64_t seed, float scale = 0.05f);

}  // namespace tinyserve
