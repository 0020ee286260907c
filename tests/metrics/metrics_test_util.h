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

// A synthetic request: what the engine would tell observers about it (RequestRecord), with its
// own storage for the id and the prompt.
struct SyntheticRequest {
  uint64_t key = 0;
  std::string request_id;
  double arrival_ts = 0.0;
  std::vector<int32_t> prompt_token_ids;
  int32_t num_output_tokens = 0;
  int32_t max_tokens = 16;
  int32_t params_n = 1;
  bool reports_params_n = true;

  RequestRecord Record() const {
    RequestRecord r;
    r.key = key;
    r.request_id = request_id;
    r.arrival_ts = arrival_ts;
    r.prompt_token_ids = prompt_token_ids;
    r.num_output_tokens = num_output_tokens;
    r.max_tokens = max_tokens;
    r.params_n = params_n;
    r.reports_params_n = reports_params_n;
    return r;
  }
};

// Drives one observer as the engine would: each call is one event of one request at an exact
// time; Step() ends an engine step with the given stats. Token outputs are gathered and handed
// over as one OnTokenOutputs per output time, before the next other event (as EngineCore does:
// a step's outputs precede the FINISHED events they lead to).
class SyntheticEngine {
 public:
  explicit SyntheticEngine(EngineObserver* observer) : observer_(observer) {}

  // A new request with `num_prompt_tokens` prompt tokens that arrived at `arrival_ts`.
  SyntheticRequest* NewRequest(const std::string& id, double arrival_ts,
                               int32_t num_prompt_tokens = 8, int32_t max_tokens = 16) {
    requests_.emplace_back();
    SyntheticRequest* r = &requests_.back();
    r->key = next_key_++;
    r->request_id = id;
    r->arrival_ts = arrival_ts;
    r->prompt_token_ids.assign(static_cast<size_t>(num_prompt_tokens), 1);
    r->max_tokens = max_tokens;
    return r;
  }
  void Queued(SyntheticRequest* r, double ts) {
    Emit(r, {EventType::kQueued, ts, 0, FinishReason::kNone});
  }
  void Scheduled(SyntheticRequest* r, double ts) {
    Emit(r, {EventType::kScheduled, ts, 0, FinishReason::kNone});
  }
  // Also counts the preemption in the current step's stats, as the scheduler does.
  void Preempted(SyntheticRequest* r, double ts) {
    ++stats_.num_preemptions;
    ++stats_.num_preemptions_by_reason[0];
    Emit(r, {EventType::kPreempted, ts, 0, FinishReason::kNone});
  }
  // One token output at `ts`; outputs with the same time are one step's TokenOutputs.
  void Token(SyntheticRequest* r, double ts) {
    if (!output_keys_.empty() && output_ts_ != ts) FlushOutputs();
    ++stats_.num_generation_tokens;
    if (r->num_output_tokens == 0)
      stats_.num_prompt_tokens += static_cast<int32_t>(r->prompt_token_ids.size());
    ++r->num_output_tokens;
    output_ts_ = ts;
    output_keys_.push_back(r->key);
  }
  void Finished(SyntheticRequest* r, double ts, FinishReason reason) {
    Emit(r, {EventType::kFinished, ts, 0, reason});
  }
  // Ends the step: OnStep with the counts gathered since the last Step() and these gauges.
  void Step(double ts, int32_t running = 0, int32_t waiting = 0) {
    FlushOutputs();
    stats_.ts = ts;
    stats_.num_running = running;
    stats_.num_waiting = waiting;
    stats_.num_kv_blocks = 64;
    stats_.num_free_blocks = 64;
    observer_->OnStep(stats_);
    stats_ = SchedulerStats{};
  }

 private:
  void FlushOutputs() {
    if (output_keys_.empty()) return;
    observer_->OnTokenOutputs(TokenOutputs{output_ts_, output_keys_});
    output_keys_.clear();
  }
  void Emit(SyntheticRequest* r, const RequestEvent& e) {
    FlushOutputs();
    observer_->OnRequestEvent(r->Record(), e);
  }

  EngineObserver* observer_;
  std::deque<SyntheticRequest> requests_;  // stable addresses
  uint64_t next_key_ = 0;
  std::vector<uint64_t> output_keys_;  // the pending token outputs, all at output_ts_
  double output_ts_ = 0.0;
  SchedulerStats stats_;
};

}  // namespace tinyserve::testing
