// SchedulerStats: what one engine step did and the state it left, for the metrics observer
// (DESIGN §4, §5). Part of the engine's observer interface (see engine_observer.h). Built by the
// Scheduler during Schedule() and Update(); the gauges are read after Update(). A plain value;
// counts are for this step only unless noted. It holds counts and gauges, no intervals: the
// observers compute those from the event stamps.
#pragma once

#include <array>
#include <cstdint>

namespace tinyserve {

enum class PreemptionReason : uint8_t {
  kKvCache,  // a running request needed KV blocks and none were free
};
inline constexpr int kNumPreemptionReasons = 1;
// "kv_cache": the `reason` label of tinyserve_num_preemptions_by_reason_total.
const char* PreemptionReasonName(PreemptionReason reason);

struct SchedulerStats {
  double ts = 0.0;  // the step's schedule time

  // Gauges, after the step.
  int32_t num_running = 0;
  int32_t num_waiting = 0;            // including preempted ones
  int32_t num_preempted_waiting = 0;  // waiting requests that were preempted
  int32_t num_kv_blocks = 0;          // = used + cached + free
  int32_t num_used_blocks = 0;        // ref count > 0
  int32_t num_cached_blocks = 0;      // ref count 0, reusable prefix-cache content
  int32_t num_free_blocks = 0;        // ref count 0, no cached content
  double kv_cache_usage = 0.0;        // 1 - (cached + free) / total

  // This step.
  int32_t num_scheduled_seqs = 0;
  int32_t num_preemptions = 0;
  std::array<int32_t, kNumPreemptionReasons> num_preemptions_by_reason{};
  int32_t num_computed_tokens = 0;    // tokens in the batch (prefill chunks + decodes)
  int32_t num_prompt_tokens = 0;      // full prompt length of each request whose first token
                                      // came out this step (vLLM's prompt_tokens_total)
  int32_t num_generation_tokens = 0;  // tokens sampled this step
  int64_t prefix_cache_queries = 0;   // tokens looked up on admission (resumed requests excluded)
  int64_t prefix_cache_hits = 0;      // of those, tokens found cached
  int32_t num_recomputed_tokens = 0;  // batch tokens re-prefilled because of a preemption

  // Zeroes the step's values.
  void Reset(double now) {
    *this = SchedulerStats{};
    ts = now;
  }
};

}  // namespace tinyserve
