#include "metrics/stats_logger.h"

#include <cstdio>
#include <string>

namespace tinyserve {

StatsLogger::StatsLogger(const Clock* clock, Sink sink, double interval_s)
    : clock_(clock), sink_(std::move(sink)), interval_s_(interval_s), last_log_ts_(clock->Now()) {}

void StatsLogger::OnStep(const SchedulerStats& s) {
  const double now = clock_->Now();
  MutexLock lock(mu_);
  interval_.prompt_tokens += s.num_prompt_tokens;
  interval_.generation_tokens += s.num_generation_tokens;
  interval_.preemptions += s.num_preemptions;
  interval_.cache_queries += s.prefix_cache_queries;
  interval_.cache_hits += s.prefix_cache_hits;
  if (s.num_structured_seqs > 0) {
    ++interval_.structured_steps;
    interval_.structured_rows += s.num_structured_seqs;
    interval_.structured_mask_seconds += s.structured_mask_seconds;
    interval_.structured_mask_awaited_seconds += s.structured_mask_awaited_seconds;
  }
  num_running_ = s.num_running;
  num_waiting_ = s.num_waiting;
  kv_cache_usage_ = s.kv_cache_usage;
  MaybeLogLocked(now);
}

bool StatsLogger::MaybeLog() {
  const double now = clock_->Now();
  MutexLock lock(mu_);
  return MaybeLogLocked(now);
}

bool StatsLogger::MaybeLogLocked(double now) {
  const double elapsed = now - last_log_ts_;
  if (elapsed < interval_s_) return false;
  const Interval& iv = interval_;
  const bool busy = iv.prompt_tokens > 0 || iv.generation_tokens > 0 || iv.preemptions > 0 ||
                    num_running_ > 0 || num_waiting_ > 0;
  const bool log = busy || last_was_busy_;
  if (log) {
    const double hit_rate = iv.cache_queries > 0 ? 100.0 * static_cast<double>(iv.cache_hits) /
                                                       static_cast<double>(iv.cache_queries)
                                                 : 0.0;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: "
                  "%.1f tokens/s, Running: %d reqs, Waiting: %d reqs, Preemptions: %lld, KV "
                  "cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
                  static_cast<double>(iv.prompt_tokens) / elapsed,
                  static_cast<double>(iv.generation_tokens) / elapsed, num_running_, num_waiting_,
                  static_cast<long long>(iv.preemptions), 100.0 * kv_cache_usage_, hit_rate);
    std::string text = line;
    if (iv.structured_steps > 0) {
      const double steps = static_cast<double>(iv.structured_steps);
      std::snprintf(line, sizeof(line),
                    ", Structured output mask: %.3f ms/step fill, %.3f ms/step awaited (%lld rows)",
                    1e3 * iv.structured_mask_seconds / steps,
                    1e3 * iv.structured_mask_awaited_seconds / steps,
                    static_cast<long long>(iv.structured_rows));
      text += line;
    }
    sink_(text);
  }
  last_was_busy_ = busy;
  last_log_ts_ = now;
  interval_ = Interval{};
  return log;
}

}  // namespace tinyserve
