// StatsLogger: the periodic stats line, as vLLM's LoggingStatLogger writes it (DESIGN §5):
//
//   Engine 000: Avg prompt throughput: 812.0 tokens/s, Avg generation throughput: 96.4 tokens/s,
//   Running: 12 reqs, Waiting: 3 reqs, Preemptions: 2, KV cache usage: 71.3%,
//   Prefix cache hit rate: 45.0%
//
// (one line). Throughputs and preemptions are over the interval since the previous line; running,
// waiting and KV usage are those after the last step; the hit rate is prefix-cache hit tokens /
// queried tokens over the interval (0.0% when nothing was queried). A line is written at most
// every `interval_s` seconds of the injected Clock, and only while busy: the interval produced or
// preempted something, or requests are running or waiting; one more line follows the last busy
// interval, so the log shows the engine going idle. When the interval had structured-output
// (grammar-masked) rows, the line ends with
// ", Structured output mask: 0.215 ms/step fill, 0.012 ms/step awaited (37 rows)": per step that
// had any, over the interval, the time the engine spent computing the masks and the part of it the
// executor blocked waiting for them (the rest overlapped the forward pass).
//
// OnStep (engine thread) accumulates and calls MaybeLog(); a frontend may also call MaybeLog()
// periodically from its own thread so the idle transition is logged without steps. Thread-safe
// (one mutex). `clock` must outlive the logger; `sink` is called with the mutex held.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "base/clock.h"
#include "base/thread_annotations.h"
#include "engine/engine_observer.h"

namespace tinyserve {

class StatsLogger final : public EngineObserver {
 public:
  using Sink = std::function<void(const std::string& line)>;

  StatsLogger(const Clock* clock, Sink sink, double interval_s = 5.0);

  void OnRequestEvent(const RequestRecord&, const RequestEvent&) override {}
  void OnStep(const SchedulerStats& stats) override;
  bool wants_every_token_event() const override { return false; }

  // Writes the line if `interval_s` has passed since the last one (or since construction) and
  // there is something to report. Returns true iff it wrote one.
  bool MaybeLog();

 private:
  struct Interval {
    int64_t prompt_tokens = 0;
    int64_t generation_tokens = 0;
    int64_t preemptions = 0;
    int64_t cache_queries = 0;
    int64_t cache_hits = 0;
    int64_t structured_steps = 0;  // steps with grammar-masked rows
    int64_t structured_rows = 0;
    double structured_mask_seconds = 0.0;
    double structured_mask_awaited_seconds = 0.0;
  };
  bool MaybeLogLocked(double now) TS_REQUIRES(mu_);

  const Clock* const clock_;
  const Sink sink_;
  const double interval_s_;

  Mutex mu_;
  double last_log_ts_ TS_GUARDED_BY(mu_);
  Interval interval_ TS_GUARDED_BY(mu_);
  int32_t num_running_ TS_GUARDED_BY(mu_) = 0;
  int32_t num_waiting_ TS_GUARDED_BY(mu_) = 0;
  double kv_cache_usage_ TS_GUARDED_BY(mu_) = 0;
  bool last_was_busy_ TS_GUARDED_BY(mu_) = false;
};

}  // namespace tinyserve
