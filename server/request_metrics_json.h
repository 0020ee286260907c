// The per-request `metrics` object of a response (--enable-per-request-metrics) as JSON:
//   {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms",
//    "tokens_per_second", "prefill_time_ms", "decode_time_ms", "num_preemptions",
//    "recomputed_tokens", "cached_prompt_tokens", "finished_reason"}
// vLLM's five fields first, in its order, then tinyserve's (metrics/request_metrics.h); a
// missing value is null. A pure function.
#pragma once

#include <nlohmann/json.hpp>

#include "metrics/request_metrics.h"
#include "server/generation_job.h"

namespace tinyserve {

nlohmann::ordered_json PerRequestMetricsJson(const PerRequestMetrics& m);

// The response's `metrics` value: the object of its one choice's engine request, or null when
// the job has several choices (n > 1 or several prompts: no one request's timing is the
// response's, as in vLLM).
nlohmann::ordered_json JobMetricsJson(const GenerationJob& job);

}  // namespace tinyserve
