// RequestTimeline: one request's lifecycle stamps, built from its events, and the intervals they
// define (DESIGN §4). The interval arithmetic of the metrics frontend lives here, nowhere else.
//
// Apply() takes the request's events in order. The first SCHEDULED and the first token are frozen
// once set (vLLM PR #13169 semantics): SCHEDULED events after a preemption do not move them.
// Intervals() returns only the phases whose two ends happened, so no interval is ever negative or
// measured from a missing stamp:
//
//   queue     = first SCHEDULED - QUEUED          (needs a SCHEDULED)
//   prefill   = first token - first SCHEDULED     (needs a token; preemption stalls are inside)
//   decode    = last token - first token          (needs a token; 0 for a single token)
//   inference = prefill + decode                  (= last token - first SCHEDULED)
//   TTFT      = (QUEUED - arrival) + queue + prefill  (= first token - arrival)
//   e2e       = FINISHED - arrival
//   TPOT      = decode / (generated tokens - 1)   (needs at least 2 tokens)
//
// inference and TTFT are computed as those sums, so the identities hold bit for bit whatever the
// clock's rounding. Inter-token latency (ITL) is one sample per gap between two consecutive token
// outputs of the request, as in vLLM V1: a step that outputs k > 1 tokens for it gives one sample
// (its gap), not k; a preemption during decode shows as one large gap.
//
// An observer that gets token outputs a step at a time (TokenOutputTracker) applies only the
// outputs that do not continue from the last output step; while `in_last_output_step` is true,
// last_token_ts and num_generation_tokens lag behind, and the tracker's Settle() brings them up
// to date before FINISHED is applied.
//
// A plain value; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/events.h"

namespace tinyserve {

// The intervals of a finished request, in seconds of the engine Clock.
struct RequestIntervals {
  double e2e = 0.0;
  std::optional<double> queue, prefill, decode, inference, ttft, tpot;
};

struct RequestTimeline {
  // What every token output touches comes first (one cache line).
  std::optional<double> first_token_ts;  // frozen once set
  double last_token_ts = 0.0;            // valid iff first_token_ts
  int32_t num_generation_tokens = 0;
  int32_t num_preemptions = 0;
  bool in_last_output_step = false;  // TokenOutputTracker: got a token in its last output step
  double arrival_ts = 0.0;           // from the frontend (EngineRequest::arrival_ts)
  std::optional<double> queued_ts;
  std::optional<double> first_scheduled_ts;  // frozen once set
  std::optional<double> preempted_ts;        // set while preempted (PREEMPTED to next SCHEDULED)
  std::optional<double> finished_ts;
  FinishReason finish_reason = FinishReason::kNone;

  // What Apply() learned from a NEW_TOKENS event.
  struct TokenOutput {
    bool is_first = false;  // this output carries the request's first token
    double ttft = 0.0;      // is_first: the request's TTFT
    double itl = 0.0;       // !is_first: the gap since the previous output (one ITL sample)
  };

  // Applies one event; returns what a NEW_TOKENS event produced (default for other types).
  TokenOutput Apply(const RequestEvent& event);

  // Takes the generated-token count from the FINISHED event's record (outputs that continued a
  // run were not applied one by one).
  void TakeOutputsFrom(const RequestRecord& request) {
    num_generation_tokens = request.num_output_tokens;
  }

  // Returns true iff FINISHED was applied.
  bool is_finished() const { return finished_ts.has_value(); }

  // The intervals whose two ends happened. REQUIRES: is_finished().
  RequestIntervals Intervals() const;
  // Intervals() without e2e (left 0), for a request that may not have finished: the one
  // computation of the phases, for the histograms (through Intervals()) and for the per-request
  // metrics of a response (request_metrics.h).
  RequestIntervals Phases() const;
};

// Inline: it is on the per-token path.
inline RequestTimeline::TokenOutput RequestTimeline::Apply(const RequestEvent& event) {
  TokenOutput out;
  switch (event.type) {
    case EventType::kQueued:
      if (!queued_ts) queued_ts = event.ts;
      break;
    case EventType::kScheduled:
      if (!first_scheduled_ts) first_scheduled_ts = event.ts;
      preempted_ts.reset();
      break;
    case EventType::kPreempted:
      ++num_preemptions;
      preempted_ts = event.ts;
      break;
    case EventType::kNewTokens:
      if (!first_token_ts) {
        first_token_ts = event.ts;
        out.is_first = true;
        // (queued - arrival) + queue + prefill, summed the way Intervals() sums it.
        const double queued = queued_ts.value_or(event.ts);
        const double scheduled = first_scheduled_ts.value_or(queued);
        out.ttft = (queued - arrival_ts) + (scheduled - queued) + (event.ts - scheduled);
      } else {
        out.itl = event.ts - last_token_ts;
      }
      last_token_ts = event.ts;
      num_generation_tokens += event.num_tokens;
      break;
    case EventType::kFinished:
      finished_ts = event.ts;
      finish_reason = event.finish_reason;
      break;
  }
  return out;
}

}  // namespace tinyserve
