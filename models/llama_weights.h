// LlamaWeights: a Llama-family model's fp32 weights in host memory, in the layout the forward pass
// uses (projections fused so one GEMM computes q|k|v and one computes gate|up).
//
// Every matrix is row-major [out_features, in_features]. The rows of wq and wk (and bqkv's q and
// k parts) are in the order config.rope_style pairs them: interleaved (llama2.c, GGUF) or half
// split (Hugging Face). Immutable after loading; share it with
// std::shared_ptr<const LlamaWeights> between runners.
#pragma once

#include <cstdint>
#include <vector>

#include "models/model_config.h"

namespace tinyserve {

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> wqkv;       // [q_dim + 2 * kv_dim, dim]: rows of wq, then wk, then wv
  std::vector<float> bqkv;       // [q_dim + 2 * kv_dim]: q|k|v bias; empty = none (Qwen2 has one)
  std::vector<float> wo;         // [dim, q_dim]
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> w13;        // [2 * hidden_dim, dim]: rows of w1 (gate), then w3 (up)
  std::vector<float> w2;         // [dim, hidden_dim] (down)
};

struct LlamaWeights {
  ModelConfig config;
  std::vector<float> token_embedding;  // [vocab, dim]
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> final_norm;  // [dim]
  std::vector<float> classifier;  // [vocab, dim]; empty when config.shared_classifier

  const float* lm_head() const {
    return config.shared_classifier ? token_embedding.data() : classifier.data();
  }
};

}  // namespace tinyserve
