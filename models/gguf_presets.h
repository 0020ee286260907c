// GGUF files with seeded random weights in the shapes of real models (`tinyserve gen-model
// --format gguf`), so every architecture path (GQA ratios, q/k/v bias, tied and untied
// embeddings, RoPE theta, linear and Llama-3 RoPE scaling) has a GGUF file to test with, and
// llama.cpp can be run on the same file (tests/oracle).
//
// Each preset has its full published shape and a small one (`small`): the same head_dim, GQA
// ratio, bias, tying, RoPE parameters and norm epsilon, with 2 layers, the KV heads cut to 1 or 2
// and a 512-token vocabulary. The vocabulary is synthetic, a SentencePiece-style ("llama")
// GGUF vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then printable pieces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/gguf_model.h"
#include "models/model_config.h"
#include "models/tensor_dtype.h"

namespace tinyserve {

struct GgufPreset {
  std::string name;    // "llama-3.2-1b"
  ModelConfig config;  // full shape, rope_style kInterleaved (GGUF's)
};

// The HF presets' shapes (llama-3.2-1b: Llama-3 RoPE scaling, tied; qwen2.5-0.5b: q/k/v bias;
// tinyllama-1.1b: untied; smollm-135m) plus mistral-7b (Mistral-7B-v0.2: GQA 4, head_dim 128,
// theta 1e6, untied) and llama-2-linear-rope (Llama-2 shape, MHA, linear RoPE scaling x4).
const std::vector<GgufPreset>& GgufPresets();
std::optional<GgufPreset> FindGgufPreset(const std::string& name);

// The test-sized shape of `full` (see the file comment).
ModelConfig SmallShape(const ModelConfig& full);

// A synthetic "llama" vocabulary of `vocab_size` >= 259 tokens: 0 <unk>, 1 <s>, 2 </s>, 3..258
// <0x00>..<0xFF>, then single printable ASCII characters, "▁" + character, and two-character
// pieces, each with a distinct score (longer pieces score higher, so they merge first).
GgufLlamaVocab SyntheticGgufLlamaVocab(int32_t vocab_size);

// Random weights for `config` from a generator seeded with `seed`: matrices uniform with unit
// output variance (bound sqrt(3 / in)), the embedding and classifier scaled so that logits have a
// standard deviation near 3 (peaked next-token distributions, so greedy continuations are well
// defined), norm weights uniform in [0.5, 1.5], biases in [-0.5, 0.5]. Same arguments, same
// weights.
LlamaWeights RandomLlamaWeights(const ModelConfig& config, uint64_t seed);

// Writes the preset (its small shape when `small`) as a GGUF file, matrices as `type` says
// (WriteGgufModel). Same arguments, same bytes.
Status WriteRandomGgufModel(const GgufPreset& preset, bool small, GgufWeightType type,
                            uint64_t seed, const std::string& path);

}  // namespace tinyserve
