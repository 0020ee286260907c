// Request lifecycle events and finish reasons (DESIGN §4).
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
// timestamps) and to every EngineObserver (all of them). Plain values.
#pragma once

#include <cstdint>

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

}  // namespace tinyserve
