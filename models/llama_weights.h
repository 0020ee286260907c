// LlamaWeights: a Llama-family model's fp32 weights in host memory, in the layout the forward pass
// uses (projections fused so one GEMM computes q|k|v and one computes gate|up).
//
// Every matrix is row-major [out_features, in_features]. The rows of wq and wk (and bqkv's q and
// k parts) are in the order config.rope_style pairs them: interleaved (llama2.c, GGUF) or half
// split (Hugging Face). Immutable after loading; share it with
// std::shared_ptr<const LlamaWeights> between runners.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "models/model_config.h"

namespace tinyserve {

// A matrix kept as a model file's quantized blocks (GGUF Q8_0, Q4_K, ...): its rows are the
// parts' rows stacked (q|k|v, gate|up), each part in its own type. Empty: the matrix is in the
// fp32 vector beside it. The blocks live in LlamaWeights::storage.
struct QuantizedMatrix {
  std::vector<QuantPart> parts;
  bool empty() const { return parts.empty(); }
  int64_t rows() const {
    int64_t r = 0;
    for (const QuantPart& p : parts) r += p.rows;
    return r;
  }
};

struct LlamaLayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> wqkv;       // [q_dim + 2 * kv_dim, dim]: rows of wq, then wk, then wv
  std::vector<float> bqkv;       // [q_dim + 2 * kv_dim]: q|k|v bias; empty = none (Qwen2 has one)
  std::vector<float> wo;         // [dim, q_dim]
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> w13;        // [2 * hidden_dim, dim]: rows of w1 (gate), then w3 (up)
  std::vector<float> w2;         // [dim, hidden_dim] (down)
  // When the file's weights are quantized, these hold them and the fp32 vectors above are empty.
  QuantizedMatrix q_wqkv, q_wo, q_w13, q_w2;
  // The fp8 KV cache's per-tensor scales (a checkpoint's self_attn.k_scale / v_scale; KvScales in
  // kernels/backend.h): 1.0 when the checkpoint has none. Other cache dtypes ignore them.
  float k_scale = 1.0f, v_scale = 1.0f;
};

struct LlamaWeights {
  ModelConfig config;
  std::vector<float> token_embedding;  // [vocab, dim]
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> final_norm;  // [dim]
  std::vector<float> classifier;  // [vocab, dim]; empty when config.shared_classifier
  // Quantized forms of token_embedding and classifier (their fp32 vectors are then empty).
  QuantizedMatrix q_token_embedding, q_classifier;
  // Keeps the memory the quantized matrices point into (the mapped GGUF file) alive.
  std::shared_ptr<const void> storage;

  bool is_quantized() const {
    if (!q_token_embedding.empty() || !q_classifier.empty()) return true;
    for (const LlamaLayerWeights& l : layers) {
      if (!l.q_wqkv.empty() || !l.q_wo.empty() || !l.q_w13.empty() || !l.q_w2.empty()) return true;
    }
    return false;
  }

  const float* lm_head() const {
    return config.shared_classifier ? token_embedding.data() : classifier.data();
  }
};

}  // namespace tinyserve
