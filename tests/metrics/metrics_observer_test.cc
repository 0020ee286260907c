// MetricsObserver driven by synthetic event sequences with exact fake timestamps (DESIGN §4).
// Times are binary-exact, so every expected value is exact.
#include "metrics/metrics_observer.h"

#include <gtest/gtest.h>

#include "metrics/metric_buckets.h"
#include "tests/metrics/metrics_test_util.h"

namespace tinyserve::testing {
namespace {

class MetricsObserverTest : public ::testing::Test {
 protected:
  double Success(FinishReason r) const {
    return metrics_.request_success[FinishReasonIndex(r)]->Value();
  }
  // No samples in any phase histogram, TTFT, ITL or TPOT.
  void ExpectNoPhaseSamples() const {
    EXPECT_EQ(Read(metrics_.queue_time).count, 0u);
    EXPECT_EQ(Read(metrics_.prefill_time).count, 0u);
    EXPECT_EQ(Read(metrics_.decode_time).count, 0u);
    EXPECT_EQ(Read(metrics_.inference_time).count, 0u);
    EXPECT_EQ(Read(metrics_.time_to_first_token).count, 0u);
    EXPECT_EQ(Read(metrics_.inter_token_latency).count, 0u);
    EXPECT_EQ(Read(metrics_.time_per_output_token).count, 0u);
  }
  // inference == prefill + decode and TTFT == (queued - arrival) + queue + prefill over the sums,
  // given the summed (queued - arrival) of requests that produced a token.
  void ExpectIdentities(double sum_inbox) const {
    EXPECT_EQ(Read(metrics_.inference_time).sum,
              Read(metrics_.prefill_time).sum + Read(metrics_.decode_time).sum);
    EXPECT_EQ(Read(metrics_.time_to_first_token).sum,
              sum_inbox + Read(metrics_.queue_time).sum + Read(metrics_.prefill_time).sum);
  }

  PrometheusMetrics metrics_{TestMetricsConfig()};
  MetricsObserver observer_{&metrics_};
  SyntheticEngine engine_{&observer_};
};

TEST_F(MetricsObserverTest, NoPreemption) {
  SyntheticRequest* r = engine_.NewRequest("a", 0.0, /*num_prompt_tokens=*/8, /*max_tokens=*/3);
  engine_.Queued(r, 0.5);
  engine_.Step(0.5, 0, 1);
  engine_.Scheduled(r, 1.0);
  engine_.Token(r, 2.0);
  engine_.Step(1.0, 1, 0);
  EXPECT_EQ(Read(metrics_.time_to_first_token).sum, 2.0);  // observed at the first token
  engine_.Token(r, 3.0);
  engine_.Step(2.0, 1, 0);
  engine_.Token(r, 4.0);
  engine_.Finished(r, 4.0, FinishReason::kLength);
  engine_.Step(3.0, 0, 0);

  EXPECT_EQ(Read(metrics_.time_to_first_token).count, 1u);
  EXPECT_EQ(Read(metrics_.time_to_first_token).sum, 2.0);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 2u);
  EXPECT_EQ(Read(metrics_.inter_token_latency).sum, 2.0);
  EXPECT_EQ(Read(metrics_.queue_time).sum, 0.5);
  EXPECT_EQ(Read(metrics_.prefill_time).sum, 1.0);
  EXPECT_EQ(Read(metrics_.decode_time).sum, 2.0);
  EXPECT_EQ(Read(metrics_.inference_time).sum, 3.0);
  EXPECT_EQ(Read(metrics_.e2e_latency).sum, 4.0);
  EXPECT_EQ(Read(metrics_.time_per_output_token).sum, 1.0);
  EXPECT_EQ(Read(metrics_.request_generation_tokens).sum, 3.0);
  EXPECT_EQ(Read(metrics_.request_prompt_tokens).sum, 8.0);
  EXPECT_EQ(Read(metrics_.request_max_tokens).sum, 3.0);
  EXPECT_EQ(Read(metrics_.request_n).sum, 1.0);
  EXPECT_EQ(Read(metrics_.request_num_preemptions).count, 1u);
  EXPECT_EQ(Read(metrics_.request_num_preemptions).sum, 0.0);
  EXPECT_EQ(metrics_.num_preemptions.Value(), 0.0);
  EXPECT_EQ(metrics_.prompt_tokens.Value(), 8.0);
  EXPECT_EQ(metrics_.generation_tokens.Value(), 3.0);
  EXPECT_EQ(Success(FinishReason::kLength), 1.0);
  EXPECT_EQ(Success(FinishReason::kStop), 0.0);
  EXPECT_EQ(observer_.num_live_requests(), 0u);
  ExpectIdentities(/*sum_inbox=*/0.5);
}

// A preemption during prefill is inside prefill and TTFT, not queue.
TEST_F(MetricsObserverTest, PreemptedDuringPrefill) {
  SyntheticRequest* r = engine_.NewRequest("a", 0.0);
  engine_.Queued(r, 0.0);
  engine_.Scheduled(r, 1.0);
  engine_.Step(1.0, 1, 0);
  engine_.Preempted(r, 2.0);
  engine_.Step(2.0, 0, 1);
  EXPECT_EQ(metrics_.num_preemptions.Value(), 1.0);  // counted at the preempting step
  EXPECT_EQ(metrics_.preemptions_by_reason[0]->Value(), 1.0);
  engine_.Scheduled(r, 4.0);
  engine_.Token(r, 5.0);
  engine_.Step(4.0, 1, 0);
  engine_.Token(r, 6.0);
  engine_.Finished(r, 6.0, FinishReason::kStop);
  engine_.Step(5.0);

  EXPECT_EQ(Read(metrics_.queue_time).sum, 1.0);
  EXPECT_EQ(Read(metrics_.prefill_time).sum, 4.0);
  EXPECT_EQ(Read(metrics_.time_to_first_token).sum, 5.0);
  EXPECT_EQ(Read(metrics_.decode_time).sum, 1.0);
  EXPECT_EQ(Read(metrics_.inference_time).sum, 5.0);
  EXPECT_EQ(Read(metrics_.e2e_latency).sum, 6.0);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 1u);
  EXPECT_EQ(Read(metrics_.inter_token_latency).sum, 1.0);
  EXPECT_EQ(Read(metrics_.request_num_preemptions).sum, 1.0);
  EXPECT_EQ(metrics_.num_preemptions.Value(), 1.0);
  EXPECT_EQ(Success(FinishReason::kStop), 1.0);
  ExpectIdentities(0.0);
}

// Two preemptions during decode: one ITL sample per stall; decode and inference include both.
TEST_F(MetricsObserverTest, PreemptedTwiceDuringDecode) {
  SyntheticRequest* r = engine_.NewRequest("a", 0.0, 8, 5);
  engine_.Queued(r, 0.0);
  engine_.Scheduled(r, 1.0);
  engine_.Token(r, 2.0);
  engine_.Step(1.0, 1, 0);
  engine_.Token(r, 3.0);
  engine_.Step(2.0, 1, 0);
  engine_.Preempted(r, 3.5);
  engine_.Step(3.5, 0, 1);
  EXPECT_EQ(metrics_.num_preemptions.Value(), 1.0);
  engine_.Scheduled(r, 5.0);
  engine_.Token(r, 6.0);
  engine_.Step(5.0, 1, 0);
  EXPECT_EQ(metrics_.num_preemptions.Value(), 1.0);
  engine_.Preempted(r, 6.5);
  engine_.Step(6.5, 0, 1);
  EXPECT_EQ(metrics_.num_preemptions.Value(), 2.0);
  engine_.Scheduled(r, 8.0);
  engine_.Token(r, 9.0);
  engine_.Step(8.0, 1, 0);
  engine_.Token(r, 10.0);
  engine_.Finished(r, 10.0, FinishReason::kLength);
  engine_.Step(9.0);

  const HistogramData itl = Read(metrics_.inter_token_latency);
  EXPECT_EQ(itl.count, 4u);  // 2->3, 3->6 (stall), 6->9 (stall), 9->10
  EXPECT_EQ(itl.sum, 8.0);
  // Buckets: two samples of 1 s (le 1), two of 3 s (le 5, above 2.5).
  const std::vector<double>& b = metrics_.token_latency_buckets();
  EXPECT_EQ(itl.cumulative[BucketIndex(b, 1.0)], 2u);
  EXPECT_EQ(itl.cumulative[BucketIndex(b, 2.5)], 2u);
  EXPECT_EQ(itl.cumulative[BucketIndex(b, 5.0)], 4u);
  EXPECT_EQ(Read(metrics_.prefill_time).sum, 1.0);
  EXPECT_EQ(Read(metrics_.decode_time).sum, 8.0);
  EXPECT_EQ(Read(metrics_.inference_time).sum, 9.0);
  EXPECT_EQ(Read(metrics_.time_per_output_token).sum, 2.0);  // 8 s / 4 gaps
  EXPECT_EQ(Read(metrics_.request_num_preemptions).sum, 2.0);
  EXPECT_EQ(Success(FinishReason::kLength), 1.0);
  ExpectIdentities(0.0);
}

// A request aborted while preempted is counted, with the phases it reached.
TEST_F(MetricsObserverTest, AbortedWhilePreempted) {
  SyntheticRequest* r = engine_.NewRequest("a", 0.0);
  engine_.Queued(r, 0.0);
  engine_.Scheduled(r, 1.0);
  engine_.Token(r, 2.0);
  engine_.Step(1.0, 1, 0);
  engine_.Preempted(r, 3.0);
  engine_.Step(3.0, 0, 1);
  engine_.Finished(r, 4.0, FinishReason::kAbort);
  engine_.Step(4.0);

  EXPECT_EQ(metrics_.num_preemptions.Value(), 1.0);
  EXPECT_EQ(Success(FinishReason::kAbort), 1.0);
  EXPECT_EQ(Read(metrics_.request_num_preemptions).sum, 1.0);
  EXPECT_EQ(Read(metrics_.queue_time).sum, 1.0);
  EXPECT_EQ(Read(metrics_.prefill_time).sum, 1.0);
  EXPECT_EQ(Read(metrics_.decode_time).count, 1u);
  EXPECT_EQ(Read(metrics_.decode_time).sum, 0.0);
  EXPECT_EQ(Read(metrics_.time_per_output_token).count, 0u);
  EXPECT_EQ(Read(metrics_.e2e_latency).sum, 4.0);
  ExpectIdentities(0.0);
}

TEST_F(MetricsObserverTest, AbortedWhileWaitingGivesNoPhaseSamples) {
  SyntheticRequest* r = engine_.NewRequest("a", 0.0);
  engine_.Queued(r, 0.5);
  engine_.Step(0.5, 0, 1);
  engine_.Finished(r, 2.0, FinishReason::kAbort);
  engine_.Step(2.0);

  ExpectNoPhaseSamples();
  EXPECT_EQ(Read(metrics_.e2e_latency).count, 1u);
  EXPECT_EQ(Read(metrics_.e2e_latency).sum, 2.0);
  EXPECT_EQ(Success(FinishReason::kAbort), 1.0);
  EXPECT_EQ(metrics_.prompt_tokens.Value(), 0.0);
  EXPECT_EQ(observer_.num_live_requests(), 0u);
}

TEST_F(MetricsObserverTest, ScheduledWithoutTokenGivesOnlyQueue) {
  SyntheticRequest* r = engine_.NewRequest("a", 0.0);
  engine_.Queued(r, 0.0);
  engine_.Scheduled(r, 0.25);
  engine_.Finished(r, 2.0, FinishReason::kError);
  engine_.Step(2.0);
  EXPECT_EQ(Read(metrics_.queue_time).sum, 0.25);
  EXPECT_EQ(Read(metrics_.prefill_time).count, 0u);
  EXPECT_EQ(Read(metrics_.time_to_first_token).count, 0u);
  EXPECT_EQ(Success(FinishReason::kError), 1.0);
}

TEST_F(MetricsObserverTest, FinishedByStopAndByLength) {
  SyntheticRequest* a = engine_.NewRequest("a", 0.0, 4, 8);
  SyntheticRequest* b = engine_.NewRequest("b", 0.0, 6, 2);
  engine_.Queued(a, 0.0);
  engine_.Queued(b, 0.0);
  engine_.Scheduled(a, 0.0);
  engine_.Scheduled(b, 0.0);
  engine_.Token(a, 0.5);
  engine_.Token(b, 0.5);
  engine_.Step(0.0, 2, 0);
  engine_.Token(a, 1.0);
  engine_.Token(b, 1.0);
  engine_.Finished(a, 1.0, FinishReason::kStop);  // EOS before max_tokens
  engine_.Finished(b, 1.0, FinishReason::kLength);
  engine_.Step(0.5);
  EXPECT_EQ(Success(FinishReason::kStop), 1.0);
  EXPECT_EQ(Success(FinishReason::kLength), 1.0);
  EXPECT_EQ(Success(FinishReason::kAbort), 0.0);
  EXPECT_EQ(Read(metrics_.request_prompt_tokens).sum, 10.0);
  EXPECT_EQ(Read(metrics_.request_max_tokens).sum, 10.0);
  EXPECT_EQ(metrics_.prompt_tokens.Value(), 10.0);
  EXPECT_EQ(metrics_.generation_tokens.Value(), 4.0);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 2u);
  EXPECT_EQ(Read(metrics_.e2e_latency).sum, 2.0);
}

TEST_F(MetricsObserverTest, GaugesAndCountersFollowStepStats) {
  // Three requests that output a token every 2 ms of engine time, once before the first step and
  // then once in every step: each step's outputs give three ITL samples of 2 ms.
  std::vector<uint64_t> keys;
  for (int i = 0; i < 3; ++i) {
    SyntheticRequest* r = engine_.NewRequest("r" + std::to_string(i), -0.01);
    engine_.Queued(r, -0.01);
    engine_.Scheduled(r, -0.01);
    keys.push_back(r->key);
  }
  auto outputs = [&](double ts) { observer_.OnTokenOutputs(TokenOutputs{ts, keys}); };
  outputs(-0.004);
  SchedulerStats s;
  s.num_running = 3;
  s.num_waiting = 2;
  s.num_preempted_waiting = 1;
  s.num_kv_blocks = 10;
  s.num_used_blocks = 6;
  s.num_cached_blocks = 1;
  s.num_free_blocks = 3;
  s.kv_cache_usage = 0.6;
  s.num_computed_tokens = 40;
  s.prefix_cache_queries = 32;
  s.prefix_cache_hits = 16;
  s.num_recomputed_tokens = 7;
  s.num_recomputed_prompt_tokens = 5;
  s.num_prefill_computed_tokens = 20;
  s.num_decode_tokens = 13;
  s.num_prompt_tokens_cached = 4;
  s.num_generation_tokens = 3;
  s.ts = 0.0;
  outputs(-0.002);
  observer_.OnStep(s);
  s.ts = 0.005;
  outputs(0.0);
  observer_.OnStep(s);
  EXPECT_EQ(metrics_.num_requests_running.Value(), 3.0);
  EXPECT_EQ(metrics_.num_requests_waiting.Value(), 2.0);
  EXPECT_EQ(metrics_.num_requests_preempted.Value(), 1.0);
  EXPECT_EQ(metrics_.kv_cache_usage_perc.Value(), 0.6);
  EXPECT_EQ(metrics_.kv_cache_blocks[0]->Value(), 6.0);
  EXPECT_EQ(metrics_.kv_cache_blocks[1]->Value(), 1.0);
  EXPECT_EQ(metrics_.kv_cache_blocks[2]->Value(), 3.0);
  EXPECT_EQ(metrics_.prefix_cache_queries.Value(), 64.0);
  EXPECT_EQ(metrics_.prefix_cache_hits.Value(), 32.0);
  EXPECT_EQ(metrics_.recomputed_tokens[0]->Value(), 10.0);  // prompt
  EXPECT_EQ(metrics_.recomputed_tokens[1]->Value(), 4.0);   // output
  EXPECT_EQ(metrics_.prompt_tokens_cached.Value(), 8.0);
  EXPECT_EQ(metrics_.step_tokens[static_cast<int>(StepTokenKind::kPrefillComputed)]->Value(), 40.0);
  EXPECT_EQ(metrics_.step_tokens[static_cast<int>(StepTokenKind::kPrefixCacheHit)]->Value(), 32.0);
  EXPECT_EQ(metrics_.step_tokens[static_cast<int>(StepTokenKind::kDecode)]->Value(), 26.0);
  EXPECT_EQ(metrics_.step_tokens[static_cast<int>(StepTokenKind::kRecompute)]->Value(), 14.0);
  EXPECT_EQ(metrics_.cache_config_info.Value(), 1.0);
  // Every-step samples wait until 10 ms of engine time have passed since the oldest...
  EXPECT_EQ(Read(metrics_.iteration_tokens).count, 0u);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 0u);
  EXPECT_EQ(metrics_.generation_tokens.Value(), 0.0);
  s.ts = MetricsObserver::kPublishInterval;
  outputs(0.002);
  observer_.OnStep(s);
  EXPECT_EQ(Read(metrics_.iteration_tokens).count, 3u);
  EXPECT_EQ(Read(metrics_.iteration_tokens).sum, 120.0);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 9u);
  EXPECT_EQ(Read(metrics_.inter_token_latency)
                .cumulative[BucketIndex(metrics_.token_latency_buckets(), 0.002)],
            9u);
  EXPECT_EQ(metrics_.generation_tokens.Value(), 9.0);
  // ... or until a step leaves the engine idle.
  s.ts += 0.001;
  outputs(0.004);
  observer_.OnStep(s);
  EXPECT_EQ(Read(metrics_.iteration_tokens).count, 3u);
  s.ts += 0.001;
  s.num_running = s.num_waiting = 0;
  outputs(0.006);
  observer_.OnStep(s);
  EXPECT_EQ(Read(metrics_.iteration_tokens).count, 5u);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 15u);
  EXPECT_EQ(metrics_.generation_tokens.Value(), 15.0);
  EXPECT_EQ(metrics_.num_requests_running.Value(), 0.0);
}

// A step in which a request finished publishes the gathered every-step samples at once, though
// the engine stays busy and 10 ms have not passed: a client that saw its request finish finds its
// tokens in /metrics.
TEST_F(MetricsObserverTest, AStepThatFinishesARequestPublishesEverything) {
  SyntheticRequest* a = engine_.NewRequest("a", 0.0);
  SyntheticRequest* b = engine_.NewRequest("b", 0.0);
  for (SyntheticRequest* r : {a, b}) {
    engine_.Queued(r, 0.0);
    engine_.Scheduled(r, 0.0);
    engine_.Token(r, 0.001);
  }
  engine_.Step(0.001, /*running=*/2);
  engine_.Token(a, 0.002);
  engine_.Token(b, 0.002);
  engine_.Step(0.002, /*running=*/2);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 0u);  // busy, 1 ms: still gathered
  engine_.Token(a, 0.003);
  engine_.Token(b, 0.003);
  engine_.Finished(a, 0.003, FinishReason::kLength);
  engine_.Step(0.003, /*running=*/1);
  EXPECT_EQ(Read(metrics_.inter_token_latency).count, 4u);
  EXPECT_EQ(metrics_.generation_tokens.Value(), 6.0);
}

TEST_F(MetricsObserverTest, ManyConcurrentRequestsLeaveNoState) {
  std::vector<SyntheticRequest*> rs;
  for (int i = 0; i < 3000; ++i) {
    rs.push_back(engine_.NewRequest("r" + std::to_string(i), 0.0));
    engine_.Queued(rs.back(), 0.0);
  }
  EXPECT_EQ(observer_.num_live_requests(), 3000u);
  for (size_t i = 0; i < rs.size(); i += 2) engine_.Finished(rs[i], 1.0, FinishReason::kAbort);
  for (size_t i = 1; i < rs.size(); i += 2) engine_.Scheduled(rs[i], 1.0);
  for (size_t i = 1; i < rs.size(); i += 2) engine_.Finished(rs[i], 2.0, FinishReason::kAbort);
  EXPECT_EQ(observer_.num_live_requests(), 0u);
  EXPECT_EQ(Read(metrics_.queue_time).count, 1500u);
  EXPECT_EQ(Read(metrics_.queue_time).sum, 1500.0);
}

}  // namespace
}  // namespace tinyserve::testing

namespace tinyserve::testing {
namespace {

// A client request with n = 3 is three engine requests; vllm:request_params_n gets one sample of 3.
TEST(MetricsObserverParamsNTest, OneSamplePerClientRequest) {
  PrometheusMetrics metrics{TestMetricsConfig()};
  MetricsObserver observer{&metrics};
  SyntheticEngine engine{&observer};
  for (int j = 0; j < 3; ++j) {
    SyntheticRequest* r = engine.NewRequest("c" + std::to_string(j), 0.0, 4, 1);
    r->params_n = 3;
    r->reports_params_n = j == 0;
    engine.Queued(r, 0.0);
    engine.Scheduled(r, 1.0);
    engine.Token(r, 2.0);
    engine.Finished(r, 2.0, FinishReason::kLength);
  }
  engine.Step(1.0, 3, 0);
  EXPECT_EQ(Read(metrics.request_n).count, 1u);
  EXPECT_EQ(Read(metrics.request_n).sum, 3.0);
}

}  // namespace
}  // namespace tinyserve::testing
