// The metrics observer on a real EngineCore with the fake executor and a FakeClock (each Execute
// takes 1 s, so a step scheduled at t outputs at t + 1): exact values, and the same numbers as an
// independent computation from the recorded events.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_core.h"
#include "metrics/metric_buckets.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"
#include "tests/metrics/metrics_test_util.h"

namespace tinyserve::testing {
namespace {

struct Harness {
  Harness(int32_t num_blocks, int32_t block_size, int32_t budget, int32_t max_num_seqs = 64)
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
    auto s = core.Submit(std::move(r));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  // Steps until idle; after each step checks that the preemption counter equals the preemptions
  // of all steps so far (it rises in the step that preempts).
  void RunUntilIdle() {
    for (int i = 0; i < 10000 && core.HasPendingWork(); ++i) {
      core.Step();
      int64_t preemptions = 0;
      for (const SchedulerStats& s : recorder.steps) preemptions += s.num_preemptions;
      ASSERT_EQ(metrics.num_preemptions.Value(), static_cast<double>(preemptions));
    }
    ASSERT_FALSE(core.HasPendingWork());
  }

  FakeClock clock;
  FakeExecutor executor;
  // The observers before the core: its destructor still reports to them.
  RecordingObserver recorder;
  PrometheusMetrics metrics{TestMetricsConfig()};
  MetricsObserver observer;
  EngineCore core;
};

// The histogram sums and counts recomputed from the recorded events (arrival at 0), the plain way.
struct Reference {
  std::map<std::string, double> sum;
  std::map<std::string, uint64_t> count;
  void Add(const std::string& name, double v) {
    sum[name] += v;
    ++count[name];
  }
};

Reference Recompute(const RecordingObserver& rec) {
  Reference ref;
  for (const auto& [id, events] : rec.events) {
    double queued = -1, scheduled = -1, first = -1, last = -1, finished = -1;
    int tokens = 0;
    for (const RequestEvent& e : events) {
      switch (e.type) {
        case EventType::kQueued:
          queued = e.ts;
          break;
        case EventType::kScheduled:
          if (scheduled < 0) scheduled = e.ts;
          break;
        case EventType::kNewTokens:
          if (first < 0) {
            first = e.ts;
            ref.Add("ttft", e.ts);
          } else {
            ref.Add("itl", e.ts - last);
          }
          last = e.ts;
          ++tokens;
          break;
        case EventType::kFinished:
          finished = e.ts;
          break;
        default:
          break;
      }
    }
    ref.Add("e2e", finished);
    if (scheduled >= 0) ref.Add("queue", scheduled - queued);
    if (first >= 0) {
      ref.Add("prefill", first - scheduled);
      ref.Add("decode", last - first);
      ref.Add("inference", last - scheduled);
    }
    if (tokens > 1) ref.Add("tpot", (last - first) / (tokens - 1));
  }
  return ref;
}

void ExpectMatchesReference(const Harness& h) {
  const Reference ref = Recompute(h.recorder);
  const PrometheusMetrics& m = h.metrics;
  const std::vector<std::pair<std::string, const prometheus::Histogram*>> hists = {
      {"ttft", &m.time_to_first_token}, {"itl", &m.inter_token_latency},
      {"e2e", &m.e2e_latency},          {"queue", &m.queue_time},
      {"prefill", &m.prefill_time},     {"decode", &m.decode_time},
      {"inference", &m.inference_time}, {"tpot", &m.time_per_output_token}};
  for (const auto& [name, hist] : hists) {
    SCOPED_TRACE(name);
    const HistogramData d = Read(*hist);
    EXPECT_EQ(d.count, ref.count.count(name) ? ref.count.at(name) : 0u);
    EXPECT_EQ(d.sum, ref.sum.count(name) ? ref.sum.at(name) : 0.0);
  }
  EXPECT_EQ(Read(m.inference_time).sum, Read(m.prefill_time).sum + Read(m.decode_time).sum);
  // Arrival == QUEUED time here, so TTFT == queue + prefill.
  EXPECT_EQ(Read(m.time_to_first_token).sum, Read(m.queue_time).sum + Read(m.prefill_time).sum);
}

double Success(const Harness& h, FinishReason r) {
  return h.metrics.request_success[FinishReasonIndex(r)]->Value();
}

TEST(EngineMetricsTest, NoPreemption) {
  Harness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(5, 1), 3));
  h.RunUntilIdle();
  const PrometheusMetrics& m = h.metrics;
  EXPECT_EQ(Read(m.time_to_first_token).sum, 1.0);
  EXPECT_EQ(Read(m.inter_token_latency).count, 2u);
  EXPECT_EQ(Read(m.inter_token_latency).sum, 2.0);
  EXPECT_EQ(Read(m.decode_time).sum, 2.0);
  EXPECT_EQ(Read(m.e2e_latency).sum, 3.0);
  EXPECT_EQ(Read(m.time_per_output_token).sum, 1.0);
  EXPECT_EQ(m.prompt_tokens.Value(), 5.0);
  EXPECT_EQ(m.generation_tokens.Value(), 3.0);
  EXPECT_EQ(m.num_preemptions.Value(), 0.0);
  EXPECT_EQ(Success(h, FinishReason::kLength), 1.0);
  EXPECT_EQ(m.num_requests_running.Value(), 0.0);
  EXPECT_EQ(m.kv_cache_usage_perc.Value(), 0.0);
  ExpectMatchesReference(h);
}

// Same scenario as EngineCoreTest.RequestPreemptedDuringPrefill: b is preempted at t=2 before its
// first token, resumes at 4, outputs at 5.
TEST(EngineMetricsTest, PreemptedDuringPrefill) {
  Harness h(/*num_blocks=*/6, /*block_size=*/4, /*budget=*/8);
  h.Submit(MakeEngineRequest("a", Prompt(7, 1), 4));
  h.Submit(MakeEngineRequest("b", Prompt(14, 2), 1));
  h.RunUntilIdle();
  const PrometheusMetrics& m = h.metrics;
  // a: queue 0, prefill 1, TTFT 1, decode 3. b: queue 0, prefill 5 (with the stall), TTFT 5.
  EXPECT_EQ(Read(m.queue_time).sum, 0.0);
  EXPECT_EQ(Read(m.prefill_time).sum, 6.0);
  EXPECT_EQ(Read(m.time_to_first_token).sum, 6.0);
  EXPECT_EQ(Read(m.decode_time).sum, 3.0);
  EXPECT_EQ(m.num_preemptions.Value(), 1.0);
  EXPECT_EQ(Read(m.request_num_preemptions).sum, 1.0);
  EXPECT_EQ(m.prompt_tokens.Value(), 21.0);
  ExpectMatchesReference(h);
}

// Same scenario as EngineCoreTest.RequestPreemptedTwiceDuringDecode: b's tokens come out at
// 1, 2, 4, 10, 11, 12, 13, 14 (preempted at 2 and at 4).
TEST(EngineMetricsTest, PreemptedTwiceDuringDecode) {
  Harness h(/*num_blocks=*/6, /*block_size=*/2, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 100));
  h.Submit(MakeEngineRequest("c", Prompt(1, 2), 3));
  h.Submit(MakeEngineRequest("b", Prompt(3, 3), 8));
  h.RunUntilIdle();
  ASSERT_EQ(h.recorder.num_preemptions["b"], 2);
  const PrometheusMetrics& m = h.metrics;
  EXPECT_EQ(m.num_preemptions.Value(), 2.0);
  EXPECT_EQ(Read(m.request_num_preemptions).sum, 2.0);
  // b's gaps: 1, 2, 6, 1, 1, 1, 1 — the two stalls are one sample each (2 and 6).
  const std::vector<double>& b = m.token_latency_buckets();
  const HistogramData itl = Read(m.inter_token_latency);
  const uint64_t others = itl.count - 7;  // a and c, never preempted: 1 s gaps only
  EXPECT_EQ(itl.cumulative[BucketIndex(b, 1.0)], others + 5);
  EXPECT_EQ(itl.cumulative[BucketIndex(b, 2.5)], others + 6);
  EXPECT_EQ(itl.cumulative[BucketIndex(b, 7.5)], others + 7);
  ExpectMatchesReference(h);
}

TEST(EngineMetricsTest, AbortedWhilePreempted) {
  Harness h(/*num_blocks=*/5, /*block_size=*/2, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 6));
  h.Submit(MakeEngineRequest("b", Prompt(3, 2), 6));
  h.core.Step();
  h.core.Step();
  h.core.Step();  // t=2: b preempted
  EXPECT_EQ(h.metrics.num_preemptions.Value(), 1.0);
  EXPECT_EQ(h.metrics.num_requests_preempted.Value(), 1.0);
  h.core.Abort("b");
  h.RunUntilIdle();
  EXPECT_EQ(h.metrics.num_preemptions.Value(), 1.0);
  EXPECT_EQ(Success(h, FinishReason::kAbort), 1.0);
  EXPECT_EQ(Success(h, FinishReason::kLength), 1.0);
  EXPECT_EQ(Read(h.metrics.request_num_preemptions).sum, 1.0);
  EXPECT_EQ(h.metrics.num_requests_preempted.Value(), 0.0);
  ExpectMatchesReference(h);
}

TEST(EngineMetricsTest, AbortedWhileWaiting) {
  Harness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64, /*max_num_seqs=*/1);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 3));
  h.Submit(MakeEngineRequest("b", Prompt(3, 2), 3));
  h.core.Step();
  h.clock.Advance(0.5);
  h.core.Abort("b");
  h.RunUntilIdle();
  const PrometheusMetrics& m = h.metrics;
  EXPECT_EQ(Success(h, FinishReason::kAbort), 1.0);
  EXPECT_EQ(Read(m.e2e_latency).count, 2u);
  EXPECT_EQ(Read(m.e2e_latency).sum, 1.5 + 3.5);
  EXPECT_EQ(Read(m.queue_time).count, 1u);  // a only
  EXPECT_EQ(Read(m.time_to_first_token).count, 1u);
  EXPECT_EQ(m.prompt_tokens.Value(), 3.0);
  ExpectMatchesReference(h);
}

// An abort drained in a step that schedules nothing must not count the previous step again.
// DISABLED until the engine is fixed: EngineCore::Step() calls OnStep() with scheduler_.stats()
// even when Schedule() did not run in that step (an inbox-only step, like this abort of the last
// live request), so the previous step's per-step counts (tokens, preemptions, cache queries,
// computed tokens) reach the observers twice. Fix in engine/: reset the per-step part of the
// stats at the start of every step (or pass fresh stats when nothing was scheduled).
TEST(EngineMetricsTest, AbortOfTheLastRequestDoesNotRecountTheLastStep) {
  Harness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 10));
  h.core.Step();
  h.core.Step();
  EXPECT_EQ(h.metrics.generation_tokens.Value(), 2.0);
  h.core.Abort("a");
  h.RunUntilIdle();
  EXPECT_EQ(h.metrics.generation_tokens.Value(), 2.0);
  EXPECT_EQ(h.metrics.prompt_tokens.Value(), 3.0);
  EXPECT_EQ(Read(h.metrics.iteration_tokens).count, 2u);
  EXPECT_EQ(Success(h, FinishReason::kAbort), 1.0);
}

// The per-bucket counts of `values` (cumulative, then +Inf), as a histogram with `buckets` has
// them.
std::vector<uint64_t> Cumulative(const std::vector<double>& buckets,
                                 const std::vector<double>& values) {
  std::vector<uint64_t> counts(buckets.size() + 1, 0);
  for (double v : values) ++counts[BucketIndex(buckets, v)];
  for (size_t i = 1; i < counts.size(); ++i) counts[i] += counts[i - 1];
  return counts;
}

// Every ITL sample and every TTFT is computed from the event times: on random workloads with
// preemptions (several per request), n > 1 requests (siblings share a prompt), aborts and
// requests arriving while others decode, vllm:inter_token_latency_seconds and
// vllm:time_to_first_token_seconds hold, bucket by bucket, exactly the gaps between consecutive
// NEW_TOKENS times of each request (and each first token's time since arrival) that an
// every-token observer saw, and vllm:request_params_n one sample per client request.
TEST(EngineMetricsTest, ItlAndTtftAreTheEventTimesGapsOnRandomWorkloads) {
  int64_t total_preemptions = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed);
    Harness h(/*num_blocks=*/10 + static_cast<int32_t>(rng() % 8), /*block_size=*/2,
              /*budget=*/8 + static_cast<int32_t>(rng() % 24));
    int num_client_requests = 0, sum_n = 0, next_id = 0;
    std::vector<std::string> ids;
    std::vector<double> arrival;  // by request id number
    for (int step = 0; step < 200 && (step < 60 || h.core.HasPendingWork()); ++step) {
      if (step < 60 && rng() % 3 == 0) {
        const int n = rng() % 4 == 0 ? 3 : 1;
        const int32_t prompt_len = 1 + static_cast<int32_t>(rng() % 6);
        const int32_t salt = static_cast<int32_t>(rng() % 1000);
        const int32_t max_tokens = 1 + static_cast<int32_t>(rng() % 10);
        for (int j = 0; j < n; ++j) {
          EngineRequest r =
              MakeEngineRequest(Name("r", next_id), Prompt(prompt_len, salt), max_tokens);
          r.params_n = n;
          r.reports_params_n = j == 0;
          r.arrival_ts = h.clock.Now() - 0.25 * (rng() % 4);  // waited in the frontend
          arrival.push_back(r.arrival_ts);
          ids.push_back(r.request_id);
          ++next_id;
          h.Submit(std::move(r));
        }
        ++num_client_requests;
        sum_n += n;
      }
      if (step < 60 && rng() % 11 == 0 && !ids.empty()) h.core.Abort(ids[rng() % ids.size()]);
      h.core.Step();
    }
    h.RunUntilIdle();
    std::vector<double> itl, ttft;
    for (int i = 0; i < next_id; ++i) {
      const std::vector<RequestEvent>& events = h.recorder.events[Name("r", i)];
      std::optional<double> last;
      for (const RequestEvent& e : events) {
        if (e.type != EventType::kNewTokens) continue;
        if (last) {
          itl.push_back(e.ts - *last);
        } else {
          ttft.push_back(e.ts - arrival[static_cast<size_t>(i)]);
        }
        last = e.ts;
      }
      total_preemptions += h.recorder.num_preemptions[Name("r", i)];
    }
    const PrometheusMetrics& m = h.metrics;
    EXPECT_EQ(Read(m.inter_token_latency).cumulative, Cumulative(m.token_latency_buckets(), itl));
    EXPECT_EQ(Read(m.time_to_first_token).cumulative, Cumulative(TtftBuckets(), ttft));
    double itl_sum = 0.0;
    for (double v : itl) itl_sum += v;
    EXPECT_EQ(Read(m.inter_token_latency).sum, itl_sum);  // binary-exact times: no rounding
    EXPECT_EQ(Read(m.request_n).count, static_cast<uint64_t>(num_client_requests));
    EXPECT_EQ(Read(m.request_n).sum, static_cast<double>(sum_n));
    EXPECT_EQ(h.observer.num_live_requests(), 0u);
  }
  EXPECT_GT(total_preemptions, 10);  // the workloads do preempt
}

TEST(EngineMetricsTest, StopAbortsPendingRequestsAndCountsThem) {
  Harness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 10));
  h.Submit(MakeEngineRequest("b", Prompt(3, 2), 10));
  h.core.Step();
  h.core.Stop();
  EXPECT_EQ(Success(h, FinishReason::kAbort), 2.0);
  EXPECT_EQ(h.observer.num_live_requests(), 0u);
  ExpectMatchesReference(h);
}

}  // namespace
}  // namespace tinyserve::testing
