#include "bench/serve/server_metrics.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

namespace tinyserve::bench {
namespace {

double Get(const MetricTotals& m, const std::string& name) {
  auto it = m.find(name);
  return it == m.end() ? 0.0 : it->second;
}

// Mean of a histogram over the run, in ms.
std::optional<double> MeanMs(const MetricTotals& before, const MetricTotals& after,
                             const std::string& name, double* count_out = nullptr) {
  const double count = Get(after, name + "_count") - Get(before, name + "_count");
  if (count_out != nullptr) *count_out = count;
  if (count <= 0) return std::nullopt;
  return (Get(after, name + "_sum") - Get(before, name + "_sum")) / count * 1e3;
}

}  // namespace

MetricTotals ParsePrometheusText(const std::string& text) {
  MetricTotals totals;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos || name_end == 0) continue;
    size_t value_start = name_end;
    if (line[name_end] == '{') {
      // Label values may hold '}' inside quotes; find the closing brace outside quotes.
      bool quoted = false;
      size_t i = name_end + 1;
      for (; i < line.size(); ++i) {
        if (line[i] == '\\') {
          ++i;
        } else if (line[i] == '"') {
          quoted = !quoted;
        } else if (line[i] == '}' && !quoted) {
          break;
        }
      }
      if (i >= line.size()) continue;
      value_start = i + 1;
    }
    const char* begin = line.c_str() + value_start;
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin) continue;
    totals[line.substr(0, name_end)] += v;
  }
  return totals;
}

StatusOr<MetricTotals> ScrapeMetrics(const Target& target) {
  httplib::Client client(target.host, target.port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!target.api_key.empty()) headers.emplace("Authorization", "Bearer " + target.api_key);
  // /metrics lives at the server's root, next to /v1.
  const std::string prefix = target.path.substr(0, target.path.rfind("/v1/"));
  auto res = client.Get(prefix + "/metrics", headers);
  if (!res) {
    return Unavailable("GET /metrics on " + target.host + ":" + std::to_string(target.port) +
                       " failed: " + httplib::to_string(res.error()));
  }
  if (res->status != 200) {
    return Unavailable("GET /metrics answered HTTP " + std::to_string(res->status));
  }
  return ParsePrometheusText(res->body);
}

ServerView DiffMetrics(const MetricTotals& before, const MetricTotals& after) {
  auto delta = [&](const std::string& name) { return Get(after, name) - Get(before, name); };
  ServerView v;
  v.preemptions = delta("vllm:num_preemptions_total");
  v.prompt_tokens = delta("vllm:prompt_tokens_total");
  v.generation_tokens = delta("vllm:generation_tokens_total");
  v.requests_finished = delta("vllm:request_success_total");
  v.mean_ttft_ms = MeanMs(before, after, "vllm:time_to_first_token_seconds", &v.ttft_count);
  v.mean_e2el_ms = MeanMs(before, after, "vllm:e2e_request_latency_seconds", &v.e2el_count);
  v.mean_queue_ms = MeanMs(before, after, "vllm:request_queue_time_seconds");
  v.mean_prefill_ms = MeanMs(before, after, "vllm:request_prefill_time_seconds");
  v.mean_decode_ms = MeanMs(before, after, "vllm:request_decode_time_seconds");
  v.mean_tpot_ms = MeanMs(before, after, "vllm:request_time_per_output_token_seconds");
  v.mean_itl_ms = MeanMs(before, after, "vllm:inter_token_latency_seconds");
  return v;
}

MetricsSampler::MetricsSampler(const Target& target, double interval_s) {
  thread_ = std::thread([this, target, interval_s] {
    while (!stop_.load()) {
      if (auto m = ScrapeMetrics(target); m.ok()) {
        peak_kv_ = std::max({peak_kv_, Get(*m, "vllm:kv_cache_usage_perc"),
                             Get(*m, "vllm:gpu_cache_usage_perc")});  // older vLLM name
        peak_running_ = std::max(peak_running_, Get(*m, "vllm:num_requests_running"));
        peak_waiting_ = std::max(peak_waiting_, Get(*m, "vllm:num_requests_waiting"));
      }
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::duration<double>(interval_s);
      while (!stop_.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  });
}

MetricsSampler::~MetricsSampler() { Stop(); }

void MetricsSampler::Stop(ServerView* view) {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (view == nullptr) return;
  if (peak_kv_ >= 0) view->peak_kv_cache_usage = peak_kv_;
  if (peak_running_ >= 0) view->peak_running = peak_running_;
  if (peak_waiting_ >= 0) view->peak_waiting = peak_waiting_;
}

}  // namespace tinyserve::bench
