// EngineObserver: how metrics (and tracing) see the engine, whichever frontend drives it.
//
// EngineCore calls every registered observer on the engine thread: OnRequestEvent() for each
// lifecycle event of each request (QUEUED, SCHEDULED, PREEMPTED, NEW_TOKENS, FINISHED; on
// FINISHED the Request holds all its stamps: arrival, queued, first scheduled, first token, last
// token, finished, preemptions, token counts), and OnStep() once per step that did work, with that
// step's SchedulerStats. Observers must be cheap and must not call back into the engine; the
// references are valid only during the call. Implemented by metrics/.
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
};

}  // namespace tinyserve
