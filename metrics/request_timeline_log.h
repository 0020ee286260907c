// RequestTimelineLog: the recent lives of requests, for GET /debug/request_timelines and the
// /dashboard's per-request timeline.
//
// An EngineObserver built on the same events and RequestTimeline as the metrics (DESIGN §4). It
// keeps every live request (queued, prefill, decode or preempted) and the last `max_finished`
// finished ones, each with the spans the trace writer draws:
//   queued     QUEUED -> first SCHEDULED (or -> now / FINISHED if never scheduled)
//   prefill    first SCHEDULED -> first token (or -> now / FINISHED)
//   decode     first token -> last token (a live request's runs to now)
//   preempted  PREEMPTED -> next SCHEDULED (or -> now / FINISHED); the first kMaxPreemptionSpans
//              of a request are kept, later ones only counted
// Memory is bounded: live requests are what the engine holds, finished ones a ring of
// `max_finished`, each entry a few dozen bytes plus its id and spans.
//
// Thread-safety: observer calls come from the engine thread; RenderJson() may be called from any
// thread meanwhile (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "engine/engine_observer.h"
#include "metrics/request_timeline.h"
#include "metrics/token_output_tracker.h"

namespace tinyserve {

class RequestTimelineLog final : public EngineObserver {
 public:
  static constexpr size_t kMaxPreemptionSpans = 16;

  explicit RequestTimelineLog(size_t max_finished = 64) : max_finished_(max_finished) {}

  void OnRequestEvent(const RequestRecord& request, const RequestEvent& event) override;
  void OnTokenOutputs(const TokenOutputs& outputs) override;
  void OnStep(const SchedulerStats& stats) override;
  bool wants_every_token_event() const override { return false; }

  // JSON: {"now": now, "requests": [{"id", "state" (queued|prefill|decode|preempted|finished),
  // "arrival", "finish_reason" (null while live), "num_preemptions", "generated_tokens" (null while
  // live), "spans": [{"phase", "start", "end"}]}]}: finished requests first (oldest first), then
  // live ones (by arrival). Times are seconds of the engine Clock; open spans end at `now`
  // (REQUIRES: `now`
  // >= every stamp seen, e.g. the engine Clock's Now()). Thread-safe.
  std::string RenderJson(double now) const;

  size_t num_live() const;
  size_t num_finished() const;

 private:
  struct Entry {
    std::string id;
    uint64_t key = 0;
    RequestTimeline timeline;
    std::vector<std::pair<double, double>> preemptions;  // [start, end); end < 0: still open
  };
  static void AppendEntryJson(const Entry& e, double now, std::string* out);

  const size_t max_finished_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Entry> live_ TS_GUARDED_BY(mu_);
  std::deque<Entry> finished_ TS_GUARDED_BY(mu_);
  TokenOutputTracker outputs_ TS_GUARDED_BY(mu_);
};

}  // namespace tinyserve
