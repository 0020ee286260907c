// The per-request metrics object (metrics/request_metrics.h) on a real EngineCore with the fake
// executor and a FakeClock (each Execute takes 1 s): exact values from the frontend's side (a
// RequestMetricsTracker fed from each request's stream, a delta after every step, as the server
// reads it), and the same numbers as the MetricsObserver's histograms for the same requests.
#include "metrics/request_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_core.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"
#include "tests/metrics/metrics_test_util.h"

namespace tinyserve::testing {
namespace {

struct RequestMetricsHarness {
  RequestMetricsHarness(int32_t num_blocks, int32_t block_size, int32_t budget,
                        int32_t max_num_seqs = 64)
      : executor(num_blocks, block_size, /*vocab=*/32, /*max_model_len=*/256, &clock, 1.0),
        observer(&metrics),
        core(Config(budget, max_num_seqs), &executor, &clock) {
    core.AddObserver(&recorder);
    core.AddObserver(&observer);
  }
  static EngineConfig Config(int32_t budget, int32_t max_num_seqs) {
    EngineConfig c;
    c.max_num_batched_tokens = budget;
    c.max_num_seqs = max_num_seqs;
    return c;
  }
  void Submit(EngineRequest r) {
    const std::string id = r.request_id;
    trackers.emplace(id, RequestMetricsTracker(r.arrival_ts));
    streams[id] = SubmitOk(core, std::move(r));
  }
  // What a frontend does between steps: takes each stream's delta into its tracker.
  void DrainStreams() {
    RequestOutput delta;
    for (auto& [id, stream] : streams) {
      while (stream->TryNext(&delta)) {
        trackers.at(id).Apply(delta.events, delta.token_ts,
                              delta.finished ? &delta.counts : nullptr);
      }
    }
  }
  void Step() {
    core.Step();
    DrainStreams();
  }
  void RunUntilIdle() {
    for (int i = 0; i < 10000 && core.HasPendingWork(); ++i) Step();
    ASSERT_FALSE(core.HasPendingWork());
  }
  PerRequestMetrics Metrics(const std::string& id) const { return trackers.at(id).Metrics(); }

  FakeClock clock;
  FakeExecutor executor;
  RecordingObserver recorder;
  PrometheusMetrics metrics{TestMetricsConfig()};
  MetricsObserver observer;
  EngineCore core;
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  std::map<std::string, RequestMetricsTracker> trackers;
};

// Each histogram's sum and count equal the trackers' phases summed over the requests (the clock
// ticks whole seconds, so the sums are exact).
void ExpectHistogramsSeeTheTrackersNumbers(const RequestMetricsHarness& h) {
  struct Sum {
    double sum = 0.0;
    uint64_t count = 0;
    void Add(const std::optional<double>& v) {
      if (!v) return;
      sum += *v;
      ++count;
    }
  };
  Sum ttft, queue, prefill, decode, inference, tpot;
  for (const auto& [id, tracker] : h.trackers) {
    ASSERT_TRUE(tracker.is_finished()) << id;
    const RequestIntervals p = tracker.timeline().Phases();
    ttft.Add(p.ttft);
    queue.Add(p.queue);
    prefill.Add(p.prefill);
    decode.Add(p.decode);
    inference.Add(p.inference);
    tpot.Add(p.tpot);
  }
  const PrometheusMetrics& m = h.metrics;
  const std::vector<std::pair<const Sum*, const prometheus::Histogram*>> pairs = {
      {&ttft, &m.time_to_first_token}, {&queue, &m.queue_time},
      {&prefill, &m.prefill_time},     {&decode, &m.decode_time},
      {&inference, &m.inference_time}, {&tpot, &m.time_per_output_token}};
  for (const auto& [sum, hist] : pairs) {
    const HistogramData d = Read(*hist);
    EXPECT_EQ(d.count, sum->count);
    EXPECT_EQ(d.sum, sum->sum);
  }
}

TEST(RequestMetricsTest, OneRequestIsExactlyWhatTheHistogramsGot) {
  RequestMetricsHarness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(5, 1), 3));
  h.RunUntilIdle();
  const PerRequestMetrics a = h.Metrics("a");
  // Scheduled at 0, tokens at 1, 2, 3.
  EXPECT_EQ(a.time_to_first_token_ms, 1000.0);
  EXPECT_EQ(a.queue_time_ms, 0.0);
  EXPECT_EQ(a.prefill_time_ms, 1000.0);
  EXPECT_EQ(a.generation_time_ms, 2000.0);
  EXPECT_EQ(a.decode_time_ms, 2000.0);
  EXPECT_EQ(a.mean_itl_ms, 1000.0);
  EXPECT_EQ(a.tokens_per_second, 1.0);  // 3 tokens over 3 s from scheduling
  EXPECT_EQ(a.num_preemptions, 0);
  EXPECT_EQ(a.recomputed_tokens, 0);
  EXPECT_EQ(a.cached_prompt_tokens, 0);
  EXPECT_EQ(a.finish_reason, FinishReason::kLength);
  // The histograms' only samples are these values.
  const PrometheusMetrics& m = h.metrics;
  EXPECT_EQ(Read(m.time_to_first_token).sum * 1000.0, *a.time_to_first_token_ms);
  EXPECT_EQ(Read(m.decode_time).sum * 1000.0, *a.generation_time_ms);
  EXPECT_EQ(Read(m.queue_time).sum * 1000.0, *a.queue_time_ms);
  EXPECT_EQ(Read(m.prefill_time).sum * 1000.0, *a.prefill_time_ms);
  EXPECT_EQ(Read(m.time_per_output_token).sum * 1000.0, *a.mean_itl_ms);
  EXPECT_EQ(Read(m.request_num_preemptions).sum, a.num_preemptions);
  ExpectHistogramsSeeTheTrackersNumbers(h);
}

// Same scenario as EngineMetricsTest.PreemptedTwiceDuringDecode: b's tokens come out at
// 1, 2, 4, 10, 11, 12, 13, 14 (preempted at 2 and at 4).
TEST(RequestMetricsTest, RequestPreemptedTwice) {
  RequestMetricsHarness h(/*num_blocks=*/6, /*block_size=*/2, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 100));
  h.Submit(MakeEngineRequest("c", Prompt(1, 2), 3));
  h.Submit(MakeEngineRequest("b", Prompt(3, 3), 8));
  h.RunUntilIdle();
  ASSERT_EQ(h.recorder.num_preemptions["b"], 2);
  ASSERT_EQ(h.recorder.num_preemptions["a"] + h.recorder.num_preemptions["c"], 0);
  const PerRequestMetrics b = h.Metrics("b");
  EXPECT_EQ(b.time_to_first_token_ms, 1000.0);
  EXPECT_EQ(b.queue_time_ms, 0.0);
  EXPECT_EQ(b.prefill_time_ms, 1000.0);
  EXPECT_EQ(b.generation_time_ms, 13000.0);  // both stalls are inside
  EXPECT_EQ(b.mean_itl_ms, 13.0 / 7 * 1000.0);
  EXPECT_EQ(b.tokens_per_second, 8 / 14.0);
  EXPECT_EQ(b.num_preemptions, 2);
  EXPECT_EQ(b.finish_reason, FinishReason::kLength);
  // Only b was recomputed: its count is every step's recompute, which /metrics split by type.
  int32_t recomputed = 0;
  for (const SchedulerStats& s : h.recorder.steps) recomputed += s.num_recomputed_tokens;
  ASSERT_GT(recomputed, 0);
  EXPECT_EQ(b.recomputed_tokens, recomputed);
  EXPECT_EQ(h.metrics.recomputed_tokens[0]->Value() + h.metrics.recomputed_tokens[1]->Value(),
            recomputed);
  EXPECT_EQ(b.cached_prompt_tokens, 0);  // hits on its own freed blocks are not cache hits
  EXPECT_EQ(h.Metrics("a").num_preemptions, 0);
  EXPECT_EQ(h.Metrics("a").recomputed_tokens, 0);
  // The step token kinds add up to the tokens computed.
  double computed = 0;
  for (const SchedulerStats& s : h.recorder.steps) computed += s.num_computed_tokens;
  const auto kind = [&](StepTokenKind k) {
    return h.metrics.step_tokens[static_cast<int>(k)]->Value();
  };
  EXPECT_EQ(kind(StepTokenKind::kPrefillComputed) + kind(StepTokenKind::kDecode) +
                kind(StepTokenKind::kRecompute),
            computed);
  EXPECT_EQ(kind(StepTokenKind::kRecompute), recomputed);
  EXPECT_EQ(kind(StepTokenKind::kPrefillComputed), 3 + 1 + 3);  // each prompt once
  EXPECT_EQ(Read(h.metrics.request_num_preemptions).sum, 2.0);
  ExpectHistogramsSeeTheTrackersNumbers(h);
}

// Same scenario as EngineMetricsTest.AbortedWhilePreempted: b has 2 tokens (at 1, 2), is
// preempted at 2, and aborted while it waits.
TEST(RequestMetricsTest, AbortedRequestSaysSoWithThePhasesItReached) {
  RequestMetricsHarness h(/*num_blocks=*/5, /*block_size=*/2, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 6));
  h.Submit(MakeEngineRequest("b", Prompt(3, 2), 6));
  h.Step();
  h.Step();
  h.Step();  // t=2: b preempted
  h.core.Abort("b");
  h.RunUntilIdle();
  const PerRequestMetrics b = h.Metrics("b");
  EXPECT_EQ(b.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(b.num_preemptions, 1);
  EXPECT_EQ(b.time_to_first_token_ms, 1000.0);
  EXPECT_EQ(b.generation_time_ms, 1000.0);
  EXPECT_EQ(b.mean_itl_ms, 1000.0);
  EXPECT_EQ(b.tokens_per_second, 1.0);  // 2 tokens over 2 s
  EXPECT_EQ(b.recomputed_tokens, 0);    // it never ran again
  EXPECT_EQ(h.metrics.request_success[FinishReasonIndex(FinishReason::kAbort)]->Value(), 1.0);
  ExpectHistogramsSeeTheTrackersNumbers(h);
}

TEST(RequestMetricsTest, AbortedBeforeSchedulingHasOnlyNulls) {
  RequestMetricsHarness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64, /*max_num_seqs=*/1);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 3));
  h.Submit(MakeEngineRequest("b", Prompt(3, 2), 3));
  h.Step();
  h.core.Abort("b");
  h.RunUntilIdle();
  const PerRequestMetrics b = h.Metrics("b");
  EXPECT_EQ(b.finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(b.time_to_first_token_ms.has_value());
  EXPECT_FALSE(b.queue_time_ms.has_value());
  EXPECT_FALSE(b.prefill_time_ms.has_value());
  EXPECT_FALSE(b.generation_time_ms.has_value());
  EXPECT_FALSE(b.mean_itl_ms.has_value());
  EXPECT_FALSE(b.tokens_per_second.has_value());
  EXPECT_EQ(b.recomputed_tokens, 0);
  EXPECT_EQ(b.cached_prompt_tokens, 0);
  ExpectHistogramsSeeTheTrackersNumbers(h);
}

TEST(RequestMetricsTest, CachedPromptTokensAreTheFirstAdmissionsHits) {
  RequestMetricsHarness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(9, 1), 2));
  h.RunUntilIdle();
  h.Submit(MakeEngineRequest("b", Prompt(9, 1), 2));  // the same 9 tokens: 2 full blocks hit
  h.RunUntilIdle();
  EXPECT_EQ(h.Metrics("a").cached_prompt_tokens, 0);
  EXPECT_EQ(h.Metrics("b").cached_prompt_tokens, 8);
  EXPECT_EQ(h.metrics.prompt_tokens_cached.Value(), 8.0);
  EXPECT_EQ(h.metrics.prompt_tokens.Value(), 18.0);
  EXPECT_EQ(h.metrics.step_tokens[static_cast<int>(StepTokenKind::kPrefixCacheHit)]->Value(), 8.0);
  EXPECT_EQ(h.metrics.step_tokens[static_cast<int>(StepTokenKind::kPrefillComputed)]->Value(),
            9.0 + 1.0);
  ExpectHistogramsSeeTheTrackersNumbers(h);
}

TEST(RequestMetricsTest, TrackerMergesEventsAndTokensOfOneDeltaByTime) {
  RequestMetricsTracker t(/*arrival_ts=*/0.5);
  const std::vector<RequestEvent> events = {{EventType::kQueued, 1.0, 0, FinishReason::kNone},
                                            {EventType::kScheduled, 2.0, 0, FinishReason::kNone},
                                            {EventType::kPreempted, 3.0, 0, FinishReason::kNone},
                                            {EventType::kScheduled, 5.0, 0, FinishReason::kNone},
                                            {EventType::kFinished, 7.0, 0, FinishReason::kStop}};
  const std::vector<double> tokens = {3.0, 6.0, 7.0};  // the first at the preemption's time
  const RequestCounts counts{4, 2, 1};
  t.Apply(events, tokens, &counts);
  const PerRequestMetrics m = t.Metrics();
  EXPECT_EQ(m.time_to_first_token_ms, 2500.0);  // 0.5 -> 3
  EXPECT_EQ(m.queue_time_ms, 1000.0);
  EXPECT_EQ(m.prefill_time_ms, 1000.0);
  EXPECT_EQ(m.generation_time_ms, 4000.0);
  EXPECT_EQ(m.mean_itl_ms, 2000.0);
  EXPECT_EQ(m.tokens_per_second, 3 / 5.0);
  EXPECT_EQ(m.num_preemptions, 1);
  EXPECT_EQ(m.recomputed_tokens, 3);
  EXPECT_EQ(m.cached_prompt_tokens, 4);
  EXPECT_EQ(m.finish_reason, FinishReason::kStop);
  // Before the finish the counts are unknown.
  RequestMetricsTracker running(0.0);
  running.Apply(std::span(events).first(2), std::span(tokens).first(1), nullptr);
  EXPECT_FALSE(running.is_finished());
  EXPECT_FALSE(running.Metrics().recomputed_tokens.has_value());
  EXPECT_EQ(running.Metrics().finish_reason, FinishReason::kNone);
}

}  // namespace
}  // namespace tinyserve::testing
