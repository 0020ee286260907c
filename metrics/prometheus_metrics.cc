#include "metrics/prometheus_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>

#include "metrics/metric_buckets.h"
#include "metrics/openmetrics_text.h"

namespace tinyserve {
namespace {

using prometheus::Labels;
using prometheus::Registry;

Labels BaseLabels(const MetricsConfig& c) {
  return {{"model_name", c.model_name}, {"engine", "0"}};
}

Labels With(Labels labels, const std::string& name, const std::string& value) {
  labels.emplace(name, value);
  return labels;
}

prometheus::Gauge& AddGauge(Registry& r, const MetricsConfig& c, const std::string& name,
                            const std::string& help, const Labels& extra = {}) {
  Labels labels = BaseLabels(c);
  labels.insert(extra.begin(), extra.end());
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Counter& AddCounter(Registry& r, const MetricsConfig& c, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(BaseLabels(c));
}

prometheus::Histogram& AddHistogram(Registry& r, const MetricsConfig& c, const std::string& name,
                                    const std::string& help, const std::vector<double>& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(BaseLabels(c), buckets);
}

static_assert(static_cast<int>(FinishReason::kError) == kNumFinishReasons);

const char* const kClock = " Engine monotonic clock.";

std::string Help(const std::string& what) { return what + kClock; }

}  // namespace

const char* StepTokenKindName(StepTokenKind kind) {
  switch (kind) {
    case StepTokenKind::kPrefillComputed:
      return "prefill_computed";
    case StepTokenKind::kPrefixCacheHit:
      return "prefix_cache_hit";
    case StepTokenKind::kDecode:
      return "decode";
    case StepTokenKind::kRecompute:
      return "recompute";
  }
  return "unknown";
}

const char* AdmissionRejectionName(AdmissionRejection reason) {
  switch (reason) {
    case AdmissionRejection::kMaxNumQueuedReqs:
      return "max_num_queued_reqs";
    case AdmissionRejection::kMaxNumQueuedTokens:
      return "max_num_queued_tokens";
    case AdmissionRejection::kMaxConnections:
      return "max_connections";
  }
  return "unknown";
}

PrometheusMetrics::PrometheusMetrics(const MetricsConfig& config)
    : config_(config),
      created_unix_s_(
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count()),
      registry_(std::make_shared<Registry>()),
      token_latency_buckets_(
          FamilyBuckets(config.buckets, BucketFamily::kInterTokenLatency, config.max_model_len)),
      iteration_tokens_buckets_(
          FamilyBuckets(config.buckets, BucketFamily::kIterationTokens, config.max_model_len)),
      num_requests_running(AddGauge(
          *registry_, config_, "vllm:num_requests_running",
          "Number of requests in the running batch (scheduled in the last engine step), after "
          "that step.")),
      num_requests_waiting(AddGauge(
          *registry_, config_, "vllm:num_requests_waiting",
          "Number of requests waiting to be scheduled (including preempted ones), after the last "
          "engine step.")),
      kv_cache_usage_perc(AddGauge(
          *registry_, config_, "vllm:kv_cache_usage_perc",
          "KV-cache usage as a fraction 0..1: 1 - free/total blocks after the last engine step; "
          "cached blocks that no request references count as free.")),
      cache_config_info(
          AddGauge(*registry_, config_, "vllm:cache_config_info",
                   "Information of the KV-cache configuration (value 1; the labels carry it).",
                   {{"block_size", std::to_string(config_.block_size)},
                    {"num_gpu_blocks", std::to_string(config_.num_gpu_blocks)},
                    {"enable_prefix_caching", config_.enable_prefix_caching ? "True" : "False"},
                    {"cache_dtype", config_.cache_dtype},
                    {"gpu_memory_utilization", OpenMetricsFloat(config_.gpu_memory_utilization)},
                    {"calculate_kv_scales", config_.calculate_kv_scales ? "True" : "False"}})),
      // What the endpoint picker reads (kubernetes-sigs/gateway-api-inference-extension,
      // docs/proposals/003-model-server-protocol/README.md, "LoRA Adapter Serving"): a gauge
      // whose value is the last update's timestamp, labels max_lora, running_lora_adapters and
      // waiting_lora_adapters (comma-separated names).
      lora_requests_info(AddGauge(*registry_, config_, "vllm:lora_requests_info",
                                  "Running stats on LoRA requests: the value is the Unix time of "
                                  "the last engine step; the labels list the adapters.",
                                  {{"max_lora", std::to_string(config_.max_lora)},
                                   {"running_lora_adapters", ""},
                                   {"waiting_lora_adapters", ""}})),
      num_requests_preempted(AddGauge(
          *registry_, config_, "tinyserve_num_requests_preempted",
          "Number of waiting requests that were preempted and wait to be recomputed, after the "
          "last engine step.")),
      num_preemptions(AddCounter(
          *registry_, config_, "vllm:num_preemptions_total",
          "Cumulative number of preemptions, counted in the engine step that preempts (so "
          "requests aborted while preempted are counted).")),
      prompt_tokens(AddCounter(
          *registry_, config_, "vllm:prompt_tokens_total",
          "Number of prefill tokens processed: the prompt length of each request, counted when "
          "its first token is produced (recomputation after preemption not included).")),
      generation_tokens(AddCounter(*registry_, config_, "vllm:generation_tokens_total",
                                   "Number of generation tokens processed (sampled).")),
      prefix_cache_queries(AddCounter(
          *registry_, config_, "vllm:prefix_cache_queries_total",
          "Prefix cache queries, in tokens: the tokens of each newly admitted request looked up "
          "in the prefix cache (re-admissions after preemption excluded).")),
      prefix_cache_hits(AddCounter(
          *registry_, config_, "vllm:prefix_cache_hits_total",
          "Prefix cache hits, in tokens: of vllm:prefix_cache_queries_total, the tokens found "
          "cached (recompute after preemption excluded).")),
      prompt_tokens_cached(AddCounter(
          *registry_, config_, "vllm:prompt_tokens_cached_total",
          "Of vllm:prompt_tokens_total, the prompt tokens found in the prefix cache when their "
          "request was first admitted (hits on a preempted request's own blocks excluded), "
          "counted with them.")),
      time_to_first_token(AddHistogram(
          *registry_, config_, "vllm:time_to_first_token_seconds",
          Help("Histogram of time to first token in seconds: from the request's arrival at the "
               "frontend to the output time of the step that produced its first token; includes "
               "any preemption before that token."),
          Buckets(BucketFamily::kTimeToFirstToken))),
      inter_token_latency(AddHistogram(
          *registry_, config_, "vllm:inter_token_latency_seconds",
          Help("Histogram of inter-token latency in seconds: one sample per gap between two "
               "consecutive token outputs of a request (a preemption shows as one large gap)."),
          token_latency_buckets_)),
      time_per_output_token(AddHistogram(
          *registry_, config_, "vllm:request_time_per_output_token_seconds",
          Help("Histogram of time per output token in seconds, per finished request: decode time "
               "/ (generated tokens - 1); only requests with more than one token."),
          token_latency_buckets_)),
      e2e_latency(AddHistogram(
          *registry_, config_, "vllm:e2e_request_latency_seconds",
          Help("Histogram of end-to-end request latency in seconds: from arrival at the frontend "
               "to the finish (any finished_reason)."),
          Buckets(BucketFamily::kRequestLatency))),
      queue_time(AddHistogram(
          *registry_, config_, "vllm:request_queue_time_seconds",
          Help("Histogram of time spent in WAITING phase for request in seconds: from QUEUED to "
               "the first SCHEDULED; requests never scheduled give no sample."),
          Buckets(BucketFamily::kRequestLatency))),
      prefill_time(AddHistogram(
          *registry_, config_, "vllm:request_prefill_time_seconds",
          Help("Histogram of time spent in PREFILL phase for request in seconds: from the first "
               "SCHEDULED to the first token, preemption stalls included; requests without a "
               "token give no sample."),
          Buckets(BucketFamily::kRequestLatency))),
      decode_time(AddHistogram(
          *registry_, config_, "vllm:request_decode_time_seconds",
          Help("Histogram of time spent in DECODE phase for request in seconds: from the first "
               "token to the last token, preemption stalls included; requests without a token "
               "give no sample."),
          Buckets(BucketFamily::kRequestLatency))),
      inference_time(AddHistogram(
          *registry_, config_, "vllm:request_inference_time_seconds",
          Help("Histogram of time spent in RUNNING phase for request in seconds: prefill + "
               "decode (first SCHEDULED to last token); requests without a token give no sample."),
          Buckets(BucketFamily::kRequestLatency))),
      request_prompt_tokens(AddHistogram(
          *registry_, config_, "vllm:request_prompt_tokens",
          "Number of prefill tokens processed: the prompt length of each finished request.",
          Buckets(BucketFamily::kRequestTokens))),
      request_generation_tokens(AddHistogram(
          *registry_, config_, "vllm:request_generation_tokens",
          "Number of generation tokens processed: the output length of each finished request.",
          Buckets(BucketFamily::kRequestTokens))),
      request_max_tokens(
          AddHistogram(*registry_, config_, "vllm:request_params_max_tokens",
                       "Histogram of the max_tokens request parameter, per finished request.",
                       Buckets(BucketFamily::kRequestTokens))),
      request_n(AddHistogram(*registry_, config_, "vllm:request_params_n",
                             "Histogram of the n request parameter, per finished request.",
                             Buckets(BucketFamily::kRequestParamsN))),
      iteration_tokens(AddHistogram(
          *registry_, config_, "vllm:iteration_tokens_total",
          "Histogram of the number of tokens computed per engine step (prefill chunks + decodes), "
          "steps that computed tokens only.",
          iteration_tokens_buckets_)),
      request_num_preemptions(
          AddHistogram(*registry_, config_, "vllm:request_num_preemptions",
                       "Histogram of the number of preemptions of each finished request.",
                       Buckets(BucketFamily::kRequestNumPreemptions))),
      http_queue_time(AddHistogram(
          *registry_, config_, "tinyserve_http_queue_time_seconds",
          Help("Histogram of every HTTP request's wait for a worker thread in seconds: from the "
               "accept of its connection (a later keep-alive request: the start of its handling, "
               "so 0) to the start of its handling; counted in "
               "vllm:time_to_first_token_seconds and vllm:e2e_request_latency_seconds."),
          Buckets(BucketFamily::kRequestLatency))) {
  auto& blocks = prometheus::BuildGauge()
                     .Name("tinyserve_kv_cache_blocks")
                     .Help(
                         "KV-cache blocks by state after the last engine step: used (referenced "
                         "by a request), cached (unreferenced, reusable prefix-cache content), "
                         "free (unreferenced, no content); they sum to the pool size.")
                     .Register(*registry_);
  static constexpr const char* kStates[] = {"used", "cached", "free"};
  for (size_t i = 0; i < kv_cache_blocks.size(); ++i) {
    kv_cache_blocks[i] = &blocks.Add(With(BaseLabels(config_), "state", kStates[i]));
  }
  auto& success = prometheus::BuildCounter()
                      .Name("vllm:request_success_total")
                      .Help(
                          "Count of finished requests by finished_reason (stop, length, "
                          "abort: client gone or shutdown, error: the executor failed).")
                      .Register(*registry_);
  for (int i = 0; i < kNumFinishReasons; ++i) {
    const auto reason = static_cast<FinishReason>(i + 1);
    request_success[i] =
        &success.Add(With(BaseLabels(config_), "finished_reason", FinishReasonName(reason)));
  }
  auto& by_reason = prometheus::BuildCounter()
                        .Name("tinyserve_num_preemptions_by_reason_total")
                        .Help(
                            "Cumulative number of preemptions by reason, counted in the engine "
                            "step that preempts.")
                        .Register(*registry_);
  for (int i = 0; i < kNumPreemptionReasons; ++i) {
    preemptions_by_reason[i] = &by_reason.Add(With(
        BaseLabels(config_), "reason", PreemptionReasonName(static_cast<PreemptionReason>(i))));
  }
  auto& recomputed =
      prometheus::BuildCounter()
          .Name("tinyserve_recomputed_tokens_total")
          .Help(
              "Tokens computed again because their request was preempted (recompute), counted in "
              "the step that computes them, by token_type: prompt or output positions.")
          .Register(*registry_);
  static constexpr const char* kTokenTypes[] = {"prompt", "output"};
  for (size_t i = 0; i < recomputed_tokens.size(); ++i) {
    recomputed_tokens[i] = &recomputed.Add(With(BaseLabels(config_), "token_type", kTokenTypes[i]));
  }
  auto& step_tokens_family =
      prometheus::BuildCounter()
          .Name("tinyserve_step_tokens_total")
          .Help(
              "Prompt and output positions of each engine step by kind: prefill_computed (prompt "
              "positions computed for the first time), prefix_cache_hit (prompt positions found "
              "in the prefix cache on a request's first admission), decode (output positions "
              "computed for the first time), recompute (positions computed again after a "
              "preemption). prefill_computed + decode + recompute = the tokens computed.")
          .Register(*registry_);
  for (int i = 0; i < kNumStepTokenKinds; ++i) {
    step_tokens[i] = &step_tokens_family.Add(
        With(BaseLabels(config_), "kind", StepTokenKindName(static_cast<StepTokenKind>(i))));
  }
  auto& rejections = prometheus::BuildCounter()
                         .Name("vllm:admission_rejections_total")
                         .Help(
                             "Requests refused at admission with HTTP 503, by reason: "
                             "max_num_queued_reqs or max_num_queued_tokens (the limit that "
                             "refused it; a request with n > 1 counts once), or max_connections "
                             "(a connection over --max-connections, counted when accepted).")
                         .Register(*registry_);
  for (int i = 0; i < kNumAdmissionRejections; ++i) {
    admission_rejections[i] =
        &rejections.Add({{"model_name", config_.model_name},
                         {"reason", AdmissionRejectionName(static_cast<AdmissionRejection>(i))}});
  }
  auto& structured = prometheus::BuildCounter()
                         .Name("tinyserve_structured_output_requests_total")
                         .Help(
                             "Requests accepted with a structured-output constraint, by kind: "
                             "json_object, json (a JSON Schema), regex, choice, grammar; a "
                             "request with n > 1 counts once.")
                         .Register(*registry_);
  for (int i = 0; i < kNumStructuredOutputKinds; ++i) {
    structured_output_requests[i] =
        &structured.Add(With(BaseLabels(config_), "kind", kStructuredOutputKinds[i]));
  }
  cache_config_info.Set(1.0);
  lora_requests_info.SetToCurrentTime();
  if (config_.compat_gpu_cache_usage) {
    gpu_cache_usage_perc =
        &AddGauge(*registry_, config_, "vllm:gpu_cache_usage_perc",
                  "Deprecated alias of vllm:kv_cache_usage_perc (same value), for routers that "
                  "read vLLM's pre-V1 name (--metrics-compat gpu-cache-usage).");
    gpu_prefix_cache_queries =
        &AddCounter(*registry_, config_, "vllm:gpu_prefix_cache_queries_total",
                    "Deprecated alias of vllm:prefix_cache_queries_total (same value; "
                    "--metrics-compat gpu-cache-usage).");
    gpu_prefix_cache_hits =
        &AddCounter(*registry_, config_, "vllm:gpu_prefix_cache_hits_total",
                    "Deprecated alias of vllm:prefix_cache_hits_total (same value; "
                    "--metrics-compat gpu-cache-usage).");
  }
}

PrometheusMetrics::~PrometheusMetrics() = default;

std::vector<double> PrometheusMetrics::Buckets(BucketFamily family) const {
  return FamilyBuckets(config_.buckets, family, config_.max_model_len);
}

std::string PrometheusMetrics::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

std::string PrometheusMetrics::RenderOpenMetrics() const {
  return SerializeOpenMetrics(registry_->Collect(), created_unix_s_);
}

}  // namespace tinyserve
