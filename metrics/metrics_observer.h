// MetricsObserver: the EngineObserver that keeps PrometheusMetrics up to date (DESIGN §4, §5).
//
// The engine gives it event stamps only; every interval is computed here. Per request it keeps a
// RequestTimeline built from the request's events (first-wins SCHEDULED and first token). Token
// outputs come a step at a time (OnTokenOutputs) through a TokenOutputTracker: a request's first
// token gives its TTFT, and each later output one inter-token-latency sample, the gap since the
// request's previous output (so a preemption or a skipped step shows as one large gap). At
// FINISHED the phase histograms (only phases whose two ends happened), e2e, TPOT, token counts,
// max_tokens, n, the request's preemption count and request_success{finished_reason}. Counters and
// gauges of a step come from that step's SchedulerStats (preemptions are counted in the step that
// preempts, so a request aborted while preempted is still counted).
//
// Cheap by construction: nothing per token in a steady decode step (the requests that got a token
// in the last output step and get one now share one gap, found with one comparison of the two
// key lists). What every busy step produces (ITL samples, the iteration-tokens sample, generation
// tokens) is gathered in plain arrays and published to the registry every kPublishInterval
// seconds of engine time, in every step in which a request finished, and in every step that
// leaves the engine idle (no running or waiting request). So /metrics may lag a busy engine by at
// most 10 ms for those three series, but never a finished request: EngineCore wakes a step's
// streams only after OnStep, so a client that has seen its request finish finds everything up to
// that step published. Gauges are published every step (when changed); rarer counters
// (preemptions, prompt tokens, prefix cache, recomputed tokens) and per-request histograms at once.
//
// Thread-safety: the observer calls run on the engine thread only (not thread-safe among
// themselves); rendering the metrics from other threads meanwhile is safe (see PrometheusMetrics).
// `metrics` must outlive the observer.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/engine_observer.h"
#include "metrics/live_request_map.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/request_timeline.h"
#include "metrics/token_output_tracker.h"

namespace tinyserve {

class MetricsObserver final : public EngineObserver {
 public:
  // Longest a busy engine's every-step samples wait before they reach the registry.
  static constexpr double kPublishInterval = 0.010;

  explicit MetricsObserver(PrometheusMetrics* metrics);
  ~MetricsObserver() override;  // publishes what is still gathered

  void OnRequestEvent(const RequestRecord& request, const RequestEvent& event) override;
  void OnTokenOutputs(const TokenOutputs& outputs) override;
  void OnStep(const SchedulerStats& stats) override;
  bool wants_every_token_event() const override { return false; }

  // Number of requests with state (seen, not finished).
  size_t num_live_requests() const { return live_.size(); }

 private:
  void OnFinished(const RequestRecord& request, const RequestTimeline& timeline);
  void AddItlSamples(double gap, int32_t count);
  void PublishStepSamples();

  PrometheusMetrics* const metrics_;
  LiveRequestMap<RequestTimeline> live_;
  TokenOutputTracker outputs_;
  struct PendingStepSamples {
    std::vector<double> itl_buckets;        // [ITL buckets + 1] samples per bucket
    std::vector<double> iteration_buckets;  // [iteration-token buckets + 1] steps per bucket
    double itl_sum = 0.0, iteration_sum = 0.0, generation_tokens = 0.0;
    int64_t itl_count = 0, iteration_steps = 0;
    bool any = false;
    double since_ts = 0.0;  // engine time of the step that gathered the oldest sample
  };
  PendingStepSamples pending_;
  bool finished_in_step_ = false;  // a FINISHED event arrived since the last OnStep
  std::array<double, 7> last_gauges_ = MakeNanArray();  // last value set of each step gauge

  static std::array<double, 7> MakeNanArray() {
    std::array<double, 7> a;
    a.fill(std::numeric_limits<double>::quiet_NaN());
    return a;
  }
};

}  // namespace tinyserve
