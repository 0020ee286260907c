// SamplingParams: how one request turns logits into tokens, and when it stops (vLLM semantics).
//
// Processing order of a logits row (Sampler): raw logprobs are taken first (log-softmax of the
// raw model logits, vLLM's default "raw_logprobs"); then allowed_token_ids masks every other
// token, and a structured-output request's grammar mask (EngineRequest::grammar) masks every token
// the grammar does not allow next; then min_tokens masks EOS and stop token ids (unless that would
// mask every token left: then that step goes unmasked); then logit_bias is added; then repetition /
// frequency / presence penalties (vLLM V1's order); then greedy argmax if temperature < 1e-5, else
// temperature, min_p, top_k, top_p and a draw from the request's counter-based generator keyed by
// (seed, output index). A plain value; Validate() before use.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tinyserve {

struct SamplingParams {
  float temperature = 1.0f;  // < 1e-5 means greedy
  int32_t top_k = 0;         // keep the k most likely tokens; 0 or -1 = off
  float top_p = 1.0f;        // keep the smallest set whose probability reaches top_p; (0, 1]
  float min_p = 0.0f;        // drop tokens with prob < min_p * max prob; [0, 1]

  float presence_penalty = 0.0f;    // [-2, 2], on output tokens
  float frequency_penalty = 0.0f;   // [-2, 2], on output tokens
  float repetition_penalty = 1.0f;  // > 0, on prompt and output tokens

  std::optional<uint64_t> seed;  // unseeded requests get a seed drawn at submit

  int32_t max_tokens = 16;              // >= 1
  int32_t min_tokens = 0;               // EOS and stop ids are masked until this many outputs
  std::vector<int32_t> stop_token_ids;  // finish with reason stop when sampled
  bool ignore_eos = false;
  // (token id, bias) pairs added to the logits (OpenAI's logit_bias; the frontend clamps to
  // [-100, 100]); ids in [0, vocab_size), biases finite. A repeated id adds twice.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // When not empty, only these ids can be sampled (vLLM's allowed_token_ids); ids in vocab.
  std::vector<int32_t> allowed_token_ids;

  std::optional<int32_t> logprobs;  // top-n logprobs per generated token, n in [0, 20]
  // Top-n logprobs (n in [0, 20]) of every prompt token after the first: the raw log-softmax of
  // the logits at position i - 1, evaluated at prompt token i (vLLM's prompt_logprobs). Such a
  // request reuses no prefix-cache blocks for the positions still to deliver (every position is
  // computed once), and RequestOutput::prompt_logprobs carries them before the first token.
  std::optional<int32_t> prompt_logprobs;

  bool is_greedy() const { return temperature < 1e-5f; }

  // Returns OK iff every field is in range for a model with `vocab_size` tokens.
  Status Validate(int32_t vocab_size) const;
};

}  // namespace tinyserve
