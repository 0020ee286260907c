// What a router's scrape rate costs a busy replica (issue 22): llm-d's endpoint picker scrapes
// /metrics every 50 ms (20/s). The engine (no-op executor, the metrics observer registered) runs
// `num_requests` requests in decode on this thread; a second thread renders /metrics at
// `scrapes_per_s` during every other phase. Phases alternate A (no scrapes) and B (scrapes),
// ABBA-ordered so that drift in the machine's load falls on both alike; each phase lasts
// `phase_s` seconds (or fewer, if it reaches its share of the requests' max_tokens). Prints the
// mean and median step time of each kind of phase, their ratio B/A, and the render time (median,
// p99, max) of every scrape.
//
//   scrape_bench [num_requests=256] [scrapes_per_s=20] [phase_s=1.0] [num_rounds=4]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "bench/noop_executor.h"
#include "engine/engine_core.h"
#include "metrics/metrics_observer.h"
#include "metrics/prometheus_metrics.h"

namespace tinyserve {
namespace {

using SteadyTime = std::chrono::steady_clock;

double Seconds(SteadyTime::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double Mean(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

int Run(int argc, char** argv) {
  const int32_t num_requests = argc > 1 ? std::atoi(argv[1]) : 256;
  const double scrapes_per_s = argc > 2 ? std::atof(argv[2]) : 20.0;
  const double phase_s = argc > 3 ? std::atof(argv[3]) : 1.0;
  const int num_rounds = argc > 4 ? std::atoi(argv[4]) : 4;
  if (num_requests < 1 || scrapes_per_s <= 0.0 || phase_s <= 0.0 || num_rounds < 1) {
    std::fprintf(stderr, "usage: scrape_bench [num_requests] [scrapes_per_s] [phase_s] [rounds]\n");
    return 2;
  }
  const int32_t block_size = 16, vocab = 32, prompt_len = 128;
  const int32_t max_len = 1 << 16;
  // Each request has room for the whole run; decode never preempts. A phase also ends after its
  // share of the requests' max_tokens, so no request finishes during the run.
  const int32_t blocks_per_request = 1 + max_len / block_size;
  const int32_t max_tokens = max_len - prompt_len - 16;
  const int64_t max_phase_steps = (max_tokens - 16) / (2 * num_rounds);
  NoopExecutor executor(num_requests * blocks_per_request, block_size, vocab, max_len);
  SteadyClock clock;
  EngineConfig config;
  config.max_num_seqs = num_requests;
  config.max_num_batched_tokens = num_requests * prompt_len;
  config.seed = 1;
  MetricsConfig metrics_config;
  metrics_config.model_name = "bench";
  metrics_config.max_model_len = max_len;
  metrics_config.block_size = block_size;
  metrics_config.num_gpu_blocks = executor.num_kv_blocks();
  PrometheusMetrics metrics(metrics_config);
  MetricsObserver observer(&metrics);
  EngineCore core(config, &executor, &clock);
  core.AddObserver(&observer);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < num_requests; ++i) {
    EngineRequest r;
    r.request_id = "bench-" + std::to_string(i);
    for (int32_t t = 0; t < prompt_len; ++t) r.prompt_token_ids.push_back((i * 7 + t) % vocab);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    streams.push_back(*core.Submit(r));
  }
  core.Step();  // admit and prefill everything
  if (core.scheduler().num_running() != num_requests) {
    std::fprintf(stderr, "expected %d running requests, got %d\n", num_requests,
                 core.scheduler().num_running());
    return 1;
  }

  // The scraper: renders while `scraping` is set, one render every 1/scrapes_per_s seconds.
  std::atomic<bool> scraping{false}, done{false};
  std::mutex render_mu;
  std::vector<double> render_us;
  size_t render_bytes = 0;
  std::thread scraper([&] {
    const auto period = std::chrono::duration_cast<SteadyTime::duration>(
        std::chrono::duration<double>(1.0 / scrapes_per_s));
    auto next = SteadyTime::now();
    while (!done.load()) {
      if (!scraping.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        next = SteadyTime::now();
        continue;
      }
      std::this_thread::sleep_until(next);
      next += period;
      const auto start = SteadyTime::now();
      const std::string text = metrics.Render();
      const double us = Seconds(SteadyTime::now() - start) * 1e6;
      std::lock_guard<std::mutex> lock(render_mu);
      render_us.push_back(us);
      render_bytes = text.size();
    }
  });

  std::vector<double> a_steps, b_steps;  // step times in microseconds
  std::vector<double> a_phase_means, b_phase_means;
  RequestOutput delta;
  int64_t total_steps = 0;
  for (int round = 0; round < num_rounds; ++round) {
    for (int k = 0; k < 2; ++k) {
      const bool with_scrapes = (round % 2 == 0) ? k == 1 : k == 0;  // AB, BA, AB, ...
      scraping.store(with_scrapes);
      std::vector<double>& steps = with_scrapes ? b_steps : a_steps;
      const size_t first = steps.size();
      const auto phase_end = SteadyTime::now() + std::chrono::duration_cast<SteadyTime::duration>(
                                                     std::chrono::duration<double>(phase_s));
      for (int64_t n = 0; n < max_phase_steps && SteadyTime::now() < phase_end; ++n) {
        const auto start = SteadyTime::now();
        core.Step();
        steps.push_back(Seconds(SteadyTime::now() - start) * 1e6);
        for (auto& stream : streams) stream->TryNext(&delta);
        ++total_steps;
      }
      const std::vector<double> phase(steps.begin() + static_cast<ptrdiff_t>(first), steps.end());
      (with_scrapes ? b_phase_means : a_phase_means).push_back(Mean(phase));
    }
  }
  scraping.store(false);
  done.store(true);
  scraper.join();
  if (core.scheduler().num_running() != num_requests) {
    std::fprintf(stderr, "requests finished during the run: make it shorter\n");
    return 1;
  }
  core.Stop();

  std::printf(
      "scrape_bench: %d requests in decode, %d rounds of A (no scrapes) / B (%.0f scrapes/s) "
      "phases of %.1f s, %lld steps\n",
      num_requests, num_rounds, scrapes_per_s, phase_s, static_cast<long long>(total_steps));
  std::printf("  step us  A: mean %.2f median %.2f p99 %.2f (%zu steps)\n", Mean(a_steps),
              Percentile(a_steps, 0.5), Percentile(a_steps, 0.99), a_steps.size());
  std::printf("  step us  B: mean %.2f median %.2f p99 %.2f (%zu steps)\n", Mean(b_steps),
              Percentile(b_steps, 0.5), Percentile(b_steps, 0.99), b_steps.size());
  std::printf("  ratio B/A: mean %.3f median %.3f; per round:", Mean(b_steps) / Mean(a_steps),
              Percentile(b_steps, 0.5) / Percentile(a_steps, 0.5));
  for (size_t i = 0; i < a_phase_means.size() && i < b_phase_means.size(); ++i) {
    std::printf(" %.3f", b_phase_means[i] / a_phase_means[i]);
  }
  std::printf("\n  render us: median %.1f p99 %.1f max %.1f (%zu scrapes, %zu bytes)\n",
              Percentile(render_us, 0.5), Percentile(render_us, 0.99),
              render_us.empty() ? 0.0 : *std::max_element(render_us.begin(), render_us.end()),
              render_us.size(), render_bytes);
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Run(argc, argv); }
