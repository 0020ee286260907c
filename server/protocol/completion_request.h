// CompletionRequest: a validated POST /v1/completions body (vLLM's CompletionRequest).
//
// Fields beyond SamplingFields (sampling_fields.h): model (optional string; the server checks it
// against the served names), prompt (required), max_tokens (default 16; null = the rest of the
// context), logprobs (null, or 0..20 top alternatives per token), echo (false), suffix (must be
// null: 400 "suffix is not currently supported", as vLLM). Unknown fields are ignored. As in vLLM,
// max_tokens 0 is accepted only with echo (pure scoring: the response has the prompt and, with
// logprobs, its prompt logprobs, and nothing generated: echo_only, with sampling.max_tokens 0;
// ToSamplingParams asks the engine for 1 token that the response leaves out). The prompt may be:
//   "text"                 one text prompt
//   ["a", "b"]             one text prompt per string
//   [1, 2, 3]              one prompt of token ids
//   [[1, 2], [3]]          one prompt per id array
// Every prompt must be non-empty and every id in [0, vocab_size) (else 400, param "prompt").
// The response has one choice per (prompt, sample): index = prompt_index * n + j.
// Plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/tokenizer.h"
#include "server/protocol/api_error.h"
#include "server/protocol/sampling_fields.h"

namespace tinyserve::protocol {

inline constexpr int32_t kDefaultCompletionMaxTokens = 16;

// One prompt: text (to be tokenized) or token ids (used as given).
struct CompletionPrompt {
  bool is_text = true;
  std::string text;                // is_text
  std::vector<int32_t> token_ids;  // !is_text; non-empty

  friend bool operator==(const CompletionPrompt&, const CompletionPrompt&) = default;
};

struct CompletionRequest {
  std::optional<std::string> model;
  std::vector<CompletionPrompt> prompts;  // non-empty
  bool echo = false;
  bool echo_only = false;   // echo with max_tokens 0 (then sampling.max_tokens == 0)
  SamplingFields sampling;  // sampling.max_tokens defaults to 16; sampling.logprobs = logprobs
};

// Validates `body` (any JSON value). Returns the request or the first 400 found.
ApiErrorOr<CompletionRequest> ParseCompletionRequest(const nlohmann::json& body,
                                                     int32_t vocab_size);
// Same from the raw body text (ParseJsonBody first).
ApiErrorOr<CompletionRequest> ParseCompletionRequestBody(std::string_view body, int32_t vocab_size);

// The prompt's token ids: text through tokenizer.Encode(text, tokenizer.add_bos_by_default())
// (vLLM adds special tokens to completion prompts), ids as given.
std::vector<int32_t> TokenizePrompt(const CompletionPrompt& prompt, const Tokenizer& tokenizer);

// The text that `echo` puts before the completion: the prompt text as given, or for ids their
// decoding (special tokens add nothing; invalid UTF-8 becomes U+FFFD).
std::string EchoText(const CompletionPrompt& prompt, const Tokenizer& tokenizer);

}  // namespace tinyserve::protocol
