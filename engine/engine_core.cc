#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <new>
#include <random>
#include <utility>

#include "base/hash.h"

namespace tinyserve {
namespace {

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

SchedulerConfig MakeSchedulerConfig(const EngineConfig& c, const ModelExecutor& executor) {
  SchedulerConfig s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = c.max_num_batched_tokens;
  s.long_prefill_token_threshold = c.long_prefill_token_threshold;
  s.policy = c.policy;
  s.enable_prefix_caching = c.enable_prefix_caching;
  s.num_kv_blocks = executor.num_kv_blocks();
  s.block_size = executor.block_size();
  s.max_model_len = c.max_model_len.value_or(executor.max_model_len());
  s.extra_eos_token_ids = c.extra_eos_token_ids;
  return s;
}

void SetBit(std::span<uint32_t> mask, int32_t token) {
  if (token >= 0 && static_cast<size_t>(token / 32) < mask.size()) {
    mask[token / 32] |= 1u << (token % 32);
  }
}

}  // namespace

EngineCore::EngineCore(const EngineConfig& config, ModelExecutor* executor, const Clock* clock,
                       BlockHashFn hash_fn)
    : vocab_size_(executor->vocab_size()),
      eos_token_id_(config.eos_token_id),
      seed_base_(config.seed ? *config.seed : RandomSeed()),
      executor_(executor),
      clock_(clock),
      scheduler_(MakeSchedulerConfig(config, *executor), hash_fn) {}

EngineCore::~EngineCore() { Stop(); }

StatusOr<std::shared_ptr<RequestStream>> EngineCore::Submit(EngineRequest in) {
  if (in.request_id.empty()) return InvalidArgument("request id is empty");
  if (in.prompt_token_ids.empty()) return InvalidArgument("prompt is empty");
  const int32_t num_prompt = static_cast<int32_t>(in.prompt_token_ids.size());
  if (num_prompt >= max_model_len()) {
    return InvalidArgument("prompt has " + std::to_string(num_prompt) +
                           " tokens; the maximum model length is " +
                           std::to_string(max_model_len()) + " (prompt + at least 1 output)");
  }
  for (int32_t t : in.prompt_token_ids) {
    if (t < 0 || t >= vocab_size_) {
      return InvalidArgument("prompt token id " + std::to_string(t) + " is not in the vocabulary");
    }
  }
  TS_RETURN_IF_ERROR(in.sampling.Validate(vocab_size_));
  std::unique_ptr<structured::Matcher> matcher;
  if (in.grammar != nullptr) {
    matcher = std::make_unique<structured::Matcher>(std::move(in.grammar));
    if (matcher->vocab_size() != vocab_size_) {
      return InvalidArgument("the request's grammar was compiled for a vocabulary of " +
                             std::to_string(matcher->vocab_size()) + " tokens; the model has " +
                             std::to_string(vocab_size_));
    }
  }

  auto req = std::make_unique<Request>();
  req->matcher = std::move(matcher);
  req->request_id = std::move(in.request_id);
  req->sampling = std::move(in.sampling);
  req->priority = in.priority;
  req->arrival_ts = in.arrival_ts;
  req->eos_token_id = in.eos_token_id ? in.eos_token_id : eos_token_id_;
  req->params_n = in.params_n;
  req->reports_params_n = in.reports_params_n;
  req->token_ids = std::move(in.prompt_token_ids);
  req->num_prompt_tokens = num_prompt;
  // Reserve here, on the frontend's thread, so the engine thread never reallocates them.
  const int32_t max_tokens = std::min(max_model_len(), num_prompt + req->sampling.max_tokens);
  const int32_t block_size = scheduler_.config().block_size;
  req->token_ids.reserve(static_cast<size_t>(max_tokens));
  req->block_ids.reserve(static_cast<size_t>((max_tokens + block_size - 1) / block_size));
  req->block_hashes.reserve(static_cast<size_t>(max_tokens / block_size));
  auto stream = std::make_shared<RequestStream>(req->request_id);
  req->stream = stream;
  {
    MutexLock lock(inbox_mu_);
    if (dead_.load()) {
      return Unavailable("the engine is dead after a fatal error (" + death_status_.ToString() +
                         "); restart the server");
    }
    if (stopping_) return Unavailable("the engine is stopped");
    req->seed = req->sampling.seed ? *req->sampling.seed : SplitMix64(seed_base_ + num_submitted_);
    ++num_submitted_;
    InboxItem item;
    item.request = std::move(req);
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_one();
  return stream;
}

void EngineCore::Abort(const std::string& request_id, FinishReason reason) {
  {
    MutexLock lock(inbox_mu_);
    if (stopping_ || dead_.load()) return;  // everything is (or will be) finished anyway
    InboxItem item;
    item.abort_id = request_id;
    item.abort_reason = reason;
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_one();
}

Status EngineCore::death_status() const {
  MutexLock lock(inbox_mu_);
  return death_status_;
}

bool EngineCore::HasPendingWork() const {
  MutexLock lock(inbox_mu_);
  return !inbox_.empty() || has_live_requests_.load();
}

bool EngineCore::DrainInbox(double now) {
  std::vector<InboxItem> items;
  {
    MutexLock lock(inbox_mu_);
    items.swap(inbox_);
    // Keeps HasPendingWork() true while the items move into the scheduler.
    if (!items.empty()) has_live_requests_.store(true);
  }
  for (InboxItem& item : items) {
    if (item.reset != nullptr) {
      std::vector<Request*> preempted;
      const bool reset = scheduler_.ResetPrefixCache(item.reset_running_requests, now, &preempted);
      for (Request* req : preempted) {
        if (req->matcher != nullptr) req->matcher_needs_replay = true;
      }
      item.reset->set_value(reset);
    } else if (item.request == nullptr) {
      scheduler_.FinishRequest(item.abort_id, item.abort_reason, now);
    } else if (scheduler_.Find(item.request->request_id) != nullptr) {
      RequestEvent finished{EventType::kFinished, now, 0, FinishReason::kError};
      item.request->stream->Finish(finished, std::nullopt,
                                   "request id " + item.request->request_id + " is already live");
    } else {
      scheduler_.AddRequest(std::move(item.request), now);
    }
  }
  return !items.empty();
}

void EngineCore::DispatchEvents(bool notify) {
  // Every stream first gets all of its outputs of this step, then each consumer is woken once:
  // no consumer wakes for a half-delivered step (a token and then its finish), and the engine
  // thread is not switched out to a woken consumer while other streams still wait for their
  // tokens. Streams gathered by earlier notify=false calls of the step stay in to_notify_.
  for (const EventRecord& rec : scheduler_.events()) {
    Request& req = *rec.request;
    if (req.stream != nullptr) {
      RequestStream& stream = *req.stream;
      switch (rec.event.type) {
        case EventType::kNewTokens:
          stream.PushToken(req.token_ids.back(), rec.event.ts,
                           req.sampling.logprobs ? &logprobs_[rec.sampled_row] : nullptr,
                           /*notify=*/false);
          break;
        case EventType::kFinished:
          stream.Finish(rec.event, req.stop_token_id, req.error_message, /*notify=*/false,
                        req.counts);
          break;
        default:
          stream.PushEvent(rec.event, /*notify=*/false);
          break;
      }
      // A request's events of one step are consecutive: this skips its repeats.
      if (to_notify_.empty() || to_notify_.back() != &stream) to_notify_.push_back(&stream);
    }
    // Token outputs go one by one only to the observers that want every token; all observers
    // get the step's outputs in one OnTokenOutputs() (EngineObserver).
    const std::vector<EngineObserver*>& to =
        rec.event.type == EventType::kNewTokens ? every_token_observers_ : observers_;
    if (!to.empty()) {
      const RequestRecord record = MakeRecord(req);
      for (EngineObserver* observer : to) observer->OnRequestEvent(record, rec.event);
    }
  }
  scheduler_.ClearEvents();
  // The streams stay alive until the next step's ReleaseFinished().
  if (notify) NotifyStreams();
}

RequestRecord EngineCore::MakeRecord(const Request& req) {
  RequestRecord r;
  r.key = static_cast<uint64_t>(req.arrival_seq);
  r.request_id = req.request_id;
  r.arrival_ts = req.arrival_ts;
  r.prompt_token_ids = std::span<const int32_t>(req.token_ids.data(), req.num_prompt_tokens);
  r.num_output_tokens = req.num_output_tokens();
  r.max_tokens = req.sampling.max_tokens;
  r.params_n = req.params_n;
  r.reports_params_n = req.reports_params_n;
  r.counts = req.counts;
  return r;
}

void EngineCore::NotifyStreams() {
  // A stream may have been gathered by several dispatches of the step: wake it once, in the
  // order of its first event.
  notified_.clear();
  std::erase_if(to_notify_, [this](RequestStream* s) { return !notified_.insert(s).second; });
  RequestStream::NotifyAll(to_notify_);
  to_notify_.clear();
}

bool EngineCore::Step() {
  scheduler_.ReleaseFinished();
  const double drain_ts = clock_->Now();
  bool did_work = DrainInbox(drain_ts);
  // Every stream of the step is woken at its end, after the observers' OnStep: a client that sees
  // its request finish (an abort drained here too) finds the step counted in the metrics.
  DispatchEvents(/*notify=*/false);

  if (!scheduler_.has_unfinished_requests()) {
    scheduler_.ResetStats(drain_ts);  // an inbox-only step: no batch, fresh counters
  } else {
    // schedule -> execute -> sample -> update
    SchedulerOutput& plan = scheduler_.Schedule(clock_->Now());
    for (Request* req : plan.preempted) {
      if (req->matcher != nullptr) req->matcher_needs_replay = true;
    }
    // The masks are written on the mask worker while the executor runs (when it awaits them);
    // the guard waits for them before anything reads them here, and before the step ends on
    // every path.
    StartGrammarMasks(plan);
    const MaskFillGuard masks(mask_fill_);
    DispatchEvents(/*notify=*/false);
    const ScheduledBatch& batch = plan.batch;
    if (batch.num_seqs() > 0) {
      did_work = true;
      StatusOr<ExecutorOutput> result = ExecuteBatch(batch);
      FinishGrammarMasks();
      if (result.ok()) {
        Status shape = CheckOutput(batch, *result);
        if (!shape.ok()) result = shape;
      }
      if (!result.ok() && result.status().code() == StatusCode::kDeviceLost) {
        Die(result.status(), clock_->Now());
      } else if (!result.ok()) {
        scheduler_.FailScheduled(result.status(), clock_->Now());
      } else if (TakeOutputs(plan, *result)) {
        AdvanceMatchers(plan);
        scheduler_.Update(sampled_, clock_->Now());
        FinishGrammarErrors(clock_->Now());
        // Before the step's events: the outputs precede the FINISHED events they led to.
        const TokenOutputs& outputs = scheduler_.token_outputs();
        if (!outputs.request_keys.empty()) {
          for (EngineObserver* observer : observers_) observer->OnTokenOutputs(outputs);
        }
      } else {
        // Out of memory for the step's logprobs: the batch fails, the engine serves on.
        scheduler_.FailScheduled(
            ResourceExhausted("out of memory while delivering the batch's logprobs"),
            clock_->Now());
      }
      DispatchEvents(/*notify=*/false);
      to_notify_.insert(to_notify_.end(), prompt_streams_.begin(), prompt_streams_.end());
      prompt_streams_.clear();
    }
  }
  ReleaseFinishedState();
  has_live_requests_.store(scheduler_.has_unfinished_requests());
  if (did_work && !observers_.empty()) {
    const SchedulerStats& stats = scheduler_.stats();
    for (EngineObserver* observer : observers_) observer->OnStep(stats);
  }
  FlushKvCacheEvents();
  NotifyStreams();
  return did_work;
}

bool EngineCore::ReplayMatcher(Request& req) {
  req.matcher->Reset();
  for (int32_t i = req.num_prompt_tokens; i < req.num_tokens(); ++i) {
    if (req.matcher->is_terminated()) break;  // ignore_eos: the outputs after a stop token
    if (!req.matcher->AcceptToken(req.token_ids[i])) return false;
  }
  return true;
}

std::vector<int32_t> EngineCore::eos_token_ids() const {
  std::vector<int32_t> ids;
  if (eos_token_id_) ids.push_back(*eos_token_id_);
  const std::vector<int32_t>& extra = scheduler_.config().extra_eos_token_ids;
  ids.insert(ids.end(), extra.begin(), extra.end());
  return ids;
}

bool EngineCore::IsEosToken(const Request& req, int32_t token) const {
  if (req.eos_token_id && token == *req.eos_token_id) return true;
  const std::vector<int32_t>& extra = scheduler_.config().extra_eos_token_ids;
  return std::find(extra.begin(), extra.end(), token) != extra.end();
}

void EngineCore::StartGrammarMasks(SchedulerOutput& plan) {
  grammar_errors_.clear();
  mask_jobs_.clear();
  mask_fill_ = nullptr;
  ScheduledBatch& batch = plan.batch;
  int32_t num_rows = 0;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    num_rows += batch.sample[s] && plan.requests[s]->matcher != nullptr;
  }
  if (num_rows == 0) return;
  // Everything but the mask words is decided here, on the engine thread: the rows, the batch's
  // shape, which matchers replay. The fill touches only the jobs' matchers and mask words.
  const int32_t words = (vocab_size_ + 31) / 32;
  batch.bitmask_words = words;
  batch.token_bitmask.assign(static_cast<size_t>(num_rows) * words, 0u);
  batch.bitmask_row.assign(static_cast<size_t>(batch.num_seqs()), -1);
  int32_t row = 0;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    Request& req = *plan.requests[s];
    if (!batch.sample[s] || req.matcher == nullptr) continue;
    MaskJob job;
    job.req = &req;
    job.mask = std::span<uint32_t>(batch.token_bitmask.data() + static_cast<size_t>(row) * words,
                                   static_cast<size_t>(words));
    job.replay = req.matcher_needs_replay;
    req.matcher_needs_replay = false;
    mask_jobs_.push_back(job);
    batch.bitmask_row[s] = row++;
  }
  auto fill = std::make_shared<BitmaskFill>();
  auto run = [this, fill] {
    if (mask_fill_hook_) mask_fill_hook_();
    const auto start = std::chrono::steady_clock::now();
    for (MaskJob& job : mask_jobs_) FillMask(job);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    fill->Done(elapsed.count());
  };
  bool started = false;
  if (executor_->AwaitsBitmaskFill()) {
    try {
      started = mask_worker_.Run(run);
    } catch (const std::bad_alloc&) {
      started = false;
    }
  }
  if (!started) run();  // the masks complete before Execute()
  batch.bitmask_fill = fill;
  mask_fill_ = std::move(fill);
}

void EngineCore::FillMask(MaskJob& job) const {
  Request& req = *job.req;
  try {
    if (job.replay && !ReplayMatcher(req)) {
      // Cannot happen (the kept outputs were accepted once); the mask stays all zeros and the
      // request fails after this step.
      job.error = "structured output: replaying the kept outputs after a preemption failed";
      return;
    }
    if (req.matcher->is_terminated()) {
      // ignore_eos kept the request going after the grammar's stop token: only EOS again.
      if (req.eos_token_id) SetBit(job.mask, *req.eos_token_id);
      for (int32_t t : scheduler_.config().extra_eos_token_ids) SetBit(job.mask, t);
    } else {
      req.matcher->FillNextTokenBitmask(job.mask);
    }
  } catch (const std::bad_alloc&) {
    std::fill(job.mask.begin(), job.mask.end(), 0u);
    job.error = "structured output: out of memory while computing the token mask";
  }
}

void EngineCore::FinishGrammarMasks() {
  if (mask_fill_ == nullptr) return;
  mask_fill_->Wait();
  scheduler_.AddStructuredMaskStats(static_cast<int32_t>(mask_jobs_.size()),
                                    mask_fill_->fill_seconds(), mask_fill_->awaited_seconds());
  for (MaskJob& job : mask_jobs_) {
    if (job.error != nullptr) grammar_errors_.emplace_back(job.req->request_id, job.error);
  }
  mask_jobs_.clear();
  mask_fill_ = nullptr;
}

void EngineCore::AdvanceMatchers(const SchedulerOutput& plan) {
  const ScheduledBatch& batch = plan.batch;
  int32_t row = 0;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    if (!batch.sample[s]) continue;
    const int32_t token = sampled_[row++];
    Request& req = *plan.requests[s];
    if (req.matcher == nullptr || req.matcher_needs_replay) continue;
    const bool accepted =
        req.matcher->is_terminated() ? IsEosToken(req, token) : req.matcher->AcceptToken(token);
    if (!accepted) {
      grammar_errors_.emplace_back(req.request_id, "structured output: the sampled token " +
                                                       std::to_string(token) +
                                                       " is not allowed by the grammar");
    }
  }
}

void EngineCore::FinishGrammarErrors(double now) {
  for (const auto& [request_id, message] : grammar_errors_) {
    Request* req = scheduler_.Find(request_id);
    if (req == nullptr) continue;  // finished by this step's Update
    req->error_message = message;
    scheduler_.FinishRequest(request_id, FinishReason::kError, now);
  }
  grammar_errors_.clear();
}

void EngineCore::FlushKvCacheEvents() {
  BlockPool& pool = scheduler_.block_pool();
  if (kv_event_sink_ != nullptr && pool.has_events()) {
    kv_event_sink_->OnKvCacheEvents(pool.TakeEvents());
  }
}

std::future<bool> EngineCore::RequestPrefixCacheReset(bool reset_running_requests) {
  auto answer = std::make_shared<std::promise<bool>>();
  std::future<bool> result = answer->get_future();
  {
    MutexLock lock(inbox_mu_);
    if (stopping_ || dead_.load()) {
      answer->set_value(false);
      return result;
    }
    InboxItem item;
    item.reset = std::move(answer);
    item.reset_running_requests = reset_running_requests;
    inbox_.push_back(std::move(item));
  }
  inbox_cv_.notify_one();
  return result;
}

bool EngineCore::ResetPrefixCache() {
  const bool reset = scheduler_.block_pool().ResetPrefixCache();
  FlushKvCacheEvents();
  return reset;
}

Status EngineCore::CheckOutput(const ScheduledBatch& batch, const ExecutorOutput& out) const {
  if (out.sampled.size() != static_cast<size_t>(batch.num_sampled()) ||
      out.prompt_logprobs.size() != static_cast<size_t>(batch.num_prompt_logit_rows())) {
    return Internal("executor returned " + std::to_string(out.sampled.size()) +
                    " sampled rows and " + std::to_string(out.prompt_logprobs.size()) +
                    " prompt-logprob rows for a batch of " + std::to_string(batch.num_sampled()) +
                    " and " + std::to_string(batch.num_prompt_logit_rows()));
  }
  for (const TokenLogprobs& t : out.sampled) {
    if (t.token_id < 0 || t.token_id >= vocab_size_) {
      return Internal("executor sampled token " + std::to_string(t.token_id) +
                      " outside the vocabulary of " + std::to_string(vocab_size_));
    }
  }
  return Status::Ok();
}

bool EngineCore::TakeOutputs(const SchedulerOutput& plan, ExecutorOutput& result) {
  const int32_t num_sampled = plan.batch.num_sampled();
  try {
    logprobs_ = std::move(result.sampled);
    sampled_.resize(num_sampled);
    for (int32_t row = 0; row < num_sampled; ++row) sampled_[row] = logprobs_[row].token_id;
    // Before Update() and DispatchEvents(): a stream gets its prompt logprobs ahead of the token
    // and finish of the same step.
    PushPromptLogprobs(plan, result);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

void EngineCore::PushPromptLogprobs(const SchedulerOutput& plan, ExecutorOutput& result) {
  const ScheduledBatch& batch = plan.batch;
  int32_t row = 0;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t count = batch.num_prompt_logits[s];
    if (count == 0) continue;
    const Request& req = *plan.requests[s];
    std::vector<TokenLogprobs> out(
        std::make_move_iterator(result.prompt_logprobs.begin() + row),
        std::make_move_iterator(result.prompt_logprobs.begin() + row + count));
    row += count;
    if (req.stream != nullptr) {
      req.stream->PushPromptLogprobs(std::move(out), /*notify=*/false);
      prompt_streams_.push_back(req.stream.get());
    }
  }
}

StatusOr<ExecutorOutput> EngineCore::ExecuteBatch(const ScheduledBatch& batch) {
  // The requests' error says what failed, never the exception's own text (a library's message,
  // paths, addresses: internals); that goes to stderr for the operator.
  try {
    return executor_->Execute(batch);
  } catch (const std::bad_alloc&) {
    return Internal("the executor ran out of memory");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tinyserve: the executor threw (the step's requests fail): %s\n",
                 e.what());
    return Internal("the executor threw an exception (its message is in the server log)");
  } catch (...) {
    return Internal("the executor threw an unknown exception");
  }
}

void EngineCore::ReleaseFinishedState() {
  std::vector<uint64_t> keys = scheduler_.TakeReleasedKeys();
  if (!keys.empty()) executor_->Release(keys);
}

void EngineCore::Die(const Status& status, double now) {
  {
    MutexLock lock(inbox_mu_);
    death_status_ = status;
    dead_.store(true);  // from here on nothing enters the inbox
  }
  scheduler_.FailScheduled(status, now);
  DrainInbox(now);  // requests submitted before the death: queued, then failed below
  scheduler_.FinishAll(FinishReason::kError, now, status.ToString());
}

void EngineCore::DieOfStepException(const char* what) {
  try {
    Die(Internal(std::string("an engine step failed: ") + what), clock_->Now());
    DispatchEvents();
    scheduler_.ReleaseFinished();
  } catch (...) {
    // Out of memory even for that: at least refuse new work.
    MutexLock lock(inbox_mu_);
    dead_.store(true);
  }
  NotifyStreams();
  has_live_requests_.store(false);
}

void EngineCore::Loop() {
  while (true) {
    {
      MutexLock lock(inbox_mu_);
      while (!stopping_ && inbox_.empty() && !has_live_requests_.load()) lock.Wait(inbox_cv_);
      if (stopping_) return;
    }
    try {
      Step();
    } catch (const std::exception& e) {
      // Nothing of a step may end the process (an uncaught exception on this thread would call
      // std::terminate). The step's state is unknown: the engine dies, every live request
      // finishes with reason error, /health says 503.
      DieOfStepException(e.what());
    }
  }
}

void EngineCore::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void EngineCore::Stop() {
  {
    MutexLock lock(inbox_mu_);
    if (stopping_ && !thread_.joinable() && inbox_.empty() && !has_live_requests_.load()) return;
    stopping_ = true;
  }
  inbox_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The engine thread is gone: this thread owns the engine state now.
  const double now = clock_->Now();
  scheduler_.ReleaseFinished();
  DrainInbox(now);
  scheduler_.FinishAll(FinishReason::kAbort, now);
  ReleaseFinishedState();
  DispatchEvents();
  scheduler_.ReleaseFinished();
  has_live_requests_.store(false);
}

}  // namespace tinyserve
