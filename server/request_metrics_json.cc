#include "server/request_metrics_json.h"

#include <optional>

namespace tinyserve {
namespace {

template <typename T>
nlohmann::ordered_json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json PerRequestMetricsJson(const PerRequestMetrics& m) {
  nlohmann::ordered_json j;
  j["time_to_first_token_ms"] = OrNull(m.time_to_first_token_ms);
  j["generation_time_ms"] = OrNull(m.generation_time_ms);
  j["queue_time_ms"] = OrNull(m.queue_time_ms);
  j["mean_itl_ms"] = OrNull(m.mean_itl_ms);
  j["tokens_per_second"] = OrNull(m.tokens_per_second);
  j["prefill_time_ms"] = OrNull(m.prefill_time_ms);
  j["decode_time_ms"] = OrNull(m.decode_time_ms);
  j["num_preemptions"] = m.num_preemptions;
  j["recomputed_tokens"] = OrNull(m.recomputed_tokens);
  j["cached_prompt_tokens"] = OrNull(m.cached_prompt_tokens);
  if (m.finish_reason == FinishReason::kNone) {
    j["finished_reason"] = nullptr;
  } else {
    j["finished_reason"] = FinishReasonName(m.finish_reason);
  }
  return j;
}

nlohmann::ordered_json JobMetricsJson(const GenerationJob& job) {
  if (job.choices().size() != 1) return nullptr;
  return PerRequestMetricsJson(job.choices().front()->metrics.Metrics());
}

}  // namespace tinyserve
