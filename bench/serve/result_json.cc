#include "bench/serve/result_json.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <string>

namespace tinyserve::bench {
namespace {

// vLLM's key for a percentile: "p99", "p99.9", "p50".
std::string PercentileKey(double p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", p);
  return std::string("p") + buf;
}

void Header(std::FILE* out, const std::string& title, char fill) {
  const int width = 50;
  const int pad = std::max(0, width - static_cast<int>(title.size()));
  std::fprintf(out, "%s%s%s\n", std::string(static_cast<size_t>(pad / 2), fill).c_str(),
               title.c_str(), std::string(static_cast<size_t>(pad - pad / 2), fill).c_str());
}

bool Selected(const RunDescription& run, const char* metric) {
  return std::find(run.percentile_metrics.begin(), run.percentile_metrics.end(), metric) !=
         run.percentile_metrics.end();
}

void Row(std::FILE* out, const std::string& label, double v) {
  std::fprintf(out, "%-40s %-10.2f\n", label.c_str(), v);
}
void RowInt(std::FILE* out, const std::string& label, long long v) {
  std::fprintf(out, "%-40s %-10lld\n", label.c_str(), v);
}

void LatencyRows(std::FILE* out, const std::string& name, const LatencyStats& s) {
  Row(out, "Mean " + name + " (ms):", s.mean_ms);
  Row(out, "Median " + name + " (ms):", s.median_ms);
  for (const auto& [p, v] : s.percentiles_ms) {
    std::string key = PercentileKey(p);
    key[0] = 'P';
    Row(out, key + " " + name + " (ms):", v);
  }
}

void LatencyKeys(nlohmann::ordered_json& j, const std::string& name, const LatencyStats& s) {
  j["mean_" + name + "_ms"] = s.mean_ms;
  j["median_" + name + "_ms"] = s.median_ms;
  j["std_" + name + "_ms"] = s.std_ms;
  for (const auto& [p, v] : s.percentiles_ms) j[PercentileKey(p) + "_" + name + "_ms"] = v;
}

nlohmann::ordered_json Optional(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

void PrintResultBlock(std::FILE* out, const BenchSummary& s, const RunDescription& run,
                      const std::optional<ServerView>& server) {
  Header(out, " Serving Benchmark Result ", '=');
  RowInt(out, "Successful requests:", s.completed);
  RowInt(out, "Failed requests:", s.failed);
  if (run.max_concurrency > 0) RowInt(out, "Maximum request concurrency:", run.max_concurrency);
  if (!std::isinf(run.request_rate)) Row(out, "Request rate configured (RPS):", run.request_rate);
  Row(out, "Benchmark duration (s):", s.duration_s);
  RowInt(out, "Total input tokens:", s.total_input_tokens);
  RowInt(out, "Total generated tokens:", s.total_output_tokens);
  Row(out, "Request throughput (req/s):", s.request_throughput);
  if (s.request_goodput) Row(out, "Request goodput (req/s):", *s.request_goodput);
  Row(out, "Output token throughput (tok/s):", s.output_throughput);
  Row(out, "Peak output token throughput (tok/s):", s.peak_output_throughput);
  RowInt(out, "Peak concurrent requests:", s.peak_concurrent_requests);
  Row(out, "Total Token throughput (tok/s):", s.total_token_throughput);
  if (Selected(run, "ttft")) {
    Header(out, "Time to First Token", '-');
    LatencyRows(out, "TTFT", s.ttft);
  }
  if (Selected(run, "tpot")) {
    Header(out, "Time per Output Token (excl. 1st token)", '-');
    LatencyRows(out, "TPOT", s.tpot);
  }
  if (Selected(run, "itl")) {
    Header(out, "Inter-token Latency", '-');
    LatencyRows(out, "ITL", s.itl);
  }
  if (Selected(run, "e2el")) {
    Header(out, "End-to-end Latency", '-');
    LatencyRows(out, "E2EL", s.e2el);
  }
  if (server) {
    Header(out, "Server view (/metrics)", '-');
    RowInt(out, "Preemptions:", std::llround(server->preemptions));
    RowInt(out, "Finished requests (server):", std::llround(server->requests_finished));
    RowInt(out, "Generated tokens (server):", std::llround(server->generation_tokens));
    auto opt = [&](const std::string& label, const std::optional<double>& v) {
      if (v) Row(out, label, *v);
    };
    opt("Mean TTFT, server (ms):", server->mean_ttft_ms);
    opt("Mean E2EL, server (ms):", server->mean_e2el_ms);
    opt("Mean queue time (ms):", server->mean_queue_ms);
    opt("Mean prefill time (ms):", server->mean_prefill_ms);
    opt("Mean decode time (ms):", server->mean_decode_ms);
    if (server->peak_kv_cache_usage)
      Row(out, "Peak KV cache usage (%):", *server->peak_kv_cache_usage * 100);
    if (server->peak_running)
      RowInt(out, "Peak running requests:", std::llround(*server->peak_running));
    if (server->peak_waiting)
      RowInt(out, "Peak waiting requests:", std::llround(*server->peak_waiting));
  }
  Header(out, "", '=');
}

nlohmann::ordered_json ResultJson(const RunDescription& run, const RunResult& result,
                                  const BenchSummary& s, const std::optional<ServerView>& server) {
  nlohmann::ordered_json j;
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[32];
  std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::gmtime(&now));
  j["date"] = date;
  j["endpoint_type"] = run.backend;
  j["backend"] = run.backend;
  j["label"] =
      run.label.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(run.label);
  j["model_id"] = run.model_id;
  j["tokenizer_id"] = nullptr;
  j["base_url"] = run.base_url;
  j["endpoint"] = run.endpoint;
  j["dataset"] = run.dataset;
  j["num_prompts"] = run.num_prompts;
  j["request_rate"] = std::isinf(run.request_rate) ? nlohmann::ordered_json("inf")
                                                   : nlohmann::ordered_json(run.request_rate);
  j["burstiness"] = run.burstiness;
  j["max_concurrency"] =
      run.max_concurrency > 0 ? nlohmann::ordered_json(run.max_concurrency) : nullptr;
  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] = Optional(s.request_goodput);
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  // The per-request arrays are filled below; their keys go in now, in vLLM's order (an
  // ordered_json's members move when keys are added, so no reference into it is kept).
  static constexpr const char* kArrays[] = {
      "input_lens", "output_lens", "ttfts",           "itls",
      "latencies",  "start_times", "generated_texts", "errors"};
  for (const char* key : kArrays) j[key] = nullptr;
  nlohmann::ordered_json input_lens = nlohmann::ordered_json::array(), output_lens = input_lens,
                         ttfts = input_lens, itls = input_lens, latencies = input_lens,
                         start_times = input_lens, texts = input_lens, errors = input_lens,
                         requests = input_lens;
  j["max_output_tokens_per_s"] = s.peak_output_throughput;
  j["max_concurrent_requests"] = s.peak_concurrent_requests;
  j["rtfx"] = 0.0;  // vLLM's inverse real-time factor of speech benchmarks; no audio here
  if (Selected(run, "ttft")) LatencyKeys(j, "ttft", s.ttft);
  if (Selected(run, "tpot")) LatencyKeys(j, "tpot", s.tpot);
  if (Selected(run, "itl")) LatencyKeys(j, "itl", s.itl);
  if (Selected(run, "e2el")) LatencyKeys(j, "e2el", s.e2el);
  for (const RequestRecord& r : result.records) {
    const RequestMetrics m = ComputeRequestMetrics(r);
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.success ? r.output_len : 0);
    ttfts.push_back(r.success ? m.ttft_s : 0.0);
    itls.push_back(m.itl_s);
    latencies.push_back(r.success ? m.e2el_s : 0.0);
    start_times.push_back(r.start_s - result.start_s);
    texts.push_back(r.generated_text);
    errors.push_back(r.error);
    nlohmann::ordered_json chunks = nlohmann::ordered_json::array();
    for (double t : r.chunk_s) chunks.push_back(t - result.start_s);
    requests.push_back({{"index", r.index},
                        {"success", r.success},
                        {"error", r.error},
                        {"http_status", r.http_status},
                        {"prompt_len", r.prompt_len},
                        {"output_len", r.output_len},
                        {"requested_output_len", r.requested_output_len},
                        {"usage_reported", r.usage_reported},
                        {"start_s", r.start_s - result.start_s},
                        {"end_s", r.end_s - result.start_s},
                        {"ttft_s", r.success ? nlohmann::ordered_json(m.ttft_s) : nullptr},
                        {"tpot_s", m.tpot_s >= 0 ? nlohmann::ordered_json(m.tpot_s) : nullptr},
                        {"e2el_s", r.success ? nlohmann::ordered_json(m.e2el_s) : nullptr},
                        {"itls_s", m.itl_s},
                        {"chunk_times_s", chunks}});
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["latencies"] = std::move(latencies);
  j["start_times"] = std::move(start_times);
  j["generated_texts"] = std::move(texts);
  j["errors"] = std::move(errors);
  j["requests"] = std::move(requests);
  if (server) {
    j["server_metrics"] = {{"preemptions", server->preemptions},
                           {"requests_finished", server->requests_finished},
                           {"prompt_tokens", server->prompt_tokens},
                           {"generation_tokens", server->generation_tokens},
                           {"ttft_count", server->ttft_count},
                           {"e2el_count", server->e2el_count},
                           {"mean_ttft_ms", Optional(server->mean_ttft_ms)},
                           {"mean_e2el_ms", Optional(server->mean_e2el_ms)},
                           {"mean_queue_ms", Optional(server->mean_queue_ms)},
                           {"mean_prefill_ms", Optional(server->mean_prefill_ms)},
                           {"mean_decode_ms", Optional(server->mean_decode_ms)},
                           {"mean_tpot_ms", Optional(server->mean_tpot_ms)},
                           {"mean_itl_ms", Optional(server->mean_itl_ms)},
                           {"peak_kv_cache_usage", Optional(server->peak_kv_cache_usage)},
                           {"peak_running", Optional(server->peak_running)},
                           {"peak_waiting", Optional(server->peak_waiting)}};
  }
  return j;
}

}  // namespace tinyserve::bench
