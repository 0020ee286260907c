// MetricsObserver: the EngineObserver that keeps PrometheusMetrics up to date (DESIGN §4, §5).
//
// Per request it keeps a RequestTimeline built from the request's events (first-wins SCHEDULED and
// first token). On the first token it observes TTFT; on each later token output one ITL sample;
// at FINISHED the phase histograms (only phases whose two ends happened), e2e, TPOT, token counts,
// max_tokens, n, the request's preemption count and request_success{finished_reason}. Counters and
// gauges of a step come from that step's SchedulerStats (preemptions are counted in the step that
// preempts, so a request aborted while preempted is still counted).
//
// Cheap by construction: per token one flat-table lookup and one bucket search into a per-step
// array, flushed to the ITL histogram once per step (OnStep); no allocation per token.
//
// Thread-safety: OnRequestEvent/OnStep run on the engine thread only (not thread-safe among
// themselves); rendering the metrics from other threads meanwhile is safe (see PrometheusMetrics).
// `metrics` must outlive the observer.
#pragma once

#include <vector>

#include "engine/engine_observer.h"
#include "metrics/live_request_map.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/request_timeline.h"

namespace tinyserve {

class MetricsObserver final : public EngineObserver {
 public:
  explicit MetricsObserver(PrometheusMetrics* metrics);

  void OnRequestEvent(const Request& request, const RequestEvent& event) override;
  void OnStep(const SchedulerStats& stats) override;

  // Flushes ITL samples gathered since the last OnStep into the histogram. OnStep calls it; call
  // it directly only when driving the observer without steps.
  void FlushTokenLatencies();

  // Number of requests with state (seen, not finished).
  size_t num_live_requests() const { return live_.size(); }

 private:
  void OnFinished(const Request& request, const RequestTimeline& timeline);

  PrometheusMetrics* const metrics_;
  LiveRequestMap<RequestTimeline> live_;
  std::vector<double> itl_bucket_counts_;  // [num ITL buckets + 1] samples since the last flush
  double itl_sum_ = 0.0;
  bool has_itl_samples_ = false;
};

}  // namespace tinyserve
