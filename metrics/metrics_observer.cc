#include "metrics/metrics_observer.h"

#include <algorithm>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "metrics/metric_buckets.h"

namespace tinyserve {

MetricsObserver::MetricsObserver(PrometheusMetrics* metrics) : metrics_(metrics) {
  pending_.itl_buckets.assign(metrics->token_latency_buckets().size() + 1, 0.0);
  pending_.iteration_buckets.assign(metrics->iteration_tokens_buckets().size() + 1, 0.0);
}

MetricsObserver::~MetricsObserver() { PublishStepSamples(); }

void MetricsObserver::OnRequestEvent(const RequestRecord& request, const RequestEvent& event) {
  // NEW_TOKENS come here only with wants_every_token_event() (not ours): OnTokenOutputs.
  if (event.type == EventType::kNewTokens) return;
  RequestTimeline* found = live_.Find(request.key);
  if (found == nullptr) {  // the first event of the request (normally QUEUED)
    found = &live_.FindOrInsert(request.key);
    found->arrival_ts = request.arrival_ts;
  }
  RequestTimeline& timeline = *found;
  if (event.type == EventType::kFinished) {
    outputs_.Settle(timeline);
    timeline.TakeOutputsFrom(request);
  }
  timeline.Apply(event);
  if (event.type == EventType::kFinished) {
    finished_in_step_ = true;
    OnFinished(request, timeline);
    live_.Erase(request.key);
  }
}

void MetricsObserver::AddItlSamples(double gap, int32_t count) {
  pending_.itl_buckets[BucketIndex(metrics_->token_latency_buckets(), gap)] += count;
  pending_.itl_sum += gap * count;
  pending_.itl_count += count;
}

void MetricsObserver::OnTokenOutputs(const TokenOutputs& outputs) {
  const double previous_ts = outputs_.last_ts();
  const int32_t num_continuing = outputs_.Apply(
      outputs, [this](uint64_t key) { return live_.Find(key); },
      [this](uint64_t, const RequestTimeline::TokenOutput& out) {
        if (out.is_first) {
          metrics_->time_to_first_token.Observe(out.ttft);
        } else {
          AddItlSamples(out.itl, 1);
        }
      });
  if (num_continuing > 0) AddItlSamples(outputs.ts - previous_ts, num_continuing);
}

void MetricsObserver::OnFinished(const RequestRecord& request, const RequestTimeline& timeline) {
  PrometheusMetrics& m = *metrics_;
  const RequestIntervals iv = timeline.Intervals();
  m.e2e_latency.Observe(iv.e2e);
  if (iv.queue) m.queue_time.Observe(*iv.queue);
  if (iv.prefill) m.prefill_time.Observe(*iv.prefill);
  if (iv.decode) m.decode_time.Observe(*iv.decode);
  if (iv.inference) m.inference_time.Observe(*iv.inference);
  if (iv.tpot) m.time_per_output_token.Observe(*iv.tpot);
  m.request_prompt_tokens.Observe(request.num_prompt_tokens());
  m.request_generation_tokens.Observe(timeline.num_generation_tokens);
  m.request_max_tokens.Observe(request.max_tokens);
  if (request.reports_params_n) m.request_n.Observe(request.params_n);  // once per client request
  m.request_num_preemptions.Observe(timeline.num_preemptions);
  if (timeline.finish_reason != FinishReason::kNone) {
    m.request_success[FinishReasonIndex(timeline.finish_reason)]->Increment();
  }
}

void MetricsObserver::PublishStepSamples() {
  if (!pending_.any) return;
  PrometheusMetrics& m = *metrics_;
  if (pending_.itl_count > 0) {
    m.inter_token_latency.ObserveMultiple(pending_.itl_buckets, pending_.itl_sum);
  }
  if (pending_.iteration_steps > 0) {
    m.iteration_tokens.ObserveMultiple(pending_.iteration_buckets, pending_.iteration_sum);
  }
  if (pending_.generation_tokens > 0) m.generation_tokens.Increment(pending_.generation_tokens);
  std::fill(pending_.itl_buckets.begin(), pending_.itl_buckets.end(), 0.0);
  std::fill(pending_.iteration_buckets.begin(), pending_.iteration_buckets.end(), 0.0);
  pending_.itl_sum = pending_.iteration_sum = pending_.generation_tokens = 0.0;
  pending_.itl_count = pending_.iteration_steps = 0;
  pending_.any = false;
}

namespace {
// Sets `gauge` to `value` unless the last value set was already `value`.
void SetIfChanged(prometheus::Gauge& gauge, double value, double* last) {
  if (value == *last) return;
  gauge.Set(value);
  *last = value;
}
}  // namespace

void MetricsObserver::OnStep(const SchedulerStats& s) {
  PrometheusMetrics& m = *metrics_;
  // Gauges: the state after the step (set only when it changed; a steady step changes few).
  SetIfChanged(m.num_requests_running, s.num_running, &last_gauges_[0]);
  SetIfChanged(m.num_requests_waiting, s.num_waiting, &last_gauges_[1]);
  SetIfChanged(m.num_requests_preempted, s.num_preempted_waiting, &last_gauges_[2]);
  if (s.kv_cache_usage != last_gauges_[3] && m.gpu_cache_usage_perc != nullptr) {
    m.gpu_cache_usage_perc->Set(s.kv_cache_usage);
  }
  SetIfChanged(m.kv_cache_usage_perc, s.kv_cache_usage, &last_gauges_[3]);
  m.lora_requests_info.SetToCurrentTime();  // the time of the last step (a router's freshness)
  SetIfChanged(*m.kv_cache_blocks[0], s.num_used_blocks, &last_gauges_[4]);
  SetIfChanged(*m.kv_cache_blocks[1], s.num_cached_blocks, &last_gauges_[5]);
  SetIfChanged(*m.kv_cache_blocks[2], s.num_free_blocks, &last_gauges_[6]);
  // Counters of what happens in some steps: published in the step it happens.
  if (s.num_preemptions > 0) {
    m.num_preemptions.Increment(s.num_preemptions);
    for (int i = 0; i < kNumPreemptionReasons; ++i) {
      if (s.num_preemptions_by_reason[i] > 0) {
        m.preemptions_by_reason[i]->Increment(s.num_preemptions_by_reason[i]);
      }
    }
  }
  if (s.num_prompt_tokens > 0) m.prompt_tokens.Increment(s.num_prompt_tokens);
  if (s.prefix_cache_queries > 0) {
    m.prefix_cache_queries.Increment(static_cast<double>(s.prefix_cache_queries));
    if (m.gpu_prefix_cache_queries != nullptr) {
      m.gpu_prefix_cache_queries->Increment(static_cast<double>(s.prefix_cache_queries));
    }
  }
  if (s.prefix_cache_hits > 0) {
    m.prefix_cache_hits.Increment(static_cast<double>(s.prefix_cache_hits));
    if (m.gpu_prefix_cache_hits != nullptr) {
      m.gpu_prefix_cache_hits->Increment(static_cast<double>(s.prefix_cache_hits));
    }
  }
  if (s.num_prompt_tokens_cached > 0) m.prompt_tokens_cached.Increment(s.num_prompt_tokens_cached);
  if (s.num_recomputed_tokens > 0) {
    const int32_t prompt = s.num_recomputed_prompt_tokens;
    if (prompt > 0) m.recomputed_tokens[0]->Increment(prompt);
    if (s.num_recomputed_tokens > prompt) {
      m.recomputed_tokens[1]->Increment(s.num_recomputed_tokens - prompt);
    }
    m.step_tokens[static_cast<int>(StepTokenKind::kRecompute)]->Increment(s.num_recomputed_tokens);
  }
  if (s.num_prefill_computed_tokens > 0) {
    m.step_tokens[static_cast<int>(StepTokenKind::kPrefillComputed)]->Increment(
        s.num_prefill_computed_tokens);
  }
  if (s.prefix_cache_hits > 0) {
    m.step_tokens[static_cast<int>(StepTokenKind::kPrefixCacheHit)]->Increment(
        static_cast<double>(s.prefix_cache_hits));
  }
  if (s.num_decode_tokens > 0) {
    m.step_tokens[static_cast<int>(StepTokenKind::kDecode)]->Increment(s.num_decode_tokens);
  }
  // What happens in every busy step (the ITL samples of OnTokenOutputs included): gathered,
  // published every kPublishInterval of engine time and whenever the engine has nothing left to
  // do.
  if (s.num_computed_tokens > 0) {
    pending_.iteration_buckets[BucketIndex(m.iteration_tokens_buckets(), s.num_computed_tokens)] +=
        1.0;
    pending_.iteration_sum += s.num_computed_tokens;
    ++pending_.iteration_steps;
  }
  pending_.generation_tokens += s.num_generation_tokens;
  if (!pending_.any) {
    pending_.any =
        pending_.itl_count > 0 || pending_.iteration_steps > 0 || pending_.generation_tokens > 0;
    pending_.since_ts = s.ts;
  }
  if (pending_.any && (finished_in_step_ || s.ts - pending_.since_ts >= kPublishInterval ||
                       (s.num_running == 0 && s.num_waiting == 0))) {
    PublishStepSamples();
  }
  finished_in_step_ = false;
}

}  // namespace tinyserve
