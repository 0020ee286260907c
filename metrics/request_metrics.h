// PerRequestMetrics: the `metrics` object of one response (vLLM's --enable-per-request-metrics,
// vllm-project/vllm#46768), computed from the request's RequestTimeline by the same code that
// gives the histograms their samples (RequestTimeline::Phases()), so a response's numbers are
// the ones /metrics observed for that request.
//
// vLLM's fields, in milliseconds of the engine Clock (null where the phase did not happen):
//   time_to_first_token_ms  arrival -> first token: the vllm:time_to_first_token_seconds sample.
//                           (vLLM measures this field from the first scheduling; that interval is
//                           prefill_time_ms here.)
//   generation_time_ms      first token -> last token (vllm:request_decode_time_seconds)
//   queue_time_ms           QUEUED -> first SCHEDULED (vllm:request_queue_time_seconds)
//   mean_itl_ms             generation_time / (generated tokens - 1), the request's TPOT
//                           (vllm:request_time_per_output_token_seconds); null below 2 tokens
//   tokens_per_second       generated tokens / (first SCHEDULED -> last token), the inference
//                           interval (vllm:request_inference_time_seconds); null if that is 0
// Beyond vLLM: prefill_time_ms (first SCHEDULED -> first token, preemption stalls inside),
// decode_time_ms (= generation_time_ms, under the histogram's name), num_preemptions,
// recomputed_tokens (prompt + output positions computed again after preemptions),
// cached_prompt_tokens (prefix-cache hits on the first admission) and finished_reason ("stop",
// "length", "abort", "error"; null while running). The two token counts are null until the
// engine's finish has arrived (they come with it).
//
// RequestMetricsTracker is the frontend's copy of one engine request's RequestTimeline, built from
// what its RequestStream delivers (lifecycle events and token timestamps, stamped by the engine
// Clock that also stamps what the observers get), so its ComputePerRequestMetrics() is the same
// numbers the MetricsObserver's histograms got for that request
// (tests/metrics/request_metrics_test.cc checks that on the engine).
//
// Plain values, a pure function and a single-owner value.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "engine/events.h"
#include "metrics/request_timeline.h"

namespace tinyserve {

struct PerRequestMetrics {
  std::optional<double> time_to_first_token_ms, generation_time_ms, queue_time_ms, mean_itl_ms,
      tokens_per_second;
  std::optional<double> prefill_time_ms, decode_time_ms;
  int32_t num_preemptions = 0;
  std::optional<int32_t> recomputed_tokens, cached_prompt_tokens;
  FinishReason finish_reason = FinishReason::kNone;

  friend bool operator==(const PerRequestMetrics&, const PerRequestMetrics&) = default;
};

// `counts`: the request's counts from its finish (null before it arrived).
PerRequestMetrics ComputePerRequestMetrics(const RequestTimeline& timeline,
                                           const std::optional<RequestCounts>& counts);

class RequestMetricsTracker {
 public:
  explicit RequestMetricsTracker(double arrival_ts) { timeline_.arrival_ts = arrival_ts; }

  // Applies one delta of the request's stream (every delta, in order): its lifecycle `events`
  // (FINISHED included), its tokens' output times `token_ts`, and `finish_counts` (the counts
  // that come with the finish; null before it). Within a delta, events and tokens are merged by
  // time (an event before a token of the same time: a step schedules before it outputs);
  // FINISHED comes last.
  void Apply(std::span<const RequestEvent> events, std::span<const double> token_ts,
             const RequestCounts* finish_counts);

  const RequestTimeline& timeline() const { return timeline_; }
  // Returns true iff the engine's finish has been applied.
  bool is_finished() const { return counts_.has_value(); }
  PerRequestMetrics Metrics() const { return ComputePerRequestMetrics(timeline_, counts_); }

 private:
  RequestTimeline timeline_;
  std::optional<RequestCounts> counts_;
};

}  // namespace tinyserve
