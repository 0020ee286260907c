// Sampling on the backend: what one sampled row needs, and the counter-based generator.
//
// The executor (models/) keeps, per live request, a SamplingSpec (its parameters, fixed for the
// request's life) and a PenaltyState (the tokens of its prompt and outputs, updated as each
// sampled token is accepted, never rebuilt per step). Each step it hands the backend one SampleRow
// per sampled row; Backend::SampleRows turns logits rows into tokens by the rules of
// kernels/cpu/cpu_sampler.h (vLLM V1's order), so only a few bytes per row leave the backend.
//
// The generator is the contract that makes seeded outputs independent of batching and
// preemption: request r's draw for output index i is SamplingUniform(seed_r, i), a pure function
// (Philox4x32-10 keyed by the seed, counter = the output index). The CUDA sampler computes the same
// function, bit for bit.
//
// Across backends (the CUDA backend's SampleRows against the CPU's): greedy tokens, ranks, top-n
// ids and every mask (allowed ids, token bitmasks, min_tokens stops, logit_bias, penalties, top_k)
// are identical. Seeded draws are identical except at the fp64 boundary cases: the CUDA kernels sum
// the fp64 weights exp(x - max) in another (fixed) order than the CPU's left-to-right loop, and
// CUDA's fp64 exp may differ from the host's by an ulp, so a token can differ only when u * total,
// a top_p cut (cumulative mass / total against 1 - top_p) or a min_p test (exp(x - max) against
// min_p) lies within a few fp64 ulps of a boundary. Raw logprobs agree to ~1e-6 (the log-sum-exp
// is summed in another order, then rounded to fp32).
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tinyserve {

// Philox4x32-10 (Salmon et al., SC'11; Random123's constants).
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// The uniform draw in [0, 1) (53 bits) for output `index` of a request seeded with `seed`.
double SamplingUniform(uint64_t seed, uint64_t index);

// One request's sampling parameters, as the engine validated them (engine/sampling_params.h).
struct SamplingSpec {
  float temperature = 1.0f;  // < 1e-5: greedy
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  // While the request has fewer than min_tokens outputs, these ids are masked: every id that
  // would stop it (its EOS ids, unless ignore_eos, and its stop token ids).
  int32_t min_tokens = 0;
  std::vector<int32_t> min_tokens_masked_ids;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (id, bias), ids in vocab
  std::vector<int32_t> allowed_token_ids;             // empty: every id
  int32_t num_logprobs = -1;                          // < 0: none; else the top-n to report

  bool is_greedy() const { return temperature < 1e-5f; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
};

// The token history the penalties read: which ids occur in the prompt or the outputs (repetition
// penalty) and how often each occurs in the outputs (frequency and presence penalties). Built
// once from prompt + outputs when the request is registered (also after a preemption's
// recompute, from the outputs it kept) and then extended one accepted token at a time.
class PenaltyState {
 public:
  void Reset(const std::vector<int32_t>& token_ids, int32_t num_prompt_tokens);
  void AddOutput(int32_t token);

  // Every id of the prompt and the outputs, once each, in first-occurrence order.
  const std::vector<int32_t>& distinct_tokens() const { return distinct_; }
  // (id, count) of every id among the outputs, in first-occurrence order.
  const std::vector<std::pair<int32_t, int32_t>>& output_counts() const { return counts_; }
  int32_t num_outputs() const { return num_outputs_; }

 private:
  std::unordered_map<int32_t, int32_t> seen_;  // id -> index into counts_ + 1 (0: not an output)
  std::vector<int32_t> distinct_;
  std::vector<std::pair<int32_t, int32_t>> counts_;
  int32_t num_outputs_ = 0;
};

// One sampled row: its request's spec and history, and the output index being sampled (the
// generator's counter; also decides whether min_tokens masks apply). The history is on the host
// (`penalties`, read by backends whose KeepsPenaltyHistory() is false) or in the backend's own
// memory (`penalty_slot`, Backend::SetPenaltyHistory; read by the others).
//
// `token_bitmask` (structured outputs, structured/grammar.h): null = none; else (vocab + 31) / 32
// words, token t allowed iff bit (t % 32) of word t / 32 is set. A token whose bit is 0 is masked
// exactly as a token outside allowed_token_ids is (both masks apply when both are given).
struct SampleRow {
  const SamplingSpec* spec = nullptr;
  const PenaltyState* penalties = nullptr;  // may be null when spec->has_penalties() is false
  uint64_t output_index = 0;
  int32_t penalty_slot = -1;  // >= 0 when spec->has_penalties() on a KeepsPenaltyHistory() backend
  const uint32_t* token_bitmask = nullptr;  // [(vocab + 31) / 32] or null
};

// True iff `bitmask` (SampleRow::token_bitmask layout) allows `token`; a null mask allows all.
inline bool BitmaskAllows(const uint32_t* bitmask, int32_t token) {
  return bitmask == nullptr || ((bitmask[token >> 5] >> (token & 31)) & 1u) != 0;
}

}  // namespace tinyserve
