#include "metrics/request_metrics.h"

#include <cstddef>

namespace tinyserve {
namespace {

std::optional<double> Ms(const std::optional<double>& seconds) {
  if (!seconds) return std::nullopt;
  return *seconds * 1000.0;
}

}  // namespace

PerRequestMetrics ComputePerRequestMetrics(const RequestTimeline& timeline,
                                           const std::optional<RequestCounts>& counts) {
  const RequestIntervals phases = timeline.Phases();
  PerRequestMetrics m;
  m.time_to_first_token_ms = Ms(phases.ttft);
  m.generation_time_ms = Ms(phases.decode);
  m.queue_time_ms = Ms(phases.queue);
  m.mean_itl_ms = Ms(phases.tpot);
  if (phases.inference && *phases.inference > 0.0) {
    m.tokens_per_second = timeline.num_generation_tokens / *phases.inference;
  }
  m.prefill_time_ms = Ms(phases.prefill);
  m.decode_time_ms = m.generation_time_ms;
  m.num_preemptions = timeline.num_preemptions;
  if (counts) {
    m.recomputed_tokens =
        counts->num_recomputed_prompt_tokens + counts->num_recomputed_output_tokens;
    m.cached_prompt_tokens = counts->num_cached_prompt_tokens;
  }
  m.finish_reason = timeline.finish_reason;
  return m;
}

void RequestMetricsTracker::Apply(std::span<const RequestEvent> events,
                                  std::span<const double> token_ts,
                                  const RequestCounts* finish_counts) {
  const RequestEvent* finished = nullptr;
  size_t t = 0;  // next token
  auto apply_token = [&] {
    timeline_.Apply(RequestEvent{EventType::kNewTokens, token_ts[t], 1, FinishReason::kNone});
    ++t;
  };
  for (const RequestEvent& e : events) {
    if (e.type == EventType::kFinished) {
      finished = &e;
      continue;
    }
    while (t < token_ts.size() && token_ts[t] < e.ts) apply_token();
    timeline_.Apply(e);
  }
  while (t < token_ts.size()) apply_token();
  if (finished != nullptr) timeline_.Apply(*finished);
  if (finish_counts != nullptr) counts_ = *finish_counts;
}

}  // namespace tinyserve
