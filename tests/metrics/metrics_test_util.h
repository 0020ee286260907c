// Helpers for metrics tests: read histogram contents, drive an observer with synthetic events.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/engine_observer.h"
#include "metrics/metrics_observer.h"
#include "metrics/prometheus_metrics.h"

namespace tinyserve::testing {

struct HistogramData {
  uint64_t count = 0;
  double sum = 0.0;
  std::vector<uint64_t> cumulative;  // per bucket boundary, then +Inf
};

inline HistogramData Read(const prometheus::Histogram& h) {
  const prometheus::ClientMetric m = h.Collect();
  HistogramData d;
  d.count = m.histogram.sample_count;
  d.sum = m.histogram.sample_sum;
  for (const auto& b : m.histogram.bucket) d.cumulative.push_back(b.cumulative_count);
  return d;
}

inline MetricsConfig TestMetricsConfig() {
  MetricsConfig c;
  c.model_name = "test-model";
  c.max_model_len = 256;
  c.block_size = 16;
  c.num_gpu_blocks = 64;
  return c;
}

// Drives one observer as the engine would: each call is one event of one request at an exact
// time; Step() ends an engine step with the given stats.
class SyntheticEngine {
 public:
  explicit SyntheticEngine(EngineObserver* observer) : observer_(observer) {}

  // A new request with `num_prompt_tokens` prompt tokens that arrived at `arrival_ts`.
  Request* NewRequest(const std::string& id, double arrival_ts, int32_t num_prompt_tokens = 8,
                      int32_t max_tokens = 16) {
    requests_.emplace_back();
    Request* r = &requests_.back();
    r->request_id = id;
    r->arrival_ts = arrival_ts;
    r->num_prompt_tokens = num_prompt_tokens;
    r->token_ids.assign(static_cast<size_t>(num_prompt_tokens), 1);
    r->sampling.max_tokens = max_tokens;
    return r;
  }
  void Queued(Request* r, double ts) { Emit(r, {EventType::kQueued, ts, 0, FinishReason::kNone}); }
  void Scheduled(Request* r, double ts) {
    Emit(r, {EventType::kScheduled, ts, 0, FinishReason::kNone});
  }
  // Also counts the preemption in the current step's stats, as the scheduler does.
  void Preempted(Request* r, double ts) {
    ++stats_.num_preemptions;
    ++stats_.num_preemptions_by_reason[0];
    Emit(r, {EventType::kPreempted, ts, 0, FinishReason::kNone});
  }
  // One token output, delivered as the scheduler and EngineCore deliver it: the request's first
  // output as a NEW_TOKENS event, later ones as ITL samples in the step's stats.
  void Token(Request* r, double ts) {
    ++stats_.num_generation_tokens;
    r->token_ids.push_back(2);
    if (!r->first_token_ts) {
      stats_.num_prompt_tokens += r->num_prompt_tokens;
      r->first_token_ts = ts;
      r->last_token_ts = ts;
      Emit(r, {EventType::kNewTokens, ts, 1, FinishReason::kNone});
    } else {
      stats_.AddItlSample(ts - r->last_token_ts);
      r->last_token_ts = ts;
    }
  }
  void Finished(Request* r, double ts, FinishReason reason) {
    r->finish_reason = reason;
    Emit(r, {EventType::kFinished, ts, 0, reason});
  }
  // Ends the step: OnStep with the counts gathered since the last Step() and these gauges.
  void Step(double ts, int32_t running = 0, int32_t waiting = 0) {
    stats_.ts = ts;
    stats_.num_running = running;
    stats_.num_waiting = waiting;
    stats_.num_kv_blocks = 64;
    stats_.num_free_blocks = 64;
    observer_->OnStep(stats_);
    stats_ = SchedulerStats{};
  }

 private:
  void Emit(Request* r, const RequestEvent& e) { observer_->OnRequestEvent(*r, e); }

  EngineObserver* observer_;
  std::deque<Request> requests_;  // stable addresses
  SchedulerStats stats_;
};

}  // namespace tinyserve::testing
