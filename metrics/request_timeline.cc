#include "metrics/request_timeline.h"

#include <cassert>

namespace tinyserve {

RequestIntervals RequestTimeline::Intervals() const {
  assert(is_finished());
  RequestIntervals r = Phases();
  r.e2e = *finished_ts - arrival_ts;
  return r;
}

RequestIntervals RequestTimeline::Phases() const {
  RequestIntervals r;
  if (!queued_ts || !first_scheduled_ts) return r;
  r.queue = *first_scheduled_ts - *queued_ts;
  if (!first_token_ts) return r;
  r.prefill = *first_token_ts - *first_scheduled_ts;
  r.decode = last_token_ts - *first_token_ts;
  r.inference = *r.prefill + *r.decode;
  r.ttft = (*queued_ts - arrival_ts) + *r.queue + *r.prefill;
  if (num_generation_tokens > 1) r.tpot = *r.decode / (num_generation_tokens - 1);
  return r;
}

}  // namespace tinyserve
