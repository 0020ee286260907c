// ModelConfig: the shape and hyper-parameters of a Llama-family decoder, whatever file it came
// from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace tinyserve {

// How RoPE frequencies are rescaled for long contexts (Hugging Face `rope_scaling`).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;  // linear and llama3
  // llama3 only.
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position_embeddings = 0;
};

struct ModelConfig {
  std::string name;        // e.g. "stories260K" (file stem), used as the default served name
  int32_t dim = 0;         // hidden size
  int32_t hidden_dim = 0;  // FFN intermediate size
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // dim / num_heads for llama2.c checkpoints
  int32_t vocab_size = 0;
  int32_t max_seq_len = 0;  // the model's context length
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kInterleaved;
  RopeScaling rope_scaling;
  // Per-pair divisors of the RoPE frequencies ([head_dim / 2]; GGUF's rope_freqs tensor), applied
  // after rope_scaling; empty = none.
  std::vector<float> rope_freq_factors;
  bool attention_bias = false;    // q/k/v projections have a bias (Qwen2)
  bool shared_classifier = true;  // lm_head == token embedding
  int32_t bos_token_id = 1;       // -1: none
  // Tokens that end generation. llama2.c models stop on BOS (1), as run.c does; EOS (2) does not.
  std::vector<int32_t> stop_token_ids;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  // Number of parameters actually used by the forward pass.
  int64_t num_parameters() const;
  // RoPE's inverse frequencies, one per rotated pair: [head_dim / 2] fp32, computed exactly as
  // Hugging Face's rope init functions do in float32 (default, linear, llama3), then divided by
  // rope_freq_factors. Without scaling, inv_freq[i] = 1 / theta^(2i / head_dim) (run.c's formula).
  std::vector<float> RopeInvFreq() const;
  // One line: "dim 64, hidden 172, 5 layers, 8 heads (4 kv), vocab 512, ctx 512".
  std::string Describe() const;
};

}  // namespace tinyserve
