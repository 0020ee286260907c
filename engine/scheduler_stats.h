// SchedulerStats: what one engine step did and the state it left, for the metrics observer
// (DESIGN §4, §5). Part of the engine's observer interface (see engine_observer.h). Built by the
// Scheduler during Schedule() and Update(); the gauges are read after Update(). A plain value;
// counts are for this step only unless noted. It holds counts and gauges, no intervals: the
// observers compute those from the event stamps.
#pragma once

#include <array>
#include <cstdint>

namespace tinyserve {

// Why a request was preempted; the values of vLLM's open proposal (vllm-project/vllm#58037).
enum class PreemptionReason : uint8_t {
  // A running request needed KV blocks and none were free; the victim was the most recently
  // admitted request (FCFS), or, under the priority policy, one no less important than it.
  kKvFull,
  // Priority policy: the victim was less important (a larger priority value) than the running
  // request that needed the blocks.
  kPriority,
  // Not in the proposal: POST /reset_prefix_cache?reset_running_requests=true preempted every
  // running request so that the prefix cache could be dropped (vLLM's reset_running_requests).
  kResetPrefixCache,
};
inline constexpr int kNumPreemptionReasons = 3;
// "kv_full", "priority", "reset_prefix_cache": the `reason` label of
// tinyserve_num_preemptions_by_reason_total.
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
  int32_t num_recomputed_prompt_tokens = 0;  // of those, prompt positions (the rest: outputs)
  // The batch's tokens by kind: num_computed_tokens = prefill + decode + recomputed.
  int32_t num_prefill_computed_tokens = 0;  // prompt positions computed for the first time
  int32_t num_decode_tokens = 0;            // output positions computed for the first time
  // Of num_prompt_tokens: the prompt tokens that the prefix cache held when those requests were
  // first admitted (vLLM's prompt_tokens_cached_total; hits on a resumed request's own blocks
  // excluded).
  int32_t num_prompt_tokens_cached = 0;
  // Structured outputs: the sampled sequences that had a grammar mask this step, the time the
  // engine spent computing those masks (a steady clock around the fill, on the mask worker or the
  // engine thread, in seconds), and of it the time the executor blocked waiting for them
  // (ScheduledBatch::AwaitBitmask; 0 when the fill finished before Execute(), or before sampling).
  int32_t num_structured_seqs = 0;
  double structured_mask_seconds = 0.0;
  double structured_mask_awaited_seconds = 0.0;

  // Zeroes the step's values.
  void Reset(double now) {
    *this = SchedulerStats{};
    ts = now;
  }
};

}  // namespace tinyserve
