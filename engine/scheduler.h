// Scheduler: continuous batching in vLLM V1's shape (DESIGN §3), plain host logic.
//
// Each Schedule() spends a token budget (max_num_batched_tokens) on, first, the running requests
// in order (each gets min(remaining, budget) tokens, cut at long_prefill_token_threshold: chunked
// prefill), then, only if this step preempted nothing, on waiting requests from the head of the
// waiting queue while the budget, max_num_seqs and free blocks allow. A running request that
// cannot get its blocks preempts a victim (FCFS: the most recently admitted running request;
// priority: the largest (priority, arrival)) and retries; if the victim is itself, the running
// pass stops. A waiting request that does not fit waits; nobody is preempted for it.
//
// Prompt logprobs (SamplingParams::prompt_logprobs): the batch asks for the logits of each prompt
// position of a chunk not delivered yet (Request::num_prompt_logprob_positions, advanced in
// Update()), and such a request takes prefix-cache hits only over positions already delivered
// (none on its first admission, as vLLM V1), so every position is computed and delivered once.
//
// Preemption is by recompute: all blocks freed, num_computed_tokens = 0, outputs kept, status
// PREEMPTED, PREEMPTED event, back to the head of the waiting queue (priority policy: to its place
// in (priority, arrival) order). On resume the prompt and outputs are prefilled again.
//
// Lifecycle events (QUEUED, SCHEDULED, PREEMPTED, NEW_TOKENS, FINISHED) are appended to events()
// in the order they happen; finished requests stay alive in finished() until ReleaseFinished(), so
// the Request pointers in events() stay valid until then. Engine thread only; not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "engine/block_pool.h"
#include "engine/kv_cache_manager.h"
#include "engine/request.h"
#include "engine/scheduled_batch.h"
#include "engine/scheduler_stats.h"

namespace tinyserve {

enum class SchedulingPolicy : uint8_t { kFcfs, kPriority };

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t long_prefill_token_threshold = 0;  // 0: no cut beyond the budget
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  bool enable_prefix_caching = true;
  // The KV cache (normally the executor's num_kv_blocks() and block_size()).
  int32_t num_kv_blocks = 0;
  int32_t block_size = 16;
  // Tokens (prompt + outputs) a request may reach. The scheduler uses
  // min(max_model_len, num_kv_blocks * block_size), so that one request alone always fits.
  int32_t max_model_len = 0;
  // End-of-sequence ids besides each request's eos_token_id (EngineConfig::extra_eos_token_ids).
  std::vector<int32_t> extra_eos_token_ids;
};

// One step's plan; valid until the next Schedule().
struct SchedulerOutput {
  ScheduledBatch batch;
  std::vector<Request*> requests;       // [num_seqs], in batch order
  std::vector<int32_t> num_new_tokens;  // [num_seqs]
  std::vector<Request*> preempted;      // preempted in this step
};

struct EventRecord {
  Request* request = nullptr;
  RequestEvent event;
  int32_t sampled_row = 0;  // kNewTokens: the request's row in ExecutorOutput::sampled
};

class Scheduler {
 public:
  // REQUIRES: config.num_kv_blocks >= 1, block_size >= 1, max_model_len >= 2,
  // max_num_seqs >= 1, max_num_batched_tokens >= 1.
  explicit Scheduler(const SchedulerConfig& config, BlockHashFn hash_fn = &DefaultBlockHash);

  const SchedulerConfig& config() const { return config_; }
  int32_t max_model_len() const { return max_model_len_; }

  // Accepts a request into the waiting queue and records QUEUED at `now`. REQUIRES: its id is not
  // live (see Find), 1 <= num_prompt_tokens < max_model_len(), status kWaiting.
  void AddRequest(std::unique_ptr<Request> req, double now);
  // Returns the live (not finished) request with this id, or null.
  Request* Find(const std::string& request_id) const;
  // Finishes a live request now (abort, or a stop string found by the frontend): frees its blocks
  // at once, records FINISHED. Returns false iff no live request has this id.
  // REQUIRES: not between Schedule() and Update()/FailScheduled().
  bool FinishRequest(const std::string& request_id, FinishReason reason, double now);
  // Finishes every live request with `reason` (shutdown; kError with `error_message` when the
  // engine dies).
  void FinishAll(FinishReason reason, double now, const std::string& error_message = "");

  // Plans one step at time `now` (the step's schedule time). Resets stats(). The engine may add
  // the grammar masks (ScheduledBatch::token_bitmask, bitmask_row) to the plan's batch.
  SchedulerOutput& Schedule(double now);
  // Applies the step's results: sampled[i] is the token of the i-th sampling sequence. Advances
  // computed tokens, registers full blocks with the prefix cache, appends tokens, records
  // NEW_TOKENS at `now` (the output time), checks stops and finishes requests.
  void Update(const std::vector<int32_t>& sampled, double now);
  // The executor failed: finishes every request of the last Schedule() with reason error (and the
  // status as its error message), freeing their blocks; requests not in that batch are untouched.
  // Idempotent until the next Schedule().
  void FailScheduled(const Status& status, double now);

  const std::vector<EventRecord>& events() const { return events_; }
  // The NEW_TOKENS of the last Update() (the requests that got a token, in batch order, and the
  // output time); empty before the first Update() of a step. Valid until the next Schedule().
  const TokenOutputs& token_outputs() const { return token_outputs_; }
  void ClearEvents() { events_.clear(); }
  const std::vector<std::unique_ptr<Request>>& finished() const { return finished_; }
  // The keys of requests that finished since the last call and had registered sampling state with
  // the executor (ScheduledBatch::new_requests): the engine hands them to ModelExecutor::Release.
  std::vector<uint64_t> TakeReleasedKeys() { return std::exchange(pending_releases_, {}); }
  void ReleaseFinished() { finished_.clear(); }

  // This step's stats with the gauges filled in from the current state.
  const SchedulerStats& stats();
  // Zeroes this step's counters for a step that schedules nothing (Schedule() does it otherwise);
  // the preemptions of a ResetPrefixCache() since the last step count in the new step.
  void ResetStats(double now);
  // Drops the prefix cache's content (BlockPool::ResetPrefixCache). With `preempt_running`, every
  // running request is first preempted (recompute, reason kResetPrefixCache; the most recently
  // admitted goes to the waiting queue's head first, so they resume in admission order) and
  // *preempted gets them; they are counted in the next step's stats. Returns true iff the cache
  // was reset: false iff some request still holds blocks (without `preempt_running`, any running
  // one). REQUIRES: not between Schedule() and Update()/FailScheduled().
  bool ResetPrefixCache(bool preempt_running, double now, std::vector<Request*>* preempted);
  // Adds the step's structured-output mask work (EngineCore) to stats().
  void AddStructuredMaskStats(int32_t num_seqs, double fill_seconds, double awaited_seconds = 0.0) {
    stats_.num_structured_seqs += num_seqs;
    stats_.structured_mask_seconds += fill_seconds;
    stats_.structured_mask_awaited_seconds += awaited_seconds;
  }
  bool has_unfinished_requests() const { return !requests_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  const std::vector<Request*>& running() const { return running_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  const KVCacheManager& kv_cache() const { return kv_; }
  // The block pool, for its KV-cache events and ResetPrefixCache() (EngineCore).
  BlockPool& block_pool() { return kv_.pool(); }

 private:
  int32_t NumNewTokens(const Request& req, int32_t budget) const;
  // Picks the victim by policy, removes it from running_ (and from this step's plan if it was
  // planned earlier), and preempts it; `needy` is the running request that needs the blocks.
  Request* PreemptVictim(const Request& needy, double now, size_t* next_index, int32_t* budget);
  void Preempt(Request* req, PreemptionReason reason, double now);
  std::vector<Request*> PreemptAllRunning(double now);
  void InsertWaiting(Request* req, bool at_head);
  void RemoveWaiting(Request* req);
  void BuildBatch();
  bool CheckStop(Request& req);
  void Finish(Request* req, FinishReason reason, double now);
  void Record(Request* req, EventType type, double ts);

  const SchedulerConfig config_;
  const int32_t max_model_len_;
  KVCacheManager kv_;

  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;  // live requests
  std::vector<Request*> running_;                                       // admission order
  std::deque<Request*> waiting_;                                        // head first
  int32_t num_preempted_waiting_ = 0;
  int32_t num_unreported_reset_preemptions_ = 0;  // PreemptAllRunning()'s, for the next stats
  int64_t next_arrival_seq_ = 0;

  SchedulerOutput out_;
  std::vector<int32_t> hits_;  // scratch for prefix lookups
  std::vector<EventRecord> events_;
  std::vector<uint64_t> output_keys_;  // [num_sampled] storage of token_outputs_
  TokenOutputs token_outputs_;
  std::vector<std::unique_ptr<Request>> finished_;
  // Keys of finished requests whose sampling state the executor still holds (TakeReleasedKeys).
  std::vector<uint64_t> pending_releases_;
  SchedulerStats stats_;
};

}  // namespace tinyserve
