// EngineObserver: how metrics (and tracing) see the engine, whichever frontend drives it.
//
// The observer interface of the engine is this header with the plain-value headers it includes
// (events.h: RequestEvent, RequestRecord, TokenOutputs; scheduler_stats.h: SchedulerStats); the
// time base of every stamp is base/clock.h. They are the only engine headers that metrics/
// includes (tests/arrows checks it); none of them includes the engine's Request, Scheduler or
// block pool.
//
// EngineCore calls every registered observer on the engine thread:
//  - OnRequestEvent() for each lifecycle event of each request (QUEUED, SCHEDULED, PREEMPTED,
//    FINISHED) with a RequestRecord of the request; an observer whose wants_every_token_event() is
//    true also gets each NEW_TOKENS there (one call per token output: tests, recorders);
//  - OnTokenOutputs() once per step that produced tokens: that step's NEW_TOKENS, as the keys of
//    the requests that got a token and the step's output time. Observers that opt out of per-token
//    events (metrics, tracing: the per-token path must cost nothing) learn of tokens only here;
//  - OnStep() once per step that did work, with that step's SchedulerStats.
// The engine reports stamps only; observers compute every interval (TTFT, ITL, phases) from them.
// Events of one request arrive in order: a step's OnTokenOutputs() comes after the SCHEDULED and
// PREEMPTED events of that step and before its FINISHED events, and all of a step's calls precede
// its OnStep(). Observers must be cheap and must not call back into the engine; the references
// and views are valid only during the call. Implemented by metrics/.
#pragma once

#include "engine/events.h"
#include "engine/scheduler_stats.h"

namespace tinyserve {

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnRequestEvent(const RequestRecord& request, const RequestEvent& event) = 0;
  virtual void OnTokenOutputs(const TokenOutputs& /*outputs*/) {}
  virtual void OnStep(const SchedulerStats& stats) = 0;
  // Asked once, when the observer is added to the engine.
  virtual bool wants_every_token_event() const { return true; }
};

}  // namespace tinyserve
