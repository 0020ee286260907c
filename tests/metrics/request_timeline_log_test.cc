// RequestTimelineLog (GET /debug/request_timelines): exact spans of live and finished requests
// on exact synthetic times, a request preempted twice, and the bound on finished entries.
#include "metrics/request_timeline_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/metrics/metrics_test_util.h"

namespace tinyserve::testing {
namespace {

using nlohmann::json;

json Span(const char* phase, double start, double end) {
  return {{"phase", phase}, {"start", start}, {"end", end}};
}

TEST(RequestTimelineLogTest, SpansOfAPreemptedFinishedRequestAndLiveOnes) {
  RequestTimelineLog log;
  SyntheticEngine engine(&log);
  SyntheticRequest* a = engine.NewRequest("a", 0.5);
  engine.Queued(a, 1.0);
  engine.Scheduled(a, 2.0);
  engine.Token(a, 3.0);
  engine.Step(2.0);
  engine.Preempted(a, 4.0);  // preempted twice during decode
  engine.Step(4.0);
  engine.Scheduled(a, 5.0);
  engine.Token(a, 6.0);
  engine.Step(5.0);
  engine.Preempted(a, 7.0);
  engine.Step(7.0);
  engine.Scheduled(a, 8.0);
  engine.Token(a, 9.0);
  engine.Finished(a, 9.0, FinishReason::kLength);
  engine.Step(8.0);

  SyntheticRequest* q = engine.NewRequest("queued", 10.0);  // never scheduled
  engine.Queued(q, 10.0);
  SyntheticRequest* p = engine.NewRequest("prefilling", 10.0);
  engine.Queued(p, 10.5);
  engine.Scheduled(p, 11.0);
  SyntheticRequest* d = engine.NewRequest("decoding", 9.5);
  engine.Queued(d, 9.5);
  engine.Scheduled(d, 10.0);
  engine.Token(d, 11.0);
  engine.Step(10.0);
  engine.Token(d, 12.0);  // a steady decode step: the tracker does not apply it one by one
  engine.Step(11.0);
  SyntheticRequest* s = engine.NewRequest("stalled", 9.0);
  engine.Queued(s, 9.0);
  engine.Scheduled(s, 9.0);
  engine.Preempted(s, 12.0);  // preempted in prefill, waiting
  engine.Step(12.0);

  EXPECT_EQ(log.num_live(), 4u);
  EXPECT_EQ(log.num_finished(), 1u);
  const json got = json::parse(log.RenderJson(13.0));
  const json want = {
      {"now", 13.0},
      {"requests",
       {{{"id", "a"},
         {"state", "finished"},
         {"arrival", 0.5},
         {"finish_reason", "length"},
         {"num_preemptions", 2},
         {"generated_tokens", 3},
         {"spans",
          {Span("queued", 1, 2), Span("prefill", 2, 3), Span("decode", 3, 9),
           Span("preempted", 4, 5), Span("preempted", 7, 8)}}},
        {{"id", "stalled"},
         {"state", "preempted"},
         {"arrival", 9.0},
         {"finish_reason", nullptr},
         {"num_preemptions", 1},
         {"generated_tokens", nullptr},
         {"spans", {Span("queued", 9, 9), Span("prefill", 9, 13), Span("preempted", 12, 13)}}},
        {{"id", "decoding"},
         {"state", "decode"},
         {"arrival", 9.5},
         {"finish_reason", nullptr},
         {"num_preemptions", 0},
         {"generated_tokens", nullptr},
         {"spans", {Span("queued", 9.5, 10), Span("prefill", 10, 11), Span("decode", 11, 13)}}},
        {{"id", "queued"},
         {"state", "queued"},
         {"arrival", 10.0},
         {"finish_reason", nullptr},
         {"num_preemptions", 0},
         {"generated_tokens", nullptr},
         {"spans", {Span("queued", 10, 13)}}},
        {{"id", "prefilling"},
         {"state", "prefill"},
         {"arrival", 10.0},
         {"finish_reason", nullptr},
         {"num_preemptions", 0},
         {"generated_tokens", nullptr},
         {"spans", {Span("queued", 10.5, 11), Span("prefill", 11, 13)}}}}}};
  EXPECT_EQ(got, want) << got.dump(1);
}

TEST(RequestTimelineLogTest, AbortedWhilePreemptedClosesItsSpansAtTheFinish) {
  RequestTimelineLog log;
  SyntheticEngine engine(&log);
  SyntheticRequest* r = engine.NewRequest("r", 0.0);
  engine.Queued(r, 0.0);
  engine.Scheduled(r, 1.0);
  engine.Token(r, 2.0);
  engine.Step(1.0);
  engine.Preempted(r, 3.0);
  engine.Step(3.0);
  engine.Finished(r, 4.0, FinishReason::kAbort);
  engine.Step(4.0);
  const json got = json::parse(log.RenderJson(10.0));
  ASSERT_EQ(got["requests"].size(), 1u);
  EXPECT_EQ(got["requests"][0]["finish_reason"], "abort");
  EXPECT_EQ(got["requests"][0]["spans"], json({Span("queued", 0, 1), Span("prefill", 1, 2),
                                               Span("decode", 2, 2), Span("preempted", 3, 4)}));
}

TEST(RequestTimelineLogTest, KeepsOnlyTheLastFinishedAndBoundedPreemptionSpans) {
  RequestTimelineLog log(/*max_finished=*/3);
  SyntheticEngine engine(&log);
  for (int i = 0; i < 10; ++i) {
    SyntheticRequest* r = engine.NewRequest("r" + std::to_string(i), i);
    engine.Queued(r, i);
    engine.Scheduled(r, i);
    for (int k = 0; k < 20; ++k) {  // more preemptions than spans kept
      engine.Preempted(r, i + 0.01 * k);
      engine.Scheduled(r, i + 0.01 * k + 0.005);
    }
    engine.Finished(r, i + 0.5, FinishReason::kAbort);
    engine.Step(i + 0.5);
  }
  EXPECT_EQ(log.num_finished(), 3u);
  EXPECT_EQ(log.num_live(), 0u);
  const json got = json::parse(log.RenderJson(20.0));
  ASSERT_EQ(got["requests"].size(), 3u);
  EXPECT_EQ(got["requests"][0]["id"], "r7");
  EXPECT_EQ(got["requests"][2]["id"], "r9");
  EXPECT_EQ(got["requests"][2]["num_preemptions"], 20);
  // queued, prefill (unfinished) and the first 16 preemptions.
  EXPECT_EQ(got["requests"][2]["spans"].size(), 2 + RequestTimelineLog::kMaxPreemptionSpans);
}

}  // namespace
}  // namespace tinyserve::testing
