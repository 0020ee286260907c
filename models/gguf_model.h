// GGUF model files (llama.cpp's format) of the llama architecture: loading the weights (F32, F16,
// BF16 tensors) and the tokenizer from the file's metadata, and writing such files (convert).
//
// Metadata read: general.architecture (must be "llama"), llama.embedding_length, block_count,
// feed_forward_length, attention.head_count, attention.head_count_kv, attention.key_length (head
// dim; default embedding_length / head_count), attention.layer_norm_rms_epsilon, rope.freq_base,
// rope.dimension_count (must be the head dim), rope.scaling.type ("none" or "linear") with
// rope.scaling.factor, context_length; tokenizer.* as gguf_tokenizer.h says;
// tokenizer.chat_template. Tensors: token_embd.weight, output_norm.weight, output.weight (absent:
// tied to the embedding), rope_freqs.weight (optional: Llama 3.1 frequency divisors), and per layer
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
// ffn_down}.weight, plus blk.N.attn_{q,k,v}.bias when present. ggml lists dims innermost first: a
// [out, in] matrix is dims {in, out}. llama.cpp's converter stores q/k rows in the interleaved RoPE
// order (it undoes HF's permutation), so rope_style is kInterleaved. Missing, extra or mis-shaped
// tensors are named in one error; other tensor types (quantized) are refused naming the tensor and
// its type.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/llama_weights.h"
#include "models/tensor_dtype.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

struct GgufModel {
  std::shared_ptr<const LlamaWeights> weights;  // config.bos/stop ids from tokenizer.ggml.*
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // tokenizer.chat_template (Jinja), "" if absent
};

// Returns true iff `path` starts with the GGUF magic.
bool IsGgufFile(const std::string& path);

StatusOr<GgufModel> LoadGgufModel(const std::string& path);

// The vocabulary a GGUF file of tokenizer model "llama" carries: pieces (with ' ', written as
// U+2581), scores and token types (1 normal, 2 unknown, 3 control, 6 byte).
struct GgufLlamaVocab {
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> token_types;
  int32_t bos_id = 1, eos_id = 2, unk_id = 0;
  bool add_bos = true;
};

// Reads a llama2.c tokenizer.bin of `vocab_size` tokens as a GGUF "llama" vocabulary: <unk> 0
// (unknown), <s> 1 and </s> 2 (control), <0xHH> bytes 3..258 (byte), the rest normal.
StatusOr<GgufLlamaVocab> Llama2cVocabForGguf(const std::string& path, int32_t vocab_size);

// What `convert --to gguf --dtype` writes the matrices as. f32, f16, bf16: every matrix in that
// type. q8_0, q4_0: llama-quantize's Q8_0 / Q4_0 (the output matrix, or a tied embedding, in Q6_K
// for q4_0). q4_k, q5_k, q6_k: every matrix in that type (llama-quantize --pure). q4_k_m:
// llama-quantize's Q4_K_M mix: Q4_K, with Q6_K for the output matrix (or tied embedding), and for
// attn_v and ffn_down in the layers use_more_bits picks (the first and last eighth, and every
// third between). The quantized types use ggml's reference rounding (quantize_row_*_ref, what
// llama-quantize does without an importance matrix); a matrix whose rows are not a whole number
// of blocks falls back as llama-quantize's (q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, then f16).
enum class GgufWeightType { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K, kQ4_K_M };
// The type `name` spells ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k",
// "q4_k_m"; case-insensitive), or nullopt.
std::optional<GgufWeightType> ParseGgufWeightType(std::string_view name);

// Writes `weights` and `vocab` as a GGUF v3 file of the llama architecture, matrices as `type`
// says and 1-D tensors (norm weights, biases, rope_freqs) in F32, as llama.cpp expects.
// Half-split q/k rows (HF) are permuted back to the interleaved order llama.cpp uses. Llama-3 RoPE
// scaling is written as llama.cpp's converter does: a rope_freqs.weight tensor of divisors.
// REQUIRES: fp32 weights (not loaded quantized).
Status WriteGgufModel(const LlamaWeights& weights, const GgufLlamaVocab& vocab, GgufWeightType type,
                      const std::string& path);
// The same with every matrix in `dtype`.
Status WriteGgufModel(const LlamaWeights& weights, const GgufLlamaVocab& vocab, TensorDtype dtype,
                      const std::string& path);

}  // namespace tinyserve
