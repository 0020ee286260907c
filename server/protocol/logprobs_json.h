// The logprobs objects of vLLM's responses, built from the engine's TokenLogprobs.
//
// Token strings are the token's piece after its predecessor, DecodePiece(prev, id), made
// well-formed (a lone byte-fallback byte reads "\uFFFD", as in vLLM). Logprobs are clamped to
// >= -9999.0 (vLLM's floor; JSON has no -inf).
//
// Completions (vLLM CompletionLogProbs), for consecutive tokens of one choice:
//   {"text_offset": [int], "token_logprobs": [float], "tokens": [str],
//    "top_logprobs": [{token: logprob}]}
//   text_offset[i] = code points of the choice text before token i (starting at `text_offset`);
//   top_logprobs[i] = the sampled token, then the top-n alternatives, most likely first (a dict,
//   so an alternative whose text repeats an earlier
//   entry is left out).
// Chat (OpenAI's ChatCompletionLogProbs):
//   {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
//   bytes = the raw bytes of the token's piece (so a client can join split characters), as
//   OpenAI sends them; top_logprobs = the top-n alternatives, most likely first.
// Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/token_logprobs.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve::protocol {

inline constexpr float kMinLogprob = -9999.0f;

// max(logprob, -9999.0); NaN -> -9999.0.
float ClampLogprob(float logprob);

// ToValidUtf8(tokenizer.DecodePiece(prev_id, id)).
std::string LogprobTokenText(const Tokenizer& tokenizer, int32_t prev_id, int32_t id);

// `tokens` follow token `prev_id` (-1 if none). Sets *next_text_offset (if non-null) to the
// offset after the last token, for the next chunk of a stream.
nlohmann::ordered_json CompletionLogprobsJson(const Tokenizer& tokenizer, int32_t prev_id,
                                              const std::vector<TokenLogprobs>& tokens,
                                              size_t text_offset,
                                              size_t* next_text_offset = nullptr);

// Appends DumpJson(CompletionLogprobsJson(...)) for the same arguments to *out, without building
// the JSON tree (the streaming hot path).
void AppendCompletionLogprobsJson(const Tokenizer& tokenizer, int32_t prev_id,
                                  const std::vector<TokenLogprobs>& tokens, size_t text_offset,
                                  size_t* next_text_offset, std::string* out);

// The prompt part of an echoed completion's logprobs (vLLM, echo with logprobs): entry 0 is
// prompt_ids[0] with token_logprobs null and top_logprobs null (it has no context); entry i >= 1
// is prompt_logprobs[i - 1] (the logprobs of prompt_ids[i]) with the dict rule above. text_offset
// starts at 0 and advances by each token text's code points. Has 1 + prompt_logprobs.size()
// entries (fewer than the prompt if only part of them arrived). REQUIRES: prompt_ids non-empty,
// prompt_logprobs.size() < prompt_ids.size().
nlohmann::ordered_json CompletionPromptLogprobsJson(
    const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
    const std::vector<TokenLogprobs>& prompt_logprobs);

// vLLM's `prompt_logprobs` list (a completion choice's field, or a chat response's): entry 0 is
// null (the first prompt token has no context); entry i >= 1 is an object keyed by token id (as a
// decimal string), first prompt_ids[i] with prompt_logprobs[i - 1]'s logprob and rank, then its
// top-n alternatives with ranks 1..n (one of them may be prompt_ids[i] again: like vLLM's dict,
// that key keeps its place and takes the later rank). Each value is {"logprob", "rank",
// "decoded_token"}; decoded_token is LogprobTokenText(prompt_ids[i - 1], id). Has
// 1 + prompt_logprobs.size() entries. REQUIRES: prompt_ids non-empty,
// prompt_logprobs.size() < prompt_ids.size().
nlohmann::ordered_json PromptLogprobsJson(const Tokenizer& tokenizer,
                                          const std::vector<int32_t>& prompt_ids,
                                          const std::vector<TokenLogprobs>& prompt_logprobs);

// Appends the entries of `tail` to those of `head` (both CompletionLogprobsJson-shaped).
void ConcatCompletionLogprobs(nlohmann::ordered_json* head, const nlohmann::ordered_json& tail);

nlohmann::ordered_json ChatLogprobsJson(const Tokenizer& tokenizer, int32_t prev_id,
                                        const std::vector<TokenLogprobs>& tokens);

}  // namespace tinyserve::protocol
