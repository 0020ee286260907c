// SamplingFields: the request fields that /v1/completions and /v1/chat/completions share, with
// vLLM's names, defaults and range checks, and their conversion to the engine's SamplingParams.
//
//   field                        default  check (400, param = the field)
//   temperature                  1.0      >= 0
//   top_p                        1.0      (0, 1]
//   top_k                        0 (off)  -1 or 0 (off), or >= 1
//   min_p                        0.0      [0, 1]
//   presence_penalty             0.0      [-2, 2]
//   frequency_penalty            0.0      [-2, 2]
//   repetition_penalty           1.0      > 0
//   n                            1        [1, kMaxN]  (vLLM has no upper bound; this caps memory)
//   seed                         none     any 64-bit integer (negative ones wrap to uint64)
//   stop                         []       a string or an array of strings, none empty
//   stop_token_ids               []       ids in [0, vocab_size)
//   logit_bias                   {}       {"<token id>": number}: ids in [0, vocab_size) (all bad
//                                         ones named), numbers clamped to [-100, 100] (vLLM)
//   allowed_token_ids            null     a non-empty array of ids in [0, vocab_size): only these
//                                         can be sampled (vLLM)
//   include_stop_str_in_output   false
//   ignore_eos                   false
//   min_tokens                   0        >= 0 and <= max_tokens
//   skip_special_tokens          true     (special tokens decode to nothing either way)
//   priority                     0        any int32 (lower = more important)
//   stream                       false
//   stream_options               null     {include_usage, continuous_usage_stats}; only with stream
//   truncate_prompt_tokens       null     -1 or >= 1: keep the last k prompt tokens (vLLM's left
//                                         truncation; -1 = max_model_len); see TruncatePromptTokens
//   prompt_logprobs              null     vLLM's extension: top-n logprobs of every prompt token
//                                         but the first; [0, kMaxLogprobs], -1 = the vocabulary
//                                         (so over the cap unless it is tiny); > 0 not with stream
//   user                         ignored
//   response_format, structured_outputs, guided_json, guided_regex, guided_choice, guided_grammar,
//   guided_whitespace_pattern: one structured-output constraint (server/protocol/
//                                         structured_fields.h)
//   use_beam_search, best_of (> 1):  400, not supported here
// max_tokens and logprobs are spelled differently per endpoint; each parser fills them.
// Plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"
#include "server/protocol/api_error.h"
#include "server/protocol/structured_fields.h"

namespace tinyserve::protocol {

inline constexpr int32_t kMaxN = 128;
inline constexpr int32_t kMaxLogprobs = 20;

struct StreamOptions {
  bool include_usage = false;           // a last chunk with empty choices and the usage
  bool continuous_usage_stats = false;  // usage on every chunk
};

struct SamplingFields {
  std::optional<int32_t> max_tokens;  // nullopt: the rest of the context (max_model_len - prompt)
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int32_t n = 1;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (id, clamped bias), by id, each once
  std::vector<int32_t> allowed_token_ids;             // empty = every token
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  int32_t min_tokens = 0;
  bool skip_special_tokens = true;
  int32_t priority = 0;
  bool stream = false;
  std::optional<StreamOptions> stream_options;
  std::optional<int32_t> logprobs;  // top-n logprobs per generated token for the engine; [0, 20]
  std::optional<int32_t> prompt_logprobs;         // top-n per prompt token; [0, 20]
  std::optional<int32_t> truncate_prompt_tokens;  // -1 or >= 1
  std::optional<StructuredOutput> structured;     // the output's constraint; nullopt: none

  bool include_usage() const { return stream_options && stream_options->include_usage; }
};

// Reads the shared fields of `body` (REQUIRES: a JSON object) into *out; absent or null fields
// keep *out's values. Returns the first 400 found (type or range), naming the field.
std::optional<ApiError> ParseSamplingFields(const nlohmann::json& body, int32_t vocab_size,
                                            SamplingFields* out);

// Reads a max_tokens-like field `key` (absent or null: *out unchanged); 400 "`key` must be at
// least 1, got N." when < 1.
std::optional<ApiError> ParseMaxTokensField(const nlohmann::json& body, const std::string& key,
                                            std::optional<int32_t>* out);

// truncate_prompt_tokens applied to a prompt's ids: keeps the last k (k = max_model_len for -1);
// a k over max_model_len is a 400 with vLLM's message ("truncate_prompt_tokens value (k) is
// greater than max_model_len (N). Please, select a smaller truncation size."). Does nothing when
// the field is not set.
std::optional<ApiError> TruncatePromptTokens(const SamplingFields& fields, int32_t max_model_len,
                                             std::vector<int32_t>* ids);

// The engine's SamplingParams for one prompt of `num_prompt_tokens` tokens, after the context
// check against `max_model_len` (vLLM's messages):
//   max_tokens set:  P + M > N -> 400 "This model's maximum context length is N tokens. However,
//                    you requested P+M tokens (P in the messages, M in the completion). Please
//                    reduce the length of the messages or completion.", param "max_tokens"
//   max_tokens null: P >= N    -> 400 "This model's maximum context length is N tokens. However,
//                    your request has P input tokens. Please reduce the length of the input
//                    messages.", param "messages"; else max_tokens = N - P.
//   max_tokens 0 (completions' echo scoring only): checked as M = 0 (so min_tokens > 0 is a 400
//                    naming max_tokens=0); the engine is then asked for the 1 token the response
//                    leaves out, which needs P < N: P == N is a 400 saying so, param "prompt"
//                    (vLLM accepts it; our engine keeps a slot for one output token).
// REQUIRES: num_prompt_tokens >= 1, max_model_len >= 1.
ApiErrorOr<SamplingParams> ToSamplingParams(const SamplingFields& fields, int32_t num_prompt_tokens,
                                            int32_t max_model_len);

}  // namespace tinyserve::protocol
