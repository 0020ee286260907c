// The server's own view of a benchmark, from its Prometheus `/metrics` (vLLM's metric names, so it
// works against vLLM as well as tinyserve): a snapshot before and after the run, and optional
// sampling during it for the peaks of gauges (KV-cache usage, running and waiting requests).
// Deltas of counters and of histogram sums/counts give the run's preemptions, tokens, requests and
// the mean TTFT, e2e latency, queue, prefill and decode times the server measured.
#pragma once

#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "base/status.h"
#include "bench/serve/stream_client.h"

namespace tinyserve::bench {

// Prometheus text format: the sum over all series of each metric name (labels dropped), e.g.
// "vllm:num_preemptions_total" -> 3. Comments and malformed lines are skipped.
using MetricTotals = std::map<std::string, double>;
MetricTotals ParsePrometheusText(const std::string& text);

// GET {base}/metrics once. Unavailable if the server does not answer 200.
StatusOr<MetricTotals> ScrapeMetrics(const Target& target);

struct ServerView {
  double preemptions = 0;
  double prompt_tokens = 0, generation_tokens = 0;
  double requests_finished = 0;  // sum of vllm:request_success_total over finished reasons
  // Means over the run, in ms (nullopt when the server reported no sample in the run).
  std::optional<double> mean_ttft_ms, mean_e2el_ms, mean_queue_ms, mean_prefill_ms, mean_decode_ms,
      mean_tpot_ms, mean_itl_ms;
  double ttft_count = 0, e2el_count = 0;  // histogram samples in the run
  // Peaks seen by sampling during the run (nullopt without sampling).
  std::optional<double> peak_kv_cache_usage, peak_running, peak_waiting;
};

ServerView DiffMetrics(const MetricTotals& before, const MetricTotals& after);

// Polls /metrics every `interval_s` on its own thread between construction and Stop(), keeping
// the peaks of vllm:kv_cache_usage_perc, vllm:num_requests_running and vllm:num_requests_waiting.
class MetricsSampler {
 public:
  MetricsSampler(const Target& target, double interval_s);
  ~MetricsSampler();  // Stop()
  // Stops polling and writes the peaks into `view`.
  void Stop(ServerView* view = nullptr);

 private:
  std::atomic<bool> stop_{false};
  double peak_kv_ = -1, peak_running_ = -1, peak_waiting_ = -1;  // written by thread_ only
  std::thread thread_;
};

}  // namespace tinyserve::bench
