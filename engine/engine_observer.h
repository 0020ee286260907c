// EngineObserver: how metrics (and tracing) see the engine, whichever frontend drives it.
//
// EngineCore calls every registered observer on the engine thread: OnRequestEvent() for each
// lifecycle event of each request (QUEUED, SCHEDULED, PREEMPTED, NEW_TOKENS, FINISHED), and
// OnStep() once per step that did work, with that step's SchedulerStats. An observer whose
// wants_every_token_event() is false (metrics, tracing: the per-token path must cost nothing)
// gets only a request's first NEW_TOKENS; its later outputs reach it summarized in the step's
// SchedulerStats (num_generation_tokens, and one inter-token-latency sample per output in
// itl_groups). On FINISHED the Request holds all its stamps: arrival, queued, first scheduled,
// first token, last token, finished, preemptions, token counts. Events of one request arrive in
// order, and a step's OnRequestEvent() calls precede its OnStep(). Observers must be cheap and
// must not call back into the engine; the references are valid only during the call.
// Implemented by metrics/.
#pragma once

#include "engine/events.h"
#include "engine/request.h"
#include "engine/scheduler_stats.h"

namespace tinyserve {

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnRequestEvent(const Request& request, const RequestEvent& event) = 0;
  virtual void OnStep(const SchedulerStats& stats) = 0;
  // Asked once, when the observer is added to the engine.
  virtual bool wants_every_token_event() const { return true; }
};

}  // namespace tinyserve
