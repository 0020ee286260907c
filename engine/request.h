// EngineRequest (what a frontend submits) and Request (the engine's state of one request).
//
// A Request is created by EngineCore when it drains its inbox, owned by the Scheduler until it
// finishes, and touched only on the engine thread. Its tokens are `token_ids`: the prompt followed
// by the outputs generated so far. `num_computed_tokens` of them have K/V in the cache, in the
// blocks `block_ids` (block i holds positions [i * block_size, (i + 1) * block_size)).
//
// Lifecycle: WAITING -> RUNNING -> (PREEMPTED -> RUNNING)* -> FINISHED. A preempted request keeps
// its outputs and is recomputed (prompt + outputs re-prefilled) when it runs again. A Request keeps
// no lifecycle stamps: the engine records events (events.h), and observers, which see a
// RequestRecord and never a Request, derive every time and count of the lifecycle from them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/events.h"
#include "engine/sampling_params.h"
#include "structured/grammar.h"

namespace tinyserve {

class RequestStream;

struct EngineRequest {
  std::string request_id;                 // unique among live requests
  std::vector<int32_t> prompt_token_ids;  // [num_prompt_tokens], non-empty
  SamplingParams sampling;
  double arrival_ts = 0.0;  // the engine Clock's time when the frontend received the request
  int32_t priority = 0;     // priority policy only: lower value = more important
  std::optional<int32_t> eos_token_id;  // nullopt: the engine's default EOS
  // A client request with n > 1 is n engine requests; each carries the client's n, and exactly
  // one of them (`reports_params_n`) reports it to vllm:request_params_n when it finishes.
  int32_t params_n = 1;
  bool reports_params_n = true;
  // Structured outputs: the grammar every output must follow (compiled for a Vocabulary of the
  // engine's vocab_size; the stop ids end it), or null = unconstrained. Shared and immutable.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
};

enum class RequestStatus : uint8_t { kWaiting, kRunning, kPreempted, kFinished };

struct Request {
  // Inputs.
  std::string request_id;
  SamplingParams sampling;
  int32_t priority = 0;
  double arrival_ts = 0.0;
  int64_t arrival_seq = 0;  // order of acceptance by the engine; tie-breaker after arrival_ts
  std::optional<int32_t> eos_token_id;
  // Passed through untouched to the observers' RequestRecord (see EngineRequest).
  int32_t params_n = 1;
  bool reports_params_n = true;
  uint64_t seed = 0;  // the sampling seed (SamplingParams::seed or drawn at submit)
  std::shared_ptr<RequestStream> stream;  // where outputs go; may be null in scheduler tests

  // Tokens: [num_tokens()] = prompt then outputs.
  std::vector<int32_t> token_ids;
  int32_t num_prompt_tokens = 0;

  // Progress (engine thread only).
  RequestStatus status = RequestStatus::kWaiting;
  int32_t num_computed_tokens = 0;     // tokens whose K/V is in `block_ids`
  int32_t max_computed_tokens = 0;     // high-water mark of num_computed_tokens (recompute stats)
  RequestCounts counts;                // cached prompt tokens, recomputed tokens (events.h)
  std::vector<int32_t> block_ids;      // KV blocks, in position order
  std::vector<uint64_t> block_hashes;  // chained hashes of the first full blocks (lazily extended)
  int32_t num_cached_blocks = 0;       // leading blocks known to the prefix cache
  // Prefix-cache id of the content of block num_cached_blocks - 1: kRootCacheId (1) before the
  // first block, kNoCacheId (0) once a hash collision ended the chain (see BlockPool).
  uint64_t cache_chain_id = 1;
  // Prompt logprobs (SamplingParams::prompt_logprobs): the logits of prompt positions
  // [0, num_prompt_logprob_positions) have been delivered (their next tokens' logprobs); never
  // decreases, so a recompute after preemption delivers nothing twice.
  int32_t num_prompt_logprob_positions = 0;
  // The executor holds this request's sampling state (ScheduledBatch::new_requests), under the key
  // arrival_seq, until the request finishes (then the engine releases it: ModelExecutor::Release).
  bool registered_with_executor = false;
  // Structured outputs (EngineRequest::grammar): the parse state of the outputs so far, or null.
  // A preemption sets matcher_needs_replay; the recompute's sampled step resets the matcher and
  // replays the kept outputs first (EngineCore). Owned by this request alone (shared_ptr only so
  // that Request stays a copyable value for the sampler tests).
  std::shared_ptr<structured::Matcher> matcher;
  bool matcher_needs_replay = false;

  // Result.
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<int32_t> stop_token_id;  // the stop_token_ids entry that stopped it, if any
  std::string error_message;             // kError only

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool is_finished() const { return status == RequestStatus::kFinished; }
  // The prompt positions whose logits prompt logprobs need: [0, num_prompt_tokens - 1), or none.
  int32_t num_prompt_logprob_targets() const {
    return sampling.prompt_logprobs ? num_prompt_tokens - 1 : 0;
  }
};

}  // namespace tinyserve
