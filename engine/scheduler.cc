#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <tuple>

namespace tinyserve {
namespace {

// Priority order: (priority, arrival, acceptance order); the largest is the preemption victim.
bool PriorityLess(const Request* a, const Request* b) {
  return std::tie(a->priority, a->arrival_ts, a->arrival_seq) <
         std::tie(b->priority, b->arrival_ts, b->arrival_seq);
}

}  // namespace

const char* PreemptionReasonName(PreemptionReason reason) {
  switch (reason) {
    case PreemptionReason::kKvFull:
      return "kv_full";
    case PreemptionReason::kPriority:
      return "priority";
    case PreemptionReason::kResetPrefixCache:
      return "reset_prefix_cache";
  }
  return "unknown";
}

Scheduler::Scheduler(const SchedulerConfig& config, BlockHashFn hash_fn)
    : config_(config),
      max_model_len_(std::min(config.max_model_len, config.num_kv_blocks * config.block_size)),
      kv_(config.num_kv_blocks, config.block_size, config.enable_prefix_caching, hash_fn) {
  assert(config.max_num_seqs >= 1 && config.max_num_batched_tokens >= 1);
  assert(max_model_len_ >= 2);
}

void Scheduler::Record(Request* req, EventType type, double ts) {
  EventRecord rec;
  rec.request = req;
  rec.event.type = type;
  rec.event.ts = ts;
  events_.push_back(rec);
}

void Scheduler::AddRequest(std::unique_ptr<Request> req, double now) {
  assert(req->num_prompt_tokens >= 1 && req->num_prompt_tokens < max_model_len_);
  Request* r = req.get();
  r->arrival_seq = next_arrival_seq_++;
  r->status = RequestStatus::kWaiting;
  const bool inserted = requests_.emplace(r->request_id, std::move(req)).second;
  assert(inserted);
  (void)inserted;
  InsertWaiting(r, /*at_head=*/false);
  Record(r, EventType::kQueued, now);
}

Request* Scheduler::Find(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::InsertWaiting(Request* req, bool at_head) {
  if (config_.policy == SchedulingPolicy::kFcfs) {
    if (at_head) {
      waiting_.push_front(req);
    } else {
      waiting_.push_back(req);
    }
    return;
  }
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), req, PriorityLess), req);
}

void Scheduler::RemoveWaiting(Request* req) {
  auto it = std::find(waiting_.begin(), waiting_.end(), req);
  assert(it != waiting_.end());
  waiting_.erase(it);
  if (req->status == RequestStatus::kPreempted) --num_preempted_waiting_;
}

bool Scheduler::FinishRequest(const std::string& request_id, FinishReason reason, double now) {
  Request* req = Find(request_id);
  if (req == nullptr) return false;
  if (req->status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), req));
  } else {
    RemoveWaiting(req);
  }
  Finish(req, reason, now);
  return true;
}

void Scheduler::FinishAll(FinishReason reason, double now, const std::string& error_message) {
  while (!running_.empty() || !waiting_.empty()) {
    Request* req = running_.empty() ? waiting_.back() : running_.back();
    if (!error_message.empty()) req->error_message = error_message;
    FinishRequest(req->request_id, reason, now);
  }
}

void Scheduler::Finish(Request* req, FinishReason reason, double now) {
  kv_.Free(*req);
  if (req->registered_with_executor) {
    pending_releases_.push_back(static_cast<uint64_t>(req->arrival_seq));
    req->registered_with_executor = false;
  }
  req->status = RequestStatus::kFinished;
  req->finish_reason = reason;
  Record(req, EventType::kFinished, now);
  events_.back().event.finish_reason = reason;
  auto it = requests_.find(req->request_id);
  finished_.push_back(std::move(it->second));
  requests_.erase(it);
}

int32_t Scheduler::NumNewTokens(const Request& req, int32_t budget) const {
  int32_t n = req.num_tokens() - req.num_computed_tokens;
  if (config_.long_prefill_token_threshold > 0) {
    n = std::min(n, config_.long_prefill_token_threshold);
  }
  return std::min(n, budget);
}

void Scheduler::Preempt(Request* req, PreemptionReason reason, double now) {
  kv_.Free(*req);
  req->num_computed_tokens = 0;
  req->status = RequestStatus::kPreempted;
  ++num_preempted_waiting_;
  InsertWaiting(req, /*at_head=*/true);
  out_.preempted.push_back(req);
  ++stats_.num_preemptions;
  ++stats_.num_preemptions_by_reason[static_cast<int>(reason)];
  Record(req, EventType::kPreempted, now);
}

std::vector<Request*> Scheduler::PreemptAllRunning(double now) {
  std::vector<Request*> preempted(running_.rbegin(), running_.rend());
  running_.clear();
  // The most recently admitted first: each goes to the head of the waiting queue, so they resume
  // in admission order.
  for (Request* req : preempted) Preempt(req, PreemptionReason::kResetPrefixCache, now);
  // Preempt() counted them in this step's stats, which the next Schedule() resets: they are
  // counted there instead.
  const auto n = static_cast<int32_t>(preempted.size());
  stats_.num_preemptions -= n;
  stats_.num_preemptions_by_reason[static_cast<int>(PreemptionReason::kResetPrefixCache)] -= n;
  num_unreported_reset_preemptions_ += n;
  return preempted;
}

void Scheduler::ResetStats(double now) {
  stats_.Reset(now);
  stats_.num_preemptions = num_unreported_reset_preemptions_;
  stats_.num_preemptions_by_reason[static_cast<int>(PreemptionReason::kResetPrefixCache)] =
      num_unreported_reset_preemptions_;
  num_unreported_reset_preemptions_ = 0;
}

bool Scheduler::ResetPrefixCache(bool preempt_running, double now,
                                 std::vector<Request*>* preempted) {
  if (preempt_running) *preempted = PreemptAllRunning(now);
  return kv_.pool().ResetPrefixCache();
}

Request* Scheduler::PreemptVictim(const Request& needy, double now, size_t* next_index,
                                  int32_t* budget) {
  size_t victim_index = running_.size() - 1;  // FCFS: the most recently admitted
  if (config_.policy == SchedulingPolicy::kPriority) {
    for (size_t i = 0; i < running_.size(); ++i) {
      if (PriorityLess(running_[victim_index], running_[i])) victim_index = i;
    }
  }
  Request* victim = running_[victim_index];
  running_.erase(running_.begin() + static_cast<ptrdiff_t>(victim_index));
  if (victim_index < *next_index) {
    // Planned earlier in this step (priority policy only): take back its tokens.
    --*next_index;
    auto it = std::find(out_.requests.begin(), out_.requests.end(), victim);
    const size_t k = static_cast<size_t>(it - out_.requests.begin());
    *budget += out_.num_new_tokens[k];
    out_.requests.erase(it);
    out_.num_new_tokens.erase(out_.num_new_tokens.begin() + static_cast<ptrdiff_t>(k));
  }
  const bool for_priority =
      config_.policy == SchedulingPolicy::kPriority && victim->priority > needy.priority;
  Preempt(victim, for_priority ? PreemptionReason::kPriority : PreemptionReason::kKvFull, now);
  return victim;
}

SchedulerOutput& Scheduler::Schedule(double now) {
  out_.requests.clear();
  out_.num_new_tokens.clear();
  out_.preempted.clear();
  token_outputs_ = TokenOutputs{};
  ResetStats(now);
  int32_t budget = config_.max_num_batched_tokens;
  static const std::vector<int32_t> kNoHits;

  // 1. Running requests, in order.
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request* req = running_[i];
    const int32_t n = NumNewTokens(*req, budget);
    bool can_schedule = true;
    while (!kv_.CanAllocate(*req, kNoHits, n)) {
      if (PreemptVictim(*req, now, &i, &budget) == req) {
        can_schedule = false;
        break;
      }
    }
    if (!can_schedule) break;
    kv_.Allocate(*req, kNoHits, n);
    out_.requests.push_back(req);
    out_.num_new_tokens.push_back(n);
    budget -= n;
    ++i;
  }

  // 2. Waiting requests, only in a step that preempted nothing.
  while (out_.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Request* req = waiting_.front();
    int32_t num_hit_tokens = kv_.FindCachedPrefix(*req, &hits_);
    if (req->num_prompt_logprob_positions < req->num_prompt_logprob_targets()) {
      // Prompt logprobs still owed: only positions already delivered may come from the cache.
      const size_t max_hits =
          static_cast<size_t>(req->num_prompt_logprob_positions / config_.block_size);
      if (hits_.size() > max_hits) hits_.resize(max_hits);
      num_hit_tokens = static_cast<int32_t>(hits_.size()) * config_.block_size;
    }
    int32_t n = req->num_tokens() - num_hit_tokens;
    if (config_.long_prefill_token_threshold > 0) {
      n = std::min(n, config_.long_prefill_token_threshold);
    }
    n = std::min(n, budget);
    if (!kv_.CanAllocate(*req, hits_, n)) break;
    waiting_.pop_front();
    const bool is_resumed = req->status == RequestStatus::kPreempted;
    if (is_resumed) {
      --num_preempted_waiting_;
    } else {
      stats_.prefix_cache_queries += req->num_tokens();
      stats_.prefix_cache_hits += num_hit_tokens;
      req->counts.num_cached_prompt_tokens = std::min(num_hit_tokens, req->num_prompt_tokens);
    }
    kv_.Allocate(*req, hits_, n);
    req->status = RequestStatus::kRunning;
    running_.push_back(req);
    Record(req, EventType::kScheduled, now);
    out_.requests.push_back(req);
    out_.num_new_tokens.push_back(n);
    budget -= n;
  }

  BuildBatch();
  return out_;
}

void Scheduler::BuildBatch() {
  ScheduledBatch& b = out_.batch;
  b.token_ids.clear();
  b.positions.clear();
  b.slot_mapping.clear();
  b.query_start.clear();
  b.context_lens.clear();
  b.sample.clear();
  b.prompt_logits_start.clear();
  b.num_prompt_logits.clear();
  b.block_tables.clear();
  b.request_keys.clear();
  b.output_index.clear();
  b.new_requests.clear();
  b.prompt_logit_targets.clear();
  b.prompt_logit_num_top.clear();
  b.bitmask_words = 0;
  b.token_bitmask.clear();
  b.bitmask_row.clear();
  b.bitmask_fill.reset();
  size_t max_blocks = 0;
  for (const Request* req : out_.requests) max_blocks = std::max(max_blocks, req->block_ids.size());
  b.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  b.query_start.push_back(0);
  for (size_t s = 0; s < out_.requests.size(); ++s) {
    Request& req = *out_.requests[s];
    const int32_t start = req.num_computed_tokens;
    const int32_t end = start + out_.num_new_tokens[s];
    for (int32_t p = start; p < end; ++p) {
      b.token_ids.push_back(req.token_ids[p]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(kv_.Slot(req, p));
    }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(end);
    b.sample.push_back(end == req.num_tokens() ? 1 : 0);
    // Prompt logprobs: the positions of this chunk not delivered yet (start never exceeds
    // num_prompt_logprob_positions: prefix hits stop there, and chunks are contiguous).
    const int32_t first = std::max(start, req.num_prompt_logprob_positions);
    const int32_t last = std::min(end, req.num_prompt_logprob_targets());
    b.prompt_logits_start.push_back(last > first ? first - start : 0);
    b.num_prompt_logits.push_back(last > first ? last - first : 0);
    for (int32_t p = first; p < last; ++p) {  // the logits at position p score prompt token p + 1
      b.prompt_logit_targets.push_back(req.token_ids[p + 1]);
      b.prompt_logit_num_top.push_back(*req.sampling.prompt_logprobs);
    }
    b.request_keys.push_back(static_cast<uint64_t>(req.arrival_seq));
    b.output_index.push_back(req.num_output_tokens());
    if (!req.registered_with_executor) {
      std::vector<int32_t> eos_ids;
      if (req.eos_token_id) eos_ids.push_back(*req.eos_token_id);
      for (int32_t t : config_.extra_eos_token_ids) {
        if (std::find(eos_ids.begin(), eos_ids.end(), t) == eos_ids.end()) eos_ids.push_back(t);
      }
      b.new_requests.push_back({static_cast<uint64_t>(req.arrival_seq), req.sampling, req.seed,
                                std::move(eos_ids), req.token_ids, req.num_prompt_tokens});
      req.registered_with_executor = true;
    }
    b.block_tables.insert(b.block_tables.end(), req.block_ids.begin(), req.block_ids.end());
    b.block_tables.resize(b.block_tables.size() + (max_blocks - req.block_ids.size()), -1);
    // By kind: [start, recomputed_end) was computed before (recompute), the rest is new; each
    // part splits at the prompt's end.
    const int32_t recomputed_end = std::max(start, std::min(end, req.max_computed_tokens));
    const int32_t prompt_end = req.num_prompt_tokens;
    const int32_t recomputed_prompt = std::max(0, std::min(recomputed_end, prompt_end) - start);
    const int32_t new_prompt = std::max(0, std::min(end, prompt_end) - recomputed_end);
    stats_.num_computed_tokens += end - start;
    stats_.num_recomputed_tokens += recomputed_end - start;
    stats_.num_recomputed_prompt_tokens += recomputed_prompt;
    stats_.num_prefill_computed_tokens += new_prompt;
    stats_.num_decode_tokens += (end - recomputed_end) - new_prompt;
    req.counts.num_recomputed_prompt_tokens += recomputed_prompt;
    req.counts.num_recomputed_output_tokens += (recomputed_end - start) - recomputed_prompt;
  }
  stats_.num_scheduled_seqs = static_cast<int32_t>(out_.requests.size());
}

bool Scheduler::CheckStop(Request& req) {
  const SamplingParams& sp = req.sampling;
  if (req.num_tokens() >= max_model_len_ || req.num_output_tokens() >= sp.max_tokens) {
    req.finish_reason = FinishReason::kLength;
    return true;
  }
  if (req.num_output_tokens() < sp.min_tokens) return false;
  const int32_t last = req.token_ids.back();
  if (!sp.ignore_eos &&
      ((req.eos_token_id && last == *req.eos_token_id) ||
       std::find(config_.extra_eos_token_ids.begin(), config_.extra_eos_token_ids.end(), last) !=
           config_.extra_eos_token_ids.end())) {
    req.finish_reason = FinishReason::kStop;
    return true;
  }
  if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), last) !=
      sp.stop_token_ids.end()) {
    req.finish_reason = FinishReason::kStop;
    req.stop_token_id = last;
    return true;
  }
  return false;
}

void Scheduler::Update(const std::vector<int32_t>& sampled, double now) {
  int32_t row = 0;
  token_outputs_.ts = now;
  output_keys_.resize(sampled.size());
  bool any_finished = false;
  for (size_t s = 0; s < out_.requests.size(); ++s) {
    Request* req = out_.requests[s];
    req->num_computed_tokens += out_.num_new_tokens[s];
    req->max_computed_tokens = std::max(req->max_computed_tokens, req->num_computed_tokens);
    kv_.CacheComputedBlocks(*req);
    req->num_prompt_logprob_positions += out_.batch.num_prompt_logits[s];
    if (!out_.batch.sample[s]) continue;
    assert(row < static_cast<int32_t>(sampled.size()));
    req->token_ids.push_back(sampled[row]);
    if (req->num_output_tokens() == 1) {
      stats_.num_prompt_tokens += req->num_prompt_tokens;
      stats_.num_prompt_tokens_cached += req->counts.num_cached_prompt_tokens;
    }
    ++stats_.num_generation_tokens;
    output_keys_[row] = static_cast<uint64_t>(req->arrival_seq);
    Record(req, EventType::kNewTokens, now);
    events_.back().event.num_tokens = 1;
    events_.back().sampled_row = row;
    ++row;
    if (CheckStop(*req)) {
      req->status = RequestStatus::kFinished;  // removed from running_ below
      any_finished = true;
    }
  }
  token_outputs_.request_keys = std::span<const uint64_t>(output_keys_.data(), row);
  if (!any_finished) return;
  auto is_finished = [](const Request* r) { return r->is_finished(); };
  std::vector<Request*> done;
  for (Request* r : running_) {
    if (is_finished(r)) done.push_back(r);
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(), is_finished), running_.end());
  for (Request* r : done) Finish(r, r->finish_reason, now);
}

void Scheduler::FailScheduled(const Status& status, double now) {
  for (Request* req : out_.requests) {
    running_.erase(std::find(running_.begin(), running_.end(), req));
    req->error_message = status.ToString();
    Finish(req, FinishReason::kError, now);
  }
  out_.requests.clear();
  out_.num_new_tokens.clear();
}

const SchedulerStats& Scheduler::stats() {
  const BlockPool& pool = kv_.pool();
  stats_.num_running = static_cast<int32_t>(running_.size());
  stats_.num_waiting = static_cast<int32_t>(waiting_.size());
  stats_.num_preempted_waiting = num_preempted_waiting_;
  stats_.num_kv_blocks = pool.num_blocks();
  stats_.num_used_blocks = pool.num_used_blocks();
  stats_.num_cached_blocks = pool.num_cached_free_blocks();
  stats_.num_free_blocks = pool.num_uncached_free_blocks();
  stats_.kv_cache_usage = pool.usage();
  return stats_;
}

}  // namespace tinyserve
