// PrometheusMetrics: the metrics catalogue of DESIGN §5 in a prometheus-cpp Registry, and its
// text rendering for GET /metrics.
//
// Every series is created at construction (all finished_reason, reason and state label values
// included), so updating never allocates and a scrape after zero requests already lists every
// name. Every series carries `model_name` (the served model name) and `engine` ("0"). Names,
// types, labels and bucket boundaries are vLLM V1's (histograms with finer buckets added below
// vLLM's); extras are `tinyserve_*`. All times are seconds of the engine's one monotonic Clock.
//
// Ownership: owns the Registry and every metric. Thread-safety: the metric objects are
// prometheus-cpp's (thread-safe: atomics, histograms lock internally), so the engine thread may
// update them while HTTP threads call Render(). The references stay valid for the object's life.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "engine/events.h"
#include "engine/scheduler_stats.h"
#include "metrics/metric_buckets.h"

namespace tinyserve {

// What the catalogue needs to know about the deployment.
struct MetricsConfig {
  std::string model_name = "tinyserve";  // the `model_name` label (served model name)
  int32_t max_model_len = 2048;          // top of the 1-2-5 token-count buckets
  // vllm:cache_config_info labels.
  int32_t block_size = 16;
  int32_t num_gpu_blocks = 0;  // KV cache blocks (on whichever device)
  bool enable_prefix_caching = true;
  std::string cache_dtype = "auto";
  double gpu_memory_utilization = 0.9;  // as configured (written as Python's str of a float)
  bool calculate_kv_scales = false;
  // vllm:lora_requests_info's max_lora label: adapters a batch can hold (0: no LoRA).
  int32_t max_lora = 0;
  // --metrics-compat gpu-cache-usage: also serve the names older routers read (vLLM before
  // V1's renames): vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_queries_total and
  // vllm:gpu_prefix_cache_hits_total, with the values of the current names.
  bool compat_gpu_cache_usage = false;
  // --histogram-buckets and --custom-histogram-buckets: each histogram's boundaries.
  HistogramBucketConfig buckets;
};

// The Content-Type of Render()'s text.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// Number of FinishReason values that are reasons (stop, length, abort, error).
inline constexpr int kNumFinishReasons = 4;
// Index of `reason` into PrometheusMetrics::request_success. REQUIRES: reason != kNone.
inline int FinishReasonIndex(FinishReason reason) { return static_cast<int>(reason) - 1; }

// tinyserve_step_tokens_total{kind}: each engine step's tokens by kind (SchedulerStats).
enum class StepTokenKind : uint8_t { kPrefillComputed, kPrefixCacheHit, kDecode, kRecompute };
inline constexpr int kNumStepTokenKinds = 4;
// "prefill_computed", "prefix_cache_hit", "decode", "recompute".
const char* StepTokenKindName(StepTokenKind kind);

// vllm:admission_rejections_total{reason}: why the frontend refused a request (HTTP 503).
enum class AdmissionRejection : uint8_t {
  kMaxNumQueuedReqs,    // "max_num_queued_reqs": too many requests in flight
  kMaxNumQueuedTokens,  // "max_num_queued_tokens": too many prompt tokens waiting for prefill
  kMaxConnections,      // "max_connections": too many HTTP connections queued or served
};
inline constexpr int kNumAdmissionRejections = 3;
const char* AdmissionRejectionName(AdmissionRejection reason);

// tinyserve_structured_output_requests_total{kind}: constrained requests by kind, counted when
// the frontend accepts one (a request with n > 1 counts once). The labels in
// structured::ConstraintKind order (its ConstraintKindName; metrics/ does not include
// structured/, and the server test checks that the two lists agree).
inline constexpr const char* kStructuredOutputKinds[] = {"json_object", "json", "regex", "choice",
                                                         "grammar"};
inline constexpr int kNumStructuredOutputKinds = 5;

class PrometheusMetrics {
 public:
  explicit PrometheusMetrics(const MetricsConfig& config);
  ~PrometheusMetrics();
  PrometheusMetrics(const PrometheusMetrics&) = delete;
  PrometheusMetrics& operator=(const PrometheusMetrics&) = delete;

  // The Prometheus text exposition (format 0.0.4) of every metric. Thread-safe.
  std::string Render() const;
  // The OpenMetrics 1.0.0 text of every metric (metrics/openmetrics_text.h; `_created` is the
  // Unix time this object was constructed). Thread-safe.
  std::string RenderOpenMetrics() const;

  const MetricsConfig& config() const { return config_; }
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  // Bucket boundaries, for callers that pre-sort samples and flush them with ObserveMultiple.
  const std::vector<double>& token_latency_buckets() const { return token_latency_buckets_; }
  const std::vector<double>& iteration_tokens_buckets() const { return iteration_tokens_buckets_; }

 private:
  // The boundaries of `family` under config_.buckets. REQUIRES: config_ is initialized.
  std::vector<double> Buckets(BucketFamily family) const;

  MetricsConfig config_;
  double created_unix_s_;  // every series is created by the constructor, and never reset
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<double> token_latency_buckets_;
  std::vector<double> iteration_tokens_buckets_;

 public:
  // Gauges (set after each engine step).
  prometheus::Gauge& num_requests_running;
  prometheus::Gauge& num_requests_waiting;
  prometheus::Gauge& kv_cache_usage_perc;
  prometheus::Gauge& cache_config_info;
  // vllm:lora_requests_info{max_lora, running_lora_adapters, waiting_lora_adapters}: its value is
  // the Unix time of the last engine step (the Gateway API Inference Extension's endpoint picker
  // takes the series with the latest value); the adapter lists are empty without LoRA.
  prometheus::Gauge& lora_requests_info;
  prometheus::Gauge& num_requests_preempted;            // tinyserve_
  std::array<prometheus::Gauge*, 3> kv_cache_blocks{};  // tinyserve_; state used, cached, free

  // Counters.
  prometheus::Counter& num_preemptions;
  prometheus::Counter& prompt_tokens;
  prometheus::Counter& generation_tokens;
  std::array<prometheus::Counter*, kNumFinishReasons> request_success{};  // FinishReasonIndex
  prometheus::Counter& prefix_cache_queries;
  prometheus::Counter& prefix_cache_hits;
  prometheus::Counter& prompt_tokens_cached;  // vllm:prompt_tokens_cached_total
  // tinyserve_recomputed_tokens_total{token_type="prompt"|"output"}.
  std::array<prometheus::Counter*, 2> recomputed_tokens{};
  std::array<prometheus::Counter*, kNumStepTokenKinds> step_tokens{};  // tinyserve_; StepTokenKind
  // vllm:admission_rejections_total{reason} (model_name only, no engine label, as vLLM's).
  std::array<prometheus::Counter*, kNumAdmissionRejections> admission_rejections{};
  std::array<prometheus::Counter*, kNumPreemptionReasons> preemptions_by_reason{};  // tinyserve_
  // tinyserve_structured_output_requests_total{kind}, by kStructuredOutputKinds index.
  std::array<prometheus::Counter*, kNumStructuredOutputKinds> structured_output_requests{};

  // The --metrics-compat aliases; null unless MetricsConfig::compat_gpu_cache_usage.
  prometheus::Gauge* gpu_cache_usage_perc = nullptr;
  prometheus::Counter* gpu_prefix_cache_queries = nullptr;
  prometheus::Counter* gpu_prefix_cache_hits = nullptr;

  // Histograms.
  prometheus::Histogram& time_to_first_token;
  prometheus::Histogram& inter_token_latency;
  prometheus::Histogram& time_per_output_token;
  prometheus::Histogram& e2e_latency;
  prometheus::Histogram& queue_time;
  prometheus::Histogram& prefill_time;
  prometheus::Histogram& decode_time;
  prometheus::Histogram& inference_time;
  prometheus::Histogram& request_prompt_tokens;
  prometheus::Histogram& request_generation_tokens;
  prometheus::Histogram& request_max_tokens;
  prometheus::Histogram& request_n;
  prometheus::Histogram& iteration_tokens;
  prometheus::Histogram& request_num_preemptions;
  // tinyserve_http_queue_time_seconds: every HTTP request's wait from its arrival (the accept of
  // its connection, or the start of a later keep-alive request) to its handling (the pre-routing
  // handler), server/connection_queue.h.
  prometheus::Histogram& http_queue_time;
};

}  // namespace tinyserve
