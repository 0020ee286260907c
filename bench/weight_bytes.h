// The bytes of weights a decode step reads, for the benchmarks' memory floor: a matrix stored
// quantized (a GGUF file's Q8_0, Q4_K, ...) counts its blocks' bytes, an fp32 one 4 bytes per
// element.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ggml_quant.h"
#include "models/llama_weights.h"

namespace tinyserve {

// The bytes of one matrix of `cols` columns: its quantized parts' blocks, else `f`'s floats.
inline double MatrixBytes(const std::vector<float>& f, const QuantizedMatrix& q, int32_t cols) {
  if (q.empty()) return static_cast<double>(f.size()) * sizeof(float);
  double b = 0;
  for (const QuantPart& p : q.parts) b += static_cast<double>(QuantRowBytes(p.type, cols)) * p.rows;
  return b;
}

// Bytes of weights one decode step reads (every matrix and the LM head; the embedding is a lookup
// unless it is the LM head too). Norm weights and biases are left out (a few KB).
inline double DecodeStepWeightBytes(const LlamaWeights& w) {
  const ModelConfig& c = w.config;
  double b = c.shared_classifier ? MatrixBytes(w.token_embedding, w.q_token_embedding, c.dim)
                                 : MatrixBytes(w.classifier, w.q_classifier, c.dim);
  for (const LlamaLayerWeights& l : w.layers) {
    b += MatrixBytes(l.wqkv, l.q_wqkv, c.dim) + MatrixBytes(l.wo, l.q_wo, c.q_dim()) +
         MatrixBytes(l.w13, l.q_w13, c.dim) + MatrixBytes(l.w2, l.q_w2, c.hidden_dim);
  }
  return b;
}

}  // namespace tinyserve
