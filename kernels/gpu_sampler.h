// GpuSampler: the engine's sampling rules (engine/sampler.h) on logits in CUDA device memory, one
// block per row. Compiles without nvcc; without the CUDA backend, Create() says so.
//
// Same rules and the same counter-based generator as the CPU Sampler: greedy argmax (first maximum
// wins) when temperature < 1e-5; else temperature, min_p, top_k (ties at the k-th value kept),
// top_p (vLLM's rule, the most likely token always kept), and one draw u from Philox4x32-10 keyed
// by (seed, output index), the token being the first in id order whose running sum of
// exp(x - max) exceeds u * total. Raw logprobs, rank and the top-n come from the raw logits.
// Penalties and the min_tokens stop masks are not done here: requests that use them stay on the
// CPU sampler. The fp64 running sums are formed in a different order than on the CPU, so a token
// can differ only when u * total lies within fp64 rounding of a boundary of the distribution.
//
// Not thread-safe; one per engine thread. Uses its own CUDA stream: REQUIRES the logits to be
// complete (the backend synchronized) when Sample() is called.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tinyserve {

// One row's parameters.
struct GpuSamplingRow {
  uint64_t seed = 0;
  uint64_t output_index = 0;  // the request's output tokens so far: the Philox counter
  float temperature = 1.0f;   // < 1e-5: greedy
  int32_t top_k = 0;          // <= 0 or >= vocab: off
  float top_p = 1.0f;         // 1: off
  float min_p = 0.0f;         // 0: off
  int32_t num_logprobs = -1;  // < 0: none; else the top-n (n <= kMaxGpuLogprobs) with the token's
};

constexpr int32_t kMaxGpuLogprobs = 20;

struct GpuSampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // raw log-probability of the token (when logprobs were asked)
  int32_t rank = 0;      // 1 + number of tokens with a strictly larger logit
  std::vector<std::pair<int32_t, float>> top;  // [n] (token, logprob), most likely first
};

class GpuSampler {
 public:
  // A sampler for rows of `vocab_size` logits, at most `max_rows` per call.
  static StatusOr<std::unique_ptr<GpuSampler>> Create(int32_t vocab_size, int32_t max_rows);
  virtual ~GpuSampler() = default;

  // Samples row i of `logits` (device memory, [rows.size(), vocab_size] fp32, row-major) with
  // rows[i]; fills (*out)[i].
  virtual Status Sample(const float* logits, const std::vector<GpuSamplingRow>& rows,
                        std::vector<GpuSampleResult>* out) = 0;
};

}  // namespace tinyserve
