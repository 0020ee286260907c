// Request lifecycle events and finish reasons (DESIGN §4). Part of the engine's observer
// interface (with engine_observer.h and scheduler_stats.h): the only engine headers that
// metrics/ includes. It holds plain values and includes nothing of the engine.
//
// The engine core records one RequestEvent per state change, stamped by the engine's Clock:
//
//   QUEUED      the engine accepted the request into the waiting queue     now (inbox drain)
//   SCHEDULED   a waiting or preempted request is admitted (every time)   the step's schedule time
//   PREEMPTED   the request is preempted (blocks freed, recompute later)  the step's schedule time
//   NEW_TOKENS  a step produced tokens for it                             the step's output time
//   FINISHED    stop, length, abort or error                              that time
//
// Events go to the request's RequestStream (all but NEW_TOKENS, whose tokens carry their own
// timestamps) and to every EngineObserver, which is told about the request in a RequestRecord
// (not the engine's Request) and gets a step's NEW_TOKENS as one TokenOutputs (EngineObserver).
// The engine only stamps events; every interval (queue, prefill, TTFT, ITL, ...) is computed by
// the observers from these stamps.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tinyserve {

enum class EventType : uint8_t {
  kQueued,
  kScheduled,
  kPreempted,
  kNewTokens,
  kFinished,
};

// "QUEUED", "SCHEDULED", ...
const char* EventTypeName(EventType type);

enum class FinishReason : uint8_t {
  kNone,    // not finished
  kStop,    // EOS, a stop token id, or (from the frontend) a stop string
  kLength,  // max_tokens or max_model_len reached
  kAbort,   // the client went away, or the engine shut down
  kError,   // the executor failed on a batch holding the request
};

// "stop", "length", "abort", "error" (vLLM's finished_reason label values); "" for kNone.
const char* FinishReasonName(FinishReason reason);

struct RequestEvent {
  EventType type = EventType::kQueued;
  double ts = 0.0;         // Clock seconds
  int32_t num_tokens = 0;  // kNewTokens only: tokens produced in that step
  FinishReason finish_reason = FinishReason::kNone;  // kFinished only

  friend bool operator==(const RequestEvent&, const RequestEvent&) = default;
};

// A request's token accounting beyond its token counts, kept by the engine (engine thread).
struct RequestCounts {
  // Prompt tokens found in the prefix cache when the request was first admitted (a resumed
  // request's hits on its own freed blocks are not counted).
  int32_t num_cached_prompt_tokens = 0;
  // Tokens computed again because the request was preempted: prompt and output positions.
  int32_t num_recomputed_prompt_tokens = 0;
  int32_t num_recomputed_output_tokens = 0;

  friend bool operator==(const RequestCounts&, const RequestCounts&) = default;
};

// What an observer is told about the request of an event: the request as submitted and its token
// count; nothing of the engine's state. The views are valid only during the observer call.
struct RequestRecord {
  // Unique among the engine's requests and never reused (acceptance order); the keys of
  // TokenOutputs.
  uint64_t key = 0;
  std::string_view request_id;
  double arrival_ts = 0.0;                    // Clock seconds, from the frontend
  std::span<const int32_t> prompt_token_ids;  // [num_prompt_tokens]
  int32_t num_output_tokens = 0;              // generated so far (kept across preemptions)
  int32_t max_tokens = 0;                     // SamplingParams::max_tokens
  // The n of the client request (n > 1 is n engine requests); exactly one of them reports it to
  // vllm:request_params_n.
  int32_t params_n = 1;
  bool reports_params_n = true;
  RequestCounts counts;  // so far

  int32_t num_prompt_tokens() const { return static_cast<int32_t>(prompt_token_ids.size()); }
};

// The NEW_TOKENS events of one engine step, in one value: every request of `request_keys` got one
// token, stamped `ts` (the step's output time). Keys are in batch order, which keeps the running
// order: requests in two consecutive TokenOutputs are in the same relative order in both
// (observers may rely on that for speed, not for correctness).
struct TokenOutputs {
  double ts = 0.0;
  std::span<const uint64_t> request_keys;  // RequestRecord::key, each at most once
};

}  // namespace tinyserve
