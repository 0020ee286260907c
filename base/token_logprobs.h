// TokenLogprobs: one token's raw log-probability, rank and top alternatives, as the backend's
// sampler reports them and the engine's streams and the server's JSON carry them. A leaf type:
// kernels (which compute it) and engine (which delivers it) both include it, neither includes the
// other.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace tinyserve {

struct TokenLogprobs {
  int32_t token_id = 0;                        // the sampled (or scored) token
  float logprob = 0.0f;                        // its raw log-probability
  int32_t rank = 0;                            // 1 + number of tokens with a strictly larger logit
  std::vector<std::pair<int32_t, float>> top;  // [n] (token, logprob), most likely first
};

}  // namespace tinyserve
