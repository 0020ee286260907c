// TokenOutputTracker: the inter-token latencies it derives from per-step TokenOutputs are exactly
// the gaps between each request's consecutive output times (computed the plain way, per request),
// whatever joins, leaves, skips a step, or changes order.
#include "metrics/token_output_tracker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "metrics/live_request_map.h"

namespace tinyserve {
namespace {

// The tracker with its timelines, collecting every sample it gives.
struct Tracked {
  LiveRequestMap<RequestTimeline> timelines;
  TokenOutputTracker tracker;
  std::vector<double> itl;   // every ITL sample
  std::vector<double> ttft;  // every TTFT
  int32_t num_continuing = 0;

  void Outputs(double ts, const std::vector<uint64_t>& keys) {
    const double previous = tracker.last_ts();
    const int32_t n = tracker.Apply(
        TokenOutputs{ts, keys}, [this](uint64_t key) { return timelines.Find(key); },
        [this](uint64_t, const RequestTimeline::TokenOutput& out) {
          (out.is_first ? ttft : itl).push_back(out.is_first ? out.ttft : out.itl);
        });
    num_continuing += n;
    itl.insert(itl.end(), static_cast<size_t>(n), ts - previous);
  }
  void Add(uint64_t key, double arrival) {
    RequestTimeline& t = timelines.FindOrInsert(key);
    t.arrival_ts = arrival;
    t.Apply({EventType::kQueued, arrival, 0, FinishReason::kNone});
    t.Apply({EventType::kScheduled, arrival, 0, FinishReason::kNone});
  }
  // The request's last output time as FINISHED sees it; erases it.
  double Finish(uint64_t key) {
    RequestTimeline& t = *timelines.Find(key);
    tracker.Settle(t);
    const double last = t.last_token_ts;
    timelines.Erase(key);
    return last;
  }
};

TEST(TokenOutputTrackerTest, SteadyStepsShareOneGapWithoutJoins) {
  Tracked t;
  for (uint64_t k = 0; k < 4; ++k) t.Add(k, 0.0);
  t.Outputs(1.0, {0, 1, 2, 3});  // first tokens
  EXPECT_EQ(t.ttft, (std::vector<double>{1.0, 1.0, 1.0, 1.0}));
  EXPECT_EQ(t.num_continuing, 0);
  t.Outputs(1.5, {0, 1, 2, 3});
  t.Outputs(2.5, {0, 1, 2, 3});
  EXPECT_EQ(t.num_continuing, 8);
  EXPECT_EQ(t.itl, (std::vector<double>{0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0}));
  // While in the run, the timelines were not touched; Settle() gives the last output time.
  EXPECT_EQ(t.timelines.Find(2)->last_token_ts, 1.0);
  EXPECT_EQ(t.Finish(2), 2.5);
}

// Request 1 skips a step, 2 leaves (preempted) and comes back two steps later, 3 joins late, 0
// finishes: each gap is measured from the request's own previous output.
TEST(TokenOutputTrackerTest, JoinsAndLeavesMeasureFromTheRequestsOwnLastOutput) {
  Tracked t;
  for (uint64_t k = 0; k < 4; ++k) t.Add(k, 0.0);
  t.Outputs(1.0, {0, 1, 2});
  t.Outputs(2.0, {0, 2});       // 1 skipped
  t.Outputs(3.0, {0, 1});       // 1 back (gap 2), 2 preempted
  EXPECT_EQ(t.Finish(0), 3.0);  // 0 finishes with its token at 3
  t.Outputs(4.0, {1, 3});       // 3's first token
  t.Outputs(6.0, {1, 3, 2});    // 2 back after the preemption (gap 4)
  std::vector<double> itl = t.itl;
  std::sort(itl.begin(), itl.end());
  // 0: 1, 1 | 1: 2, 1, 2 | 2: 1, 4 | 3: 2
  EXPECT_EQ(itl, (std::vector<double>{1, 1, 1, 1, 2, 2, 2, 4}));
  EXPECT_EQ(t.ttft, (std::vector<double>{1.0, 1.0, 1.0, 4.0}));
  EXPECT_EQ(t.Finish(1), 6.0);
  EXPECT_EQ(t.Finish(2), 6.0);
  EXPECT_EQ(t.Finish(3), 6.0);
}

// Random workloads against the plain per-request computation: requests arrive, output in some
// steps and not in others, and finish; the batch order is kept (as the engine keeps it) or, in
// half of the runs, shuffled every step (the tracker must stay exact, only slower).
TEST(TokenOutputTrackerTest, MatchesPerRequestGapsOnRandomWorkloads) {
  for (int run = 0; run < 40; ++run) {
    SCOPED_TRACE(run);
    std::mt19937 rng(static_cast<uint32_t>(run));
    const bool shuffle = run % 2 == 1;
    Tracked t;
    std::vector<uint64_t> live;             // in running order
    std::map<uint64_t, double> last;        // reference: last output time per request
    std::vector<double> ref_itl, ref_ttft;  // reference samples
    uint64_t next_key = 0;
    double ts = 0.0;
    for (int step = 0; step < 300; ++step) {
      ts += 0.25 * (1 + rng() % 8);  // binary-exact times
      if (rng() % 3 == 0 || live.empty()) {
        t.Add(next_key, ts - 0.25);
        live.push_back(next_key++);
      }
      std::vector<uint64_t> keys;
      for (uint64_t k : live) {
        if (rng() % 5 != 0) keys.push_back(k);  // skipped (budget, prefill, preempted) otherwise
      }
      if (shuffle) std::shuffle(keys.begin(), keys.end(), rng);
      if (!keys.empty()) {
        for (uint64_t k : keys) {
          auto it = last.find(k);
          if (it == last.end()) {
            ref_ttft.push_back(ts - (t.timelines.Find(k)->arrival_ts));
          } else {
            ref_itl.push_back(ts - it->second);
          }
          last[k] = ts;
        }
        t.Outputs(ts, keys);
      }
      // Some finish (those that have output anything: the reference knows their last output).
      for (size_t i = 0; i < live.size();) {
        if (rng() % 9 == 0 && last.count(live[i])) {
          EXPECT_EQ(t.Finish(live[i]), last[live[i]]);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
    for (uint64_t k : live) {
      if (last.count(k)) {
        EXPECT_EQ(t.Finish(k), last[k]);
      }
    }
    std::sort(ref_itl.begin(), ref_itl.end());
    std::sort(t.itl.begin(), t.itl.end());
    EXPECT_EQ(t.itl, ref_itl);
    std::sort(ref_ttft.begin(), ref_ttft.end());
    std::sort(t.ttft.begin(), t.ttft.end());
    EXPECT_EQ(t.ttft, ref_ttft);
    EXPECT_GT(t.num_continuing, 0);
  }
}

}  // namespace
}  // namespace tinyserve
