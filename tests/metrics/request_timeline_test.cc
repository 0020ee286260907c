// RequestTimeline: the interval arithmetic of DESIGN §4 on exact timestamps.
#include "metrics/request_timeline.h"

#include <gtest/gtest.h>

namespace tinyserve {
namespace {

RequestEvent Ev(EventType type, double ts, FinishReason reason = FinishReason::kNone) {
  return {type, ts, type == EventType::kNewTokens ? 1 : 0, reason};
}

TEST(RequestTimelineTest, FirstScheduledAndFirstTokenAreFrozen) {
  RequestTimeline t;
  t.arrival_ts = 1.0;
  t.Apply(Ev(EventType::kQueued, 1.5));
  t.Apply(Ev(EventType::kScheduled, 2.0));
  auto first = t.Apply(Ev(EventType::kNewTokens, 3.0));
  EXPECT_TRUE(first.is_first);
  EXPECT_EQ(first.ttft, 2.0);
  t.Apply(Ev(EventType::kPreempted, 3.5));
  EXPECT_EQ(t.preempted_ts, 3.5);
  t.Apply(Ev(EventType::kScheduled, 5.0));
  EXPECT_FALSE(t.preempted_ts.has_value());
  auto second = t.Apply(Ev(EventType::kNewTokens, 6.0));
  EXPECT_FALSE(second.is_first);
  EXPECT_EQ(second.itl, 3.0);
  t.Apply(Ev(EventType::kFinished, 6.25, FinishReason::kLength));
  EXPECT_EQ(*t.first_scheduled_ts, 2.0);
  EXPECT_EQ(*t.first_token_ts, 3.0);
  const RequestIntervals iv = t.Intervals();
  EXPECT_EQ(iv.e2e, 5.25);
  EXPECT_EQ(*iv.queue, 0.5);
  EXPECT_EQ(*iv.prefill, 1.0);
  EXPECT_EQ(*iv.decode, 3.0);
  EXPECT_EQ(*iv.inference, 4.0);
  EXPECT_EQ(*iv.ttft, 2.0);
  EXPECT_EQ(*iv.tpot, 3.0);
  EXPECT_EQ(t.num_preemptions, 1);
  EXPECT_EQ(t.num_generation_tokens, 2);
}

TEST(RequestTimelineTest, NeverScheduledHasOnlyE2e) {
  RequestTimeline t;
  t.arrival_ts = 1.0;
  t.Apply(Ev(EventType::kQueued, 1.0));
  t.Apply(Ev(EventType::kFinished, 4.0, FinishReason::kAbort));
  const RequestIntervals iv = t.Intervals();
  EXPECT_EQ(iv.e2e, 3.0);
  EXPECT_FALSE(iv.queue || iv.prefill || iv.decode || iv.inference || iv.ttft || iv.tpot);
}

TEST(RequestTimelineTest, ScheduledWithoutTokenHasOnlyQueue) {
  RequestTimeline t;
  t.arrival_ts = 0.0;
  t.Apply(Ev(EventType::kQueued, 0.5));
  t.Apply(Ev(EventType::kScheduled, 1.0));
  t.Apply(Ev(EventType::kFinished, 4.0, FinishReason::kAbort));
  const RequestIntervals iv = t.Intervals();
  EXPECT_EQ(*iv.queue, 0.5);
  EXPECT_FALSE(iv.prefill || iv.decode || iv.inference || iv.ttft || iv.tpot);
}

TEST(RequestTimelineTest, OneTokenHasZeroDecodeAndNoTpot) {
  RequestTimeline t;
  t.arrival_ts = 0.0;
  t.Apply(Ev(EventType::kQueued, 0.0));
  t.Apply(Ev(EventType::kScheduled, 1.0));
  t.Apply(Ev(EventType::kNewTokens, 2.0));
  t.Apply(Ev(EventType::kFinished, 2.0, FinishReason::kStop));
  const RequestIntervals iv = t.Intervals();
  EXPECT_EQ(*iv.decode, 0.0);
  EXPECT_FALSE(iv.tpot.has_value());
}

// With clock values that do not add exactly in binary, the identities still hold bit for bit.
TEST(RequestTimelineTest, IdentitiesHoldExactlyWithInexactTimestamps) {
  RequestTimeline t;
  t.arrival_ts = 12345.1;
  t.Apply(Ev(EventType::kQueued, 12345.13));
  t.Apply(Ev(EventType::kScheduled, 12345.3));
  const auto first = t.Apply(Ev(EventType::kNewTokens, 12345.7));
  t.Apply(Ev(EventType::kNewTokens, 12346.9));
  t.Apply(Ev(EventType::kFinished, 12347.0, FinishReason::kStop));
  const RequestIntervals iv = t.Intervals();
  EXPECT_EQ(*iv.inference, *iv.prefill + *iv.decode);
  EXPECT_EQ(*iv.ttft, (*t.queued_ts - t.arrival_ts) + *iv.queue + *iv.prefill);
  EXPECT_EQ(first.ttft, *iv.ttft);
}

}  // namespace
}  // namespace tinyserve
