// EngineCore: the engine loop (DESIGN §2, §3). One engine thread owns the Scheduler (and its
// block pool) and the ModelExecutor (which samples); frontends only Submit(), Abort() and read
// their RequestStreams.
//
// One step, like nano-vllm's loop:
//   drain the inbox (accept submits: QUEUED; apply aborts: FINISHED, blocks freed at once; prefix
//   cache resets)
//   -> Scheduler::Schedule() -> ModelExecutor::Execute(batch) (it samples the rows that want a
//   token and scores prompt-logit rows: prompt logprobs, pushed to their streams first)
//   -> Scheduler::Update() (stop checks, finishes) -> the step's token outputs to observers
//   -> events to streams and observers -> OnStep().
// An executor error (a non-OK status, or an exception thrown by Execute(), caught on the engine
// thread) fails exactly the requests of that batch (reason error, the status as their error
// message, blocks freed); the engine keeps serving the others. A DEVICE_LOST status is fatal: the
// engine dies. Every live request (the batch, the running and waiting ones, the inbox) finishes
// with reason error, and from then on is_dead() is true, Submit() returns Unavailable and Abort()
// is a no-op; the thread stays up (Stop() still joins it). An allocation failure (std::bad_alloc)
// in the executor (which samples) or while delivering a batch's logprobs fails that batch as an
// executor error does; any other exception that escapes a step on the engine thread kills the
// engine as a DEVICE_LOST does (the process lives on, /health answers 503).
//
// Two ways to drive it: Start() runs the loop on its own thread until Stop(); or, with no thread,
// the owner calls Step() itself (tests, exact and deterministic with a FakeClock). Stop() joins
// the thread and finishes every pending request with reason abort.
//
// Thread safety: Submit(), Abort(), RequestPrefixCacheReset(), Stop(), HasPendingWork(), is_dead()
// and death_status() are thread-safe. Everything else
// belongs to the engine thread (or to the owner when no thread runs).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "base/token_logprobs.h"
#include "engine/bitmask_fill.h"
#include "engine/engine_observer.h"
#include "engine/kv_cache_events.h"
#include "engine/model_executor.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/scheduler.h"

namespace tinyserve {

struct EngineConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t long_prefill_token_threshold = 0;  // 0: off
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  bool enable_prefix_caching = true;
  std::optional<int32_t> eos_token_id;  // the model's EOS, for requests that name none
  // The model's other end-of-sequence ids (generation_config.json may list several, e.g.
  // Llama-3's <|eot_id|> besides <|end_of_text|>): they end every request as EOS does (reason
  // stop; min_tokens and ignore_eos apply to them as to EOS).
  std::vector<int32_t> extra_eos_token_ids;
  std::optional<int32_t> max_model_len;  // default: the executor's
  std::optional<uint64_t> seed;          // base for the seeds of unseeded requests; default: random
};

class EngineCore {
 public:
  // `executor` and `clock` must outlive the EngineCore. The KV cache geometry comes from the
  // executor. `hash_fn` is the prefix-cache block hash (tests inject collisions).
  EngineCore(const EngineConfig& config, ModelExecutor* executor, const Clock* clock,
             BlockHashFn hash_fn = &DefaultBlockHash);
  ~EngineCore();  // Stop()

  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // REQUIRES: before Start() and the first Step(). `observer` must outlive the EngineCore.
  void AddObserver(EngineObserver* observer) {
    observers_.push_back(observer);
    if (observer->wants_every_token_event()) every_token_observers_.push_back(observer);
  }

  // Sends the prefix cache's changes to `sink` (engine/kv_cache_events.h) at the end of each step
  // that made some. REQUIRES: before Start() and the first Step(); `sink` stays valid while the
  // engine steps (Stop() sends it nothing).
  void SetKvCacheEventSink(KvCacheEventSink* sink) {
    kv_event_sink_ = sink;
    scheduler_.block_pool().set_record_events(sink != nullptr);
  }
  // Drops the prefix cache's content (vLLM's reset_prefix_cache; the sink gets AllBlocksCleared).
  // Returns true iff it did: only when no request holds KV blocks. REQUIRES: no engine thread
  // (Start() not called); the owner steps the engine.
  bool ResetPrefixCache();
  // The same from any thread (POST /reset_prefix_cache): done at the start of the next step, on
  // the engine thread, between two steps (no batch in flight). With `reset_running_requests`,
  // every running request is first preempted (recompute; reason reset_prefix_cache) so that none
  // holds blocks, as vLLM does; without, the reset is refused while a request holds KV blocks.
  // The future is true iff the cache was reset (the sink gets AllBlocksCleared at the end of
  // that step); false when refused, or when the engine stops or dies first. Thread-safe.
  std::future<bool> RequestPrefixCacheReset(bool reset_running_requests);

  // Queues a request for the next step and returns its stream. Returns InvalidArgument if the
  // request is malformed (empty id or prompt, prompt of max_model_len() tokens or more, a token id
  // outside the vocabulary, bad sampling params), Unavailable after Stop() or once the engine is
  // dead. A live duplicate id is finished with reason error on its stream. Thread-safe.
  StatusOr<std::shared_ptr<RequestStream>> Submit(EngineRequest request);
  // Finishes the request in the next step with `reason` (kAbort: the client went away; kStop: the
  // frontend found a stop string), wherever it is; its blocks are freed at once. No-op for unknown
  // or finished ids. Thread-safe.
  void Abort(const std::string& request_id, FinishReason reason = FinishReason::kAbort);

  // Runs one step. Returns true iff it did anything (inbox items or a batch).
  // REQUIRES: no engine thread (Start() not called).
  bool Step();
  // Returns true iff requests are queued in the inbox or live in the scheduler. Thread-safe.
  bool HasPendingWork() const;

  // Starts the engine thread; it steps while there is work and sleeps otherwise.
  void Start();
  // Stops the engine thread (if any) and finishes every pending request with reason abort.
  // Later Submit() calls fail. Idempotent.
  void Stop();

  // Returns true iff a fatal executor error (DEVICE_LOST) killed the engine. Thread-safe.
  bool is_dead() const { return dead_.load(); }
  // The fatal error that killed the engine; OK while it lives. Thread-safe.
  Status death_status() const;

  int32_t max_model_len() const { return scheduler_.max_model_len(); }
  int32_t vocab_size() const { return vocab_size_; }
  // The ids that end every request as EOS: EngineConfig::eos_token_id (when set), then
  // extra_eos_token_ids (a structured-output Vocabulary's stop ids).
  std::vector<int32_t> eos_token_ids() const;
  // Engine thread (or owner without thread) only.
  const Scheduler& scheduler() const { return scheduler_; }
  // Tests: `hook` runs at the start of every grammar-mask fill, on the thread that fills (the mask
  // worker when the executor AwaitsBitmaskFill()), so a test can hold a fill back. REQUIRES: no
  // step running.
  void SetMaskFillHookForTesting(std::function<void()> hook) { mask_fill_hook_ = std::move(hook); }

 private:
  struct InboxItem {
    std::unique_ptr<Request> request;  // a submit, or null for an abort or a reset
    std::string abort_id;
    FinishReason abort_reason = FinishReason::kAbort;
    // A prefix-cache reset (RequestPrefixCacheReset) when non-null: its answer.
    std::shared_ptr<std::promise<bool>> reset;
    bool reset_running_requests = false;
  };

  bool DrainInbox(double now);
  // Takes the executor's sampled rows (into sampled_, logprobs_) and pushes the prompt logprobs.
  // Returns false iff an allocation failed (std::bad_alloc): then the batch is to be failed.
  bool TakeOutputs(const SchedulerOutput& plan, ExecutorOutput& result);
  // Loop()'s last resort when Step() threw: Die() with the exception's message.
  void DieOfStepException(const char* what);
  // Computes the prompt logprobs of the step's prompt-logit rows and pushes them to their streams
  // (without waking them; they are remembered in prompt_streams_).
  // Moves the step's prompt logprobs out of `result` onto their streams.
  void PushPromptLogprobs(const SchedulerOutput& plan, ExecutorOutput& result);
  // Hands the executor the keys of requests that finished (ModelExecutor::Release).
  void ReleaseFinishedState();
  // OK iff `out` has one sampled row per sampled sequence of `batch` (tokens in the vocabulary)
  // and one prompt-logprob row per prompt-logit row.
  Status CheckOutput(const ScheduledBatch& batch, const ExecutorOutput& out) const;
  // Execute() with any exception turned into an Internal status.
  StatusOr<ExecutorOutput> ExecuteBatch(const ScheduledBatch& batch);
  // The fatal path: marks the engine dead and finishes every live request with `status`.
  void Die(const Status& status, double now);
  // Hands the scheduler's events to streams and observers; wakes the streams now (with every
  // stream gathered before), or, with notify false, at the next NotifyStreams(). Step() dispatches
  // with notify false only and wakes every stream once, after the observers' OnStep.
  void DispatchEvents(bool notify = true);
  // What observers are told about `req` (RequestRecord: no engine state).
  static RequestRecord MakeRecord(const Request& req);
  void NotifyStreams();
  // Hands the block pool's KV-cache events to the sink, if any.
  void FlushKvCacheEvents();
  void Loop();
  // Structured outputs. StartGrammarMasks: after Schedule(), sizes the batch's grammar masks (one
  // row per constrained sampled sequence) and starts their fill (a preempted request's matcher
  // replayed first): on the mask worker when the executor AwaitsBitmaskFill(), so that it overlaps
  // the forward pass, else here, before Execute(). FinishGrammarMasks: after Execute(), waits for
  // the fill and adds its time (and the time the executor blocked on it) to the stats.
  // AdvanceMatchers: after Execute(), each constrained sequence's matcher takes its sampled token;
  // a token the grammar rejects (an executor that ignored the mask) is remembered, and
  // FinishGrammarErrors (after Update()) finishes those requests with reason error.
  struct MaskJob {
    Request* req = nullptr;
    std::span<uint32_t> mask;     // the request's row of the batch's token_bitmask
    bool replay = false;          // Reset() and replay the kept outputs first
    const char* error = nullptr;  // set by the fill when the request is to fail (no allocation)
  };
  // Waits for a step's fill when it is destroyed: on every path out of the step, no fill outlives
  // it (FinishGrammarMasks does the same on the normal path and reads the results).
  class MaskFillGuard {
   public:
    explicit MaskFillGuard(std::shared_ptr<const BitmaskFill> fill) : fill_(std::move(fill)) {}
    ~MaskFillGuard() {
      if (fill_ != nullptr) fill_->Wait();
    }
    MaskFillGuard(const MaskFillGuard&) = delete;
    MaskFillGuard& operator=(const MaskFillGuard&) = delete;

   private:
    const std::shared_ptr<const BitmaskFill> fill_;
  };
  void StartGrammarMasks(SchedulerOutput& plan);
  // Fills one job's mask (on the mask worker or the engine thread): touches only the job, its
  // request's matcher (and reads the request's tokens and EOS ids).
  void FillMask(MaskJob& job) const;
  void FinishGrammarMasks();
  void AdvanceMatchers(const SchedulerOutput& plan);
  void FinishGrammarErrors(double now);
  // Reset()s req's matcher and replays its outputs; false iff the grammar rejects one.
  static bool ReplayMatcher(Request& req);
  bool IsEosToken(const Request& req, int32_t token) const;

  const int32_t vocab_size_;
  const std::optional<int32_t> eos_token_id_;
  const uint64_t seed_base_;
  ModelExecutor* const executor_;
  const Clock* const clock_;
  std::vector<EngineObserver*> observers_;
  std::vector<EngineObserver*> every_token_observers_;  // the observers_ that want every token
  KvCacheEventSink* kv_event_sink_ = nullptr;

  // Engine thread state.
  Scheduler scheduler_;
  std::vector<int32_t> sampled_;                 // [num_sampled] tokens of the current step
  std::vector<TokenLogprobs> logprobs_;          // [num_sampled] the executor's sampled rows
  std::vector<RequestStream*> to_notify_;        // DispatchEvents(): the streams to wake
  std::unordered_set<RequestStream*> notified_;  // NotifyStreams() scratch: each stream once
  std::vector<RequestStream*> prompt_streams_;   // streams given prompt logprobs this step
  // (request id, error message) of constrained requests to fail after this step's Update().
  std::vector<std::pair<std::string, std::string>> grammar_errors_;
  std::atomic<bool> has_live_requests_{false};  // written by the engine thread after each step

  // Shared with frontends.
  mutable Mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::vector<InboxItem> inbox_ TS_GUARDED_BY(inbox_mu_);
  bool stopping_ TS_GUARDED_BY(inbox_mu_) = false;
  Status death_status_ TS_GUARDED_BY(inbox_mu_);
  std::atomic<bool> dead_{false};                        // written under inbox_mu_
  uint64_t num_submitted_ TS_GUARDED_BY(inbox_mu_) = 0;  // seeds unseeded requests
  std::thread thread_;

  // The step's grammar-mask fill: the jobs belong to the fill from StartGrammarMasks() until it is
  // done. The worker is declared last: destroyed (joined) first.
  std::vector<MaskJob> mask_jobs_;
  std::shared_ptr<BitmaskFill> mask_fill_;
  std::function<void()> mask_fill_hook_;
  BitmaskFillWorker mask_worker_;
};

}  // namespace tinyserve
