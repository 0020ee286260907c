#include "engine/sampling_params.h"

#include <cmath>
#include <string>

namespace tinyserve {

Status SamplingParams::Validate(int32_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return InvalidArgument("temperature must be >= 0, got " + std::to_string(temperature));
  }
  if (top_k < -1) return InvalidArgument("top_k must be -1, 0 (off) or >= 1");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return InvalidArgument("min_p must be in [0, 1]");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return InvalidArgument("presence_penalty must be in [-2, 2]");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return InvalidArgument("frequency_penalty must be in [-2, 2]");
  }
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) {
    return InvalidArgument("repetition_penalty must be > 0");
  }
  if (max_tokens < 1) return InvalidArgument("max_tokens must be >= 1");
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return InvalidArgument("min_tokens must be in [0, max_tokens]");
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument("stop_token_ids: " + std::to_string(id) + " is not in the vocabulary");
    }
  }
  for (int32_t id : allowed_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument("allowed_token_ids: " + std::to_string(id) +
                             " is not in the vocabulary");
    }
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument("logit_bias: " + std::to_string(id) + " is not in the vocabulary");
    }
    if (!std::isfinite(bias)) return InvalidArgument("logit_bias values must be finite");
  }
  if (logprobs && (*logprobs < 0 || *logprobs > 20)) {
    return InvalidArgument("logprobs must be in [0, 20]");
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > 20)) {
    return InvalidArgument("prompt_logprobs must be in [0, 20]");
  }
  return Status::Ok();
}

}  // namespace tinyserve
