// The outputs of `tinyserve bench serve`: the result block printed like `vllm bench serve`'s, and
// the --save-result JSON with the keys vLLM's `vllm bench serve` writes (date, endpoint_type,
// backend, label, model_id, tokenizer_id, num_prompts, request_rate, burstiness,
// max_concurrency, duration, completed, failed, total_input_tokens, total_output_tokens,
// request_throughput, request_goodput (null without --goodput), output_throughput,
// total_token_throughput, input_lens, output_lens, ttfts, itls, latencies, start_times,
// generated_texts, errors, max_output_tokens_per_s, max_concurrent_requests, rtfx, then mean_,
// median_, std_ and p<N>_ <metric>_ms for each --percentile-metrics metric), plus "requests": every
// per-request measurement (times in seconds, relative to the benchmark's start), and
// "server_metrics" when /metrics was scraped.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/serve/runner.h"
#include "bench/serve/serve_metrics.h"
#include "bench/serve/server_metrics.h"

namespace tinyserve::bench {

struct RunDescription {  // what was run, for the JSON
  std::string backend;   // "openai" or "openai-chat" (vLLM's names)
  std::string model_id, base_url, endpoint, dataset;
  int num_prompts = 0;
  double request_rate = 0, burstiness = 1;
  int max_concurrency = 0;  // 0: unlimited
  std::vector<double> percentiles;
  // --percentile-metrics: which of ttft, tpot, itl, e2el get their block and keys (vLLM's default:
  // ttft, tpot, itl).
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  std::string label;  // --label ("" : null in the JSON)
};

// Writes the result block (and the server's view, when given) to `out`.
void PrintResultBlock(std::FILE* out, const BenchSummary& summary, const RunDescription& run,
                      const std::optional<ServerView>& server);

nlohmann::ordered_json ResultJson(const RunDescription& run, const RunResult& result,
                                  const BenchSummary& summary,
                                  const std::optional<ServerView>& server);

}  // namespace tinyserve::bench
