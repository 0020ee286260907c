// Metrics cost (issue 4 targets): recording metrics costs at most 1% of engine step time at 256
// running requests (no-op executor, metrics on vs off), and rendering /metrics with 10,000
// finished requests behind it takes under 5 ms.
//
//   metrics_bench [num_requests=256] [num_steps=1000] [num_rounds=5]
//
// Part 1 runs the same decode workload through EngineCore twice per round, without and with the
// MetricsObserver, alternating to cancel drift, and reports the median step time of each. Part 2
// times the observer alone on the same event pattern (one OnTokenOutputs of 256 requests + OnStep
// per step).
// Part 3 renders the registry after 10,000 finished requests.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/clock.h"
#include "bench/noop_executor.h"
#include "engine/engine_core.h"
#include "engine/model_executor.h"
#include "metrics/metrics_observer.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/request_timeline_log.h"

namespace tinyserve {
namespace {

using BenchClock = std::chrono::steady_clock;

double Seconds(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// An observer that does nothing, delivered to as the metrics observer is: the cost of the
// observer interface itself.
class NullObserver final : public EngineObserver {
 public:
  void OnRequestEvent(const RequestRecord&, const RequestEvent&) override {}
  void OnTokenOutputs(const TokenOutputs&) override {}
  void OnStep(const SchedulerStats&) override {}
  bool wants_every_token_event() const override { return false; }
};

enum class Observers { kNone, kNull, kMetrics, kMetricsAndTimelines };

// Median microseconds per decode step of `num_requests` requests, with the given observers.
double EngineStepMicros(int32_t num_requests, int32_t num_steps, Observers observers) {
  const int32_t block_size = 16, vocab = 32, prompt_len = 128;
  const int32_t max_len = prompt_len + num_steps + 16;
  const int32_t num_blocks = num_requests * ((max_len + block_size - 1) / block_size);
  NoopExecutor executor(num_blocks, block_size, vocab, max_len);
  SteadyClock clock;
  EngineConfig config;
  config.max_num_seqs = num_requests;
  config.max_num_batched_tokens = num_requests * prompt_len;
  config.seed = 1;
  EngineCore core(config, &executor, &clock);
  PrometheusMetrics metrics(MetricsConfig{});
  MetricsObserver observer(&metrics);
  NullObserver null_observer;
  RequestTimelineLog timelines;  // the /dashboard's observer, as `serve` registers it
  if (observers == Observers::kMetrics || observers == Observers::kMetricsAndTimelines) {
    core.AddObserver(&observer);
  }
  if (observers == Observers::kMetricsAndTimelines) core.AddObserver(&timelines);
  if (observers == Observers::kNull) core.AddObserver(&null_observer);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < num_requests; ++i) {
    EngineRequest r;
    r.request_id = "bench-";
    r.request_id += std::to_string(i);
    for (int32_t t = 0; t < prompt_len; ++t) r.prompt_token_ids.push_back((i * 7 + t) % vocab);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = num_steps + 8;
    r.sampling.ignore_eos = true;
    r.arrival_ts = clock.Now();
    streams.push_back(*core.Submit(r));
  }
  core.Step();  // admit and prefill everything
  std::vector<double> step_us;
  RequestOutput delta;
  for (int32_t s = 0; s < num_steps; ++s) {
    const auto start = BenchClock::now();
    core.Step();
    step_us.push_back(Seconds(start, BenchClock::now()) * 1e6);
    for (auto& stream : streams) stream->TryNext(&delta);
  }
  core.Stop();
  std::sort(step_us.begin(), step_us.end());
  return step_us[step_us.size() / 2];
}

// Microseconds per step spent in the observer alone, on what a steady decode step of
// `num_requests` requests delivers: OnTokenOutputs with num_requests keys (the same requests as in
// the step before) and OnStep, steps `step_us` apart in engine time (so it publishes as often as
// it would in the engine).
double ObserverStepMicros(int32_t num_requests, int32_t num_steps, double step_us) {
  PrometheusMetrics metrics(MetricsConfig{});
  MetricsObserver observer(&metrics);
  std::vector<uint64_t> keys;
  for (int32_t i = 0; i < num_requests; ++i) {
    RequestRecord r;
    r.key = static_cast<uint64_t>(i);
    observer.OnRequestEvent(r, {EventType::kQueued, 0.0, 0, FinishReason::kNone});
    observer.OnRequestEvent(r, {EventType::kScheduled, 0.0, 0, FinishReason::kNone});
    keys.push_back(r.key);
  }
  observer.OnTokenOutputs(TokenOutputs{0.005, keys});  // the first tokens
  SchedulerStats stats;
  stats.num_running = num_requests;
  stats.num_generation_tokens = num_requests;
  stats.num_computed_tokens = num_requests;
  const auto start = BenchClock::now();
  for (int32_t s = 0; s < num_steps; ++s) {
    stats.ts = 0.005 + step_us * 1e-6 * s;
    observer.OnTokenOutputs(TokenOutputs{stats.ts + step_us * 1e-6, keys});
    observer.OnStep(stats);
  }
  return Seconds(start, BenchClock::now()) * 1e6 / num_steps;
}

// Milliseconds per render (Prometheus text 0.0.4, and OpenMetrics) after `num_finished` requests
// went through the observer, in alternating rounds (ABBA) of the two formats.
struct RenderTimes {
  double text_ms = 0, openmetrics_ms = 0;
  size_t text_bytes = 0, openmetrics_bytes = 0;
};
RenderTimes RenderMillis(int32_t num_finished) {
  PrometheusMetrics metrics(MetricsConfig{});
  MetricsObserver observer(&metrics);
  std::vector<int32_t> prompt(110, 1);
  for (int32_t i = 0; i < num_finished; ++i) {
    RequestRecord r;
    r.key = static_cast<uint64_t>(i);
    r.prompt_token_ids = std::span<const int32_t>(prompt.data(), 10 + i % 100);
    r.max_tokens = 64;
    const double t = i * 0.001;
    observer.OnRequestEvent(r, {EventType::kQueued, t, 0, FinishReason::kNone});
    observer.OnRequestEvent(r, {EventType::kScheduled, t + 0.001, 0, FinishReason::kNone});
    // 16 tokens 2 ms apart, one step each.
    const uint64_t key = r.key;
    for (int k = 0; k < 16; ++k) {
      observer.OnTokenOutputs(
          TokenOutputs{t + 0.002 * (k + 1), std::span<const uint64_t>(&key, 1)});
    }
    r.num_output_tokens = 16;
    observer.OnRequestEvent(r, {EventType::kFinished, t + 0.04, 0,
                                i % 10 == 0 ? FinishReason::kAbort : FinishReason::kLength});
    SchedulerStats stats;
    stats.ts = t + 0.04;
    observer.OnStep(stats);
  }
  const int kRenders = 50;
  std::vector<double> text, open;
  RenderTimes out;
  for (int round = 0; round < 8; ++round) {
    const bool openmetrics = round % 4 == 1 || round % 4 == 2;  // A B B A ...
    const auto start = BenchClock::now();
    for (int i = 0; i < kRenders; ++i) {
      if (openmetrics) {
        out.openmetrics_bytes = metrics.RenderOpenMetrics().size();
      } else {
        out.text_bytes = metrics.Render().size();
      }
    }
    (openmetrics ? open : text).push_back(Seconds(start, BenchClock::now()) * 1e3 / kRenders);
  }
  std::sort(text.begin(), text.end());
  std::sort(open.begin(), open.end());
  out.text_ms = (text[1] + text[2]) / 2;  // median of 4
  out.openmetrics_ms = (open[1] + open[2]) / 2;
  return out;
}

int Run(int argc, char** argv) {
  const int32_t num_requests = argc > 1 ? std::atoi(argv[1]) : 256;
  const int32_t num_steps = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int32_t num_rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<double> off, null, on, both;
  for (int32_t round = 0; round < num_rounds; ++round) {
    off.push_back(EngineStepMicros(num_requests, num_steps, Observers::kNone));
    null.push_back(EngineStepMicros(num_requests, num_steps, Observers::kNull));
    on.push_back(EngineStepMicros(num_requests, num_steps, Observers::kMetrics));
    both.push_back(EngineStepMicros(num_requests, num_steps, Observers::kMetricsAndTimelines));
  }
  std::sort(off.begin(), off.end());
  std::sort(null.begin(), null.end());
  std::sort(on.begin(), on.end());
  std::sort(both.begin(), both.end());
  const double off_us = off[off.size() / 2], null_us = null[null.size() / 2],
               on_us = on[on.size() / 2], both_us = both[both.size() / 2];
  std::printf(
      "metrics_bench: engine step, %d running requests in decode (no-op executor), median of %d "
      "rounds x %d steps: no observer %.2f us/step, empty observer %.2f (%+.1f%%), metrics "
      "%.2f (%+.1f%%)\n",
      num_requests, num_rounds, num_steps, off_us, null_us, 100.0 * (null_us - off_us) / off_us,
      on_us, 100.0 * (on_us - off_us) / off_us);
  std::printf(
      "metrics_bench: metrics + request timelines (/dashboard): %.2f us/step (%+.1f%% of "
      "metrics alone)\n",
      both_us, 100.0 * (both_us - on_us) / on_us);
  std::vector<double> observer_rounds;  // a descheduling inside one round spoils only that round
  for (int32_t round = 0; round < 2 * num_rounds + 1; ++round) {
    observer_rounds.push_back(ObserverStepMicros(num_requests, num_steps * 10, off_us));
  }
  std::sort(observer_rounds.begin(), observer_rounds.end());
  const double observer_us = observer_rounds[observer_rounds.size() / 2];
  std::printf(
      "metrics_bench: MetricsObserver alone, OnTokenOutputs of %d steady requests + OnStep, steps "
      "as far apart as "
      "the metrics-off ones, median round: %.3f us/step "
      "(%.1f%% of the metrics-off step)\n",
      num_requests, observer_us, 100.0 * observer_us / off_us);
  const RenderTimes render = RenderMillis(10000);
  std::printf("metrics_bench: Render() after 10000 finished requests: %.3f ms (%zu bytes)\n",
              render.text_ms, render.text_bytes);
  std::printf(
      "metrics_bench: RenderOpenMetrics() on the same registry, ABBA rounds: %.3f ms (%zu bytes), "
      "%.2fx the text format\n",
      render.openmetrics_ms, render.openmetrics_bytes, render.openmetrics_ms / render.text_ms);
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Run(argc, argv); }
