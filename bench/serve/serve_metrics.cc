#include "bench/serve/serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tinyserve::bench {
namespace {

LatencyStats Stats(std::vector<double> seconds, const std::vector<double>& percentiles) {
  LatencyStats s;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, 0.0);
  if (seconds.empty()) return s;
  const double n = static_cast<double>(seconds.size());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double var = 0;
  for (double x : seconds) var += (x - mean) * (x - mean);
  s.mean_ms = mean * 1e3;
  s.std_ms = std::sqrt(var / n) * 1e3;
  std::sort(seconds.begin(), seconds.end());
  s.median_ms = Percentile(seconds, 50) * 1e3;
  for (auto& [p, v] : s.percentiles_ms) v = Percentile(seconds, p) * 1e3;
  return s;
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double idx = (static_cast<double>(values.size()) - 1.0) * std::clamp(p, 0.0, 100.0) / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(idx));
  const size_t hi = std::min(values.size() - 1, lo + 1);
  return values[lo] + (values[hi] - values[lo]) * (idx - static_cast<double>(lo));
}

double LatencyStats::PercentileMs(double p) const {
  for (const auto& [q, v] : percentiles_ms) {
    if (q == p) return v;
  }
  return 0.0;
}

RequestMetrics ComputeRequestMetrics(const RequestRecord& r) {
  RequestMetrics m;
  if (r.chunk_s.empty()) return m;
  m.ttft_s = r.chunk_s.front() - r.start_s;
  m.e2el_s = r.end_s - r.start_s;
  if (r.output_len > 1) {
    m.tpot_s = (r.chunk_s.back() - r.chunk_s.front()) / static_cast<double>(r.output_len - 1);
  }
  for (size_t i = 1; i < r.chunk_s.size(); ++i) m.itl_s.push_back(r.chunk_s[i] - r.chunk_s[i - 1]);
  return m;
}

BenchSummary Summarize(const std::vector<RequestRecord>& records, double duration_s,
                       const std::vector<double>& percentiles) {
  BenchSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end), for peak concurrency
  for (const RequestRecord& r : records) {
    edges.emplace_back(r.start_s, 1);
    edges.emplace_back(r.end_s, -1);
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input_tokens += r.prompt_len;
    s.total_output_tokens += r.output_len;
    const RequestMetrics m = ComputeRequestMetrics(r);
    ttfts.push_back(m.ttft_s);
    if (m.tpot_s >= 0) tpots.push_back(m.tpot_s);
    itls.insert(itls.end(), m.itl_s.begin(), m.itl_s.end());
    e2els.push_back(m.e2el_s);
  }
  std::sort(edges.begin(), edges.end());  // at equal times an end (-1) sorts before a start
  int in_flight = 0;
  for (const auto& [t, d] : edges)
    s.peak_concurrent_requests = std::max(s.peak_concurrent_requests, in_flight += d);
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    double t0 = INFINITY;  // the first send
    for (const RequestRecord& r : records) t0 = std::min(t0, r.start_s);
    for (double v : OutputThroughputOverTime(records, t0, duration_s, 1.0)) {
      s.peak_output_throughput = std::max(s.peak_output_throughput, v);
    }
  }
  s.ttft = Stats(std::move(ttfts), percentiles);
  s.tpot = Stats(std::move(tpots), percentiles);
  s.itl = Stats(std::move(itls), percentiles);
  s.e2el = Stats(std::move(e2els), percentiles);
  return s;
}

std::vector<double> OutputThroughputOverTime(const std::vector<RequestRecord>& records, double t0,
                                             double duration_s, double bucket_s) {
  const size_t n = static_cast<size_t>(std::max(1.0, std::ceil(duration_s / bucket_s)));
  std::vector<double> tokens(n, 0.0);
  for (const RequestRecord& r : records) {
    if (!r.success || r.chunk_s.empty()) continue;
    const double per_chunk =
        static_cast<double>(r.output_len) / static_cast<double>(r.chunk_s.size());
    for (double t : r.chunk_s) {
      const double b = std::floor((t - t0) / bucket_s);
      tokens[static_cast<size_t>(std::clamp(b, 0.0, static_cast<double>(n - 1)))] += per_chunk;
    }
  }
  for (size_t i = 0; i < n; ++i) {  // the last bucket may be cut short by the end of the run
    const double width = std::min(bucket_s, duration_s - static_cast<double>(i) * bucket_s);
    tokens[i] /= width > 0 ? width : bucket_s;
  }
  return tokens;
}

}  // namespace tinyserve::bench
