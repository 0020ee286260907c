#include "bench/serve/serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

StatusOr<GoodputSlos> ParseGoodput(const std::vector<std::string>& pairs) {
  GoodputSlos slos;
  for (const std::string& pair : pairs) {
    const size_t colon = pair.find(':');
    char* end = nullptr;
    const std::string value = colon == std::string::npos ? "" : pair.substr(colon + 1);
    const double ms = std::strtod(value.c_str(), &end);
    if (colon == std::string::npos || pair.find(':', colon + 1) != std::string::npos ||
        value.empty() || *end != '\0' || !std::isfinite(ms)) {
      return InvalidArgument("--goodput: invalid format '" + pair +
                             "': give service level objectives as KEY:VALUE pairs, the key a "
                             "metric name (ttft, tpot, e2el) and the value in milliseconds");
    }
    const std::string key = pair.substr(0, colon);
    if (ms < 0) {
      return InvalidArgument("--goodput: invalid value in '" + pair +
                             "': the service level objective must be non-negative");
    }
    if (key == "ttft") {
      slos.ttft_s = ms / 1e3;
    } else if (key == "tpot") {
      slos.tpot_s = ms / 1e3;
    } else if (key == "e2el") {
      slos.e2el_s = ms / 1e3;
    } else {
      return InvalidArgument("--goodput: invalid metric name in '" + pair +
                             "': the service level objective name must be one of ttft, tpot, "
                             "e2el");
    }
  }
  return slos;
}

StatusOr<std::vector<std::string>> ParsePercentileMetrics(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, comma - start);
    bool known = false;
    for (const char* m : kPercentileMetrics) known = known || name == m;
    if (!known) {
      return InvalidArgument("--percentile-metrics: unknown or unsupported metric '" + name +
                             "' (supported: ttft, tpot, itl, e2el)");
    }
    out.push_back(name);
    start = comma + 1;
  }
  return out;
}

BenchSummary Summarize(const std::vector<RequestRecord>& records, double duration_s,
                       const std::vector<double>& percentiles, const GoodputSlos& goodput) {
  BenchSummary s;
  s.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end), for peak concurrency
  if (goodput.any()) s.request_goodput = 0.0;
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
    if (goodput.any() && (!goodput.ttft_s || m.ttft_s <= *goodput.ttft_s) &&
        (!goodput.tpot_s || std::max(m.tpot_s, 0.0) <= *goodput.tpot_s) &&
        (!goodput.e2el_s || m.e2el_s <= *goodput.e2el_s)) {
      ++s.good_completed;
    }
    itls.insert(itls.end(), m.itl_s.begin(), m.itl_s.end());
    e2els.push_back(m.e2el_s);
  }
  std::sort(edges.begin(), edges.end());  // at equal times an end (-1) sorts before a start
  int in_flight = 0;
  for (const auto& [t, d] : edges)
    s.peak_concurrent_requests = std::max(s.peak_concurrent_requests, in_flight += d);
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    if (goodput.any()) s.request_goodput = s.good_completed / duration_s;
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
