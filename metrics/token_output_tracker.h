// TokenOutputTracker: every request's token outputs from the engine's per-step TokenOutputs
// (DESIGN §4), with no work per token in a steady decode step.
//
// Each step that produced tokens reports them as one TokenOutputs: the step's output time and the
// keys of the requests that got a token. An output's inter-token latency is the gap since its
// request's previous output. The tracker keeps the keys of the last output step: a request that
// got a token there and gets one now had its previous output at that step's time, so all such
// outputs share one gap, this step's time minus that step's. Comparing the two key lists finds
// them: one memcmp when the batch did not change, otherwise a merge that is linear in the batch
// and looks up only the requests that join or leave (in the engine's running order, the requests
// that stay keep their relative order; if they did not, the results would be the same, only the
// merge slower).
//
// Only a joining output (a first token, a request back after a preemption or after a step
// without a token for it) is applied to the request's RequestTimeline, as a NEW_TOKENS event; a
// request that leaves gets last_token_ts = the last output step's time. So while a timeline is
// `in_last_output_step`, its last_token_ts and num_generation_tokens lag behind: Settle() brings
// the output time up to date (call it before applying FINISHED; take the token count from the
// FINISHED record).
//
// A plain value; not thread-safe.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/events.h"
#include "metrics/request_timeline.h"

namespace tinyserve {

class TokenOutputTracker {
 public:
  // Applies one step's outputs. `timeline_of(key)` returns the request's RequestTimeline* (null if
  // the observer has no state for it: such outputs are skipped). Each joining output is applied
  // to its timeline, and `on_join(key, const RequestTimeline::TokenOutput&)` gets what it gave (its
  // TTFT if it is the request's first token, else its ITL sample). Returns the number of outputs
  // that continue from the last output step: each is one ITL sample of `outputs.ts - last_ts()` (as
  // last_ts() was before this call).
  // REQUIRES: `outputs.ts` >= the previous call's.
  template <typename TimelineOf, typename OnJoin>
  int32_t Apply(const TokenOutputs& outputs, TimelineOf&& timeline_of, OnJoin&& on_join);

  // The output time of the last step applied (0 before the first).
  double last_ts() const { return last_ts_; }

  // Brings `t`'s last_token_ts up to date (a request still in the last output step had its last
  // token then) and takes it out of the tracking. Call when its FINISHED arrives.
  void Settle(RequestTimeline& t) const {
    if (!t.in_last_output_step) return;
    t.last_token_ts = last_ts_;
    t.in_last_output_step = false;
  }

 private:
  std::vector<uint64_t> last_keys_;  // the keys of the last output step, in its batch order
  double last_ts_ = 0.0;
};

template <typename TimelineOf, typename OnJoin>
int32_t TokenOutputTracker::Apply(const TokenOutputs& outputs, TimelineOf&& timeline_of,
                                  OnJoin&& on_join) {
  const std::span<const uint64_t> keys = outputs.request_keys;
  const size_t n = keys.size();
  int32_t num_continuing = 0;
  if (n == last_keys_.size() &&
      (n == 0 || std::memcmp(keys.data(), last_keys_.data(), n * sizeof(uint64_t)) == 0)) {
    // The steady step: the same requests as in the last output step, and nobody else.
    num_continuing = static_cast<int32_t>(n);
  } else {
    auto leave = [&](uint64_t key) {
      if (RequestTimeline* t = timeline_of(key)) Settle(*t);
    };
    size_t i = 0;  // next unmatched entry of last_keys_
    for (size_t j = 0; j < n; ++j) {
      const uint64_t key = keys[j];
      if (i < last_keys_.size() && last_keys_[i] == key) {
        ++num_continuing;
        ++i;
        continue;
      }
      RequestTimeline* t = timeline_of(key);
      if (t == nullptr) continue;
      if (t->in_last_output_step) {
        // It is further on in last_keys_ (entries already passed are matched or settled): the
        // ones before it got no token now.
        while (i < last_keys_.size() && last_keys_[i] != key) leave(last_keys_[i++]);
        assert(i < last_keys_.size());  // else a key came twice in one step
        ++i;
        ++num_continuing;
        continue;
      }
      on_join(key,
              t->Apply(RequestEvent{EventType::kNewTokens, outputs.ts, 1, FinishReason::kNone}));
      t->in_last_output_step = true;
    }
    while (i < last_keys_.size()) leave(last_keys_[i++]);
    last_keys_.assign(keys.begin(), keys.end());
  }
  last_ts_ = outputs.ts;
  return num_continuing;
}

}  // namespace tinyserve
