// CpuSampler: turns one logits row into the next token of a request (vLLM semantics, DESIGN §3),
// on the host. Backend::SampleRows runs it on the CPU backend (in place); it is the CPU twin of the
// CUDA backend's sampling kernels (kernels/cuda/sampling.cu), which follow these rules on the
// device.
//
// Order: raw logprobs (log-softmax of the raw logits) when asked; allowed_token_ids masks every
// other token, and the row's token_bitmask (when given) every token whose bit is 0; min_tokens
// masks EOS and the stop token ids (not in a step where that would mask every token left);
// logit_bias is added; repetition (prompt + outputs), frequency and presence (outputs) penalties;
// greedy argmax (first maximum wins) when temperature < 1e-5; else temperature, min_p, top_k
// (ties at the k-th value kept), top_p (smallest set reaching top_p, the most likely always kept),
// and one draw u in [0, 1) from Philox4x32-10 keyed by the request's seed with counter = the output
// index. The token is the first, in token-id order, whose running sum of exp(logit - max) (fp64)
// exceeds u * total. Every random choice is a pure function of (seed, output index, logits), so
// seeded outputs do not depend on batching or preemption, and a CUDA kernel can reproduce them.
//
// If the processing leaves every token at -inf (a penalty overflowing every allowed logit), the
// token is the raw argmax among the allowed ids (all ids when none are given) that the bitmask
// allows (all of them when the bitmask allows none of those).
//
// Every reduction (argmax, sums, sorts) runs in one fixed order over the row, so a row's token
// depends on nothing but the row, its spec and history, and the output index.
//
// A CpuSampler holds scratch buffers: one per engine thread; not thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/token_logprobs.h"
#include "kernels/sampling.h"

namespace tinyserve {

class CpuSampler {
 public:
  explicit CpuSampler(int32_t vocab_size);

  int32_t vocab_size() const { return vocab_size_; }

  // Returns the next token of `row`'s request from `logits`, [vocab_size] fp32. Fills *logprobs
  // iff row.spec->num_logprobs >= 0 (then REQUIRES: non-null). REQUIRES: row.penalties non-null
  // when row.spec->has_penalties().
  int32_t Sample(const SampleRow& row, const float* logits, TokenLogprobs* logprobs);

  // The raw logprobs of `token` and the top-`n` alternatives (ties: lower id first) from
  // `logits`, [vocab_size] fp32: what Sample() reports, also used for prompt logprobs.
  void FillLogprobs(const float* logits, int32_t token, int32_t n, TokenLogprobs* out);

 private:
  void ApplyPenalties(const SamplingSpec& sp, const PenaltyState& history);
  // Sets the min_tokens-masked entries of `x` (EOS unless ignore_eos, stop ids) to -inf, unless
  // that leaves no finite entry: then `x` is left as it was.
  void MaskStops(const SamplingSpec& sp, float* x);
  // The token when processing left none: the raw argmax among the allowed ids (or all).
  int32_t RawFallback(const SampleRow& row, const float* logits) const;

  const int32_t vocab_size_;
  std::vector<float> x_;                           // [vocab] processed logits
  std::vector<int32_t> order_;                     // scratch indices
  std::vector<float> values_;                      // scratch values
  std::vector<double> weights_;                    // scratch exp(logit - max)
  std::vector<std::pair<int32_t, float>> masked_;  // MaskStops' overwritten entries
};

// Tests only: the sampler's argmax (the first index of the largest of x[0, n); ties to the lower
// index; NaNs never win, and index 0 is kept when x[0] is a NaN), and which form it takes:
// "best" (the default), "avx512", "avx2" or "portable" (the scalar loop, its definition); false,
// and nothing changed, where this CPU lacks it. Not thread-safe: call it while nothing samples.
int32_t CpuArgmaxForTesting(const float* x, int32_t n);
bool SetCpuArgmaxIsaForTesting(const char* isa);

}  // namespace tinyserve
