#include "metrics/metrics_observer.h"

#include <algorithm>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "metrics/metric_buckets.h"

namespace tinyserve {

MetricsObserver::MetricsObserver(PrometheusMetrics* metrics)
    : metrics_(metrics), itl_bucket_counts_(metrics->token_latency_buckets().size() + 1, 0.0) {}

void MetricsObserver::OnRequestEvent(const Request& request, const RequestEvent& event) {
  RequestTimeline* found = live_.Find(&request);
  if (found == nullptr) {  // the first event of the request (normally QUEUED)
    found = &live_.FindOrInsert(&request);
    found->arrival_ts = request.arrival_ts;
  }
  RequestTimeline& timeline = *found;
  const RequestTimeline::TokenOutput out = timeline.Apply(event);
  switch (event.type) {
    case EventType::kNewTokens:
      if (out.is_first) {
        metrics_->time_to_first_token.Observe(out.ttft);
      } else {
        itl_bucket_counts_[BucketIndex(metrics_->token_latency_buckets(), out.itl)] += 1.0;
        itl_sum_ += out.itl;
        has_itl_samples_ = true;
      }
      break;
    case EventType::kFinished:
      OnFinished(request, timeline);
      live_.Erase(&request);
      break;
    default:
      break;
  }
}

void MetricsObserver::OnFinished(const Request& request, const RequestTimeline& timeline) {
  PrometheusMetrics& m = *metrics_;
  const RequestIntervals iv = timeline.Intervals();
  m.e2e_latency.Observe(iv.e2e);
  if (iv.queue) m.queue_time.Observe(*iv.queue);
  if (iv.prefill) m.prefill_time.Observe(*iv.prefill);
  if (iv.decode) m.decode_time.Observe(*iv.decode);
  if (iv.inference) m.inference_time.Observe(*iv.inference);
  if (iv.tpot) m.time_per_output_token.Observe(*iv.tpot);
  m.request_prompt_tokens.Observe(request.num_prompt_tokens);
  m.request_generation_tokens.Observe(timeline.num_generation_tokens);
  m.request_max_tokens.Observe(request.sampling.max_tokens);
  if (request.reports_params_n) m.request_n.Observe(request.params_n);  // once per client request
  m.request_num_preemptions.Observe(timeline.num_preemptions);
  if (timeline.finish_reason != FinishReason::kNone) {
    m.request_success[FinishReasonIndex(timeline.finish_reason)]->Increment();
  }
}

void MetricsObserver::FlushTokenLatencies() {
  if (!has_itl_samples_) return;
  metrics_->inter_token_latency.ObserveMultiple(itl_bucket_counts_, itl_sum_);
  std::fill(itl_bucket_counts_.begin(), itl_bucket_counts_.end(), 0.0);
  itl_sum_ = 0.0;
  has_itl_samples_ = false;
}

void MetricsObserver::OnStep(const SchedulerStats& s) {
  PrometheusMetrics& m = *metrics_;
  FlushTokenLatencies();
  m.num_requests_running.Set(s.num_running);
  m.num_requests_waiting.Set(s.num_waiting);
  m.num_requests_preempted.Set(s.num_preempted_waiting);
  m.kv_cache_usage_perc.Set(s.kv_cache_usage);
  m.kv_cache_blocks[0]->Set(s.num_used_blocks);
  m.kv_cache_blocks[1]->Set(s.num_cached_blocks);
  m.kv_cache_blocks[2]->Set(s.num_free_blocks);
  if (s.num_preemptions > 0) {
    m.num_preemptions.Increment(s.num_preemptions);
    for (int i = 0; i < kNumPreemptionReasons; ++i) {
      if (s.num_preemptions_by_reason[i] > 0) {
        m.preemptions_by_reason[i]->Increment(s.num_preemptions_by_reason[i]);
      }
    }
  }
  if (s.num_prompt_tokens > 0) m.prompt_tokens.Increment(s.num_prompt_tokens);
  if (s.num_generation_tokens > 0) m.generation_tokens.Increment(s.num_generation_tokens);
  if (s.prefix_cache_queries > 0) {
    m.prefix_cache_queries.Increment(static_cast<double>(s.prefix_cache_queries));
  }
  if (s.prefix_cache_hits > 0) {
    m.prefix_cache_hits.Increment(static_cast<double>(s.prefix_cache_hits));
  }
  if (s.num_recomputed_tokens > 0) m.recomputed_tokens.Increment(s.num_recomputed_tokens);
  if (s.num_computed_tokens > 0) m.iteration_tokens.Observe(s.num_computed_tokens);
}

}  // namespace tinyserve
