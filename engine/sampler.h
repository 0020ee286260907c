// Sampler: turns one logits row into the next token of a request (vLLM semantics, DESIGN §3).
//
// Order: raw logprobs (log-softmax of the raw logits) when asked; allowed_token_ids masks every
// other token; min_tokens masks EOS and the stop token ids (not in a step where that would mask
// every token left); logit_bias is added; repetition (prompt + outputs), frequency and presence
// (outputs) penalties;
// greedy argmax (first maximum wins) when temperature < 1e-5; else temperature, min_p, top_k
// (ties at the k-th value kept), top_p (smallest set reaching top_p, the most likely always kept),
// and one draw u in [0, 1) from Philox4x32-10 keyed by the request's seed with counter = the output
// index. The token is the first, in token-id order, whose running sum of exp(logit - max) (fp64)
// exceeds u * total. Every random choice is a pure function of (seed, output index, logits), so
// seeded outputs do not depend on batching or preemption, and a CUDA kernel can reproduce them.
//
// If the processing leaves every token at -inf (a penalty overflowing every allowed logit), the
// token is the raw argmax among the allowed ids (all ids when none are given).
//
// A Sampler holds scratch buffers: one per engine thread; not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace tinyserve {

struct TokenLogprobs {
  int32_t token_id = 0;                        // the sampled token
  float logprob = 0.0f;                        // its raw log-probability
  int32_t rank = 0;                            // 1 + number of tokens with a strictly larger logit
  std::vector<std::pair<int32_t, float>> top;  // [n] (token, logprob), most likely first
};

// Philox4x32-10 (Salmon et al., SC'11; Random123's constants).
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// The uniform draw in [0, 1) (53 bits) for output `index` of a request seeded with `seed`.
double SamplingUniform(uint64_t seed, uint64_t index);

class Sampler {
 public:
  explicit Sampler(int32_t vocab_size);

  int32_t vocab_size() const { return vocab_size_; }

  // Returns the next token of `req` (its output index is req.num_output_tokens()) from `logits`,
  // [vocab_size] fp32. Fills *logprobs iff req.sampling.logprobs is set (then REQUIRES: non-null).
  int32_t Sample(const Request& req, const float* logits, TokenLogprobs* logprobs);

  // The raw logprobs of `token` and the top-`n` alternatives (ties: lower id first) from
  // `logits`, [vocab_size] fp32: what Sample() reports, also used for prompt logprobs.
  void FillLogprobs(const float* logits, int32_t token, int32_t n, TokenLogprobs* out);

 private:
  void ApplyPenalties(const Request& req);
  // Sets the EOS (unless ignore_eos) and stop-id entries of `x` to -inf, unless that leaves no
  // finite entry: then `x` is left as it was.
  void MaskStops(const Request& req, float* x);
  // The token when processing left none: the raw argmax among the allowed ids (or all).
  int32_t RawFallback(const Request& req, const float* logits) const;

  const int32_t vocab_size_;
  std::vector<float> x_;         // [vocab] processed logits
  std::vector<int32_t> counts_;  // [vocab] output-token counts (zero between calls)
  std::vector<uint8_t> seen_;    // [vocab] prompt/output membership (zero between calls)
  std::vector<int32_t> touched_;
  std::vector<int32_t> order_;                     // scratch indices
  std::vector<float> values_;                      // scratch values
  std::vector<double> weights_;                    // scratch exp(logit - max)
  std::vector<std::pair<int32_t, float>> masked_;  // MaskStops' overwritten entries
};

}  // namespace tinyserve
