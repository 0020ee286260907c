// The outputs of `tinyserve bench serve`: the result block printed like `vllm bench serve`'s, and
// the --save-result JSON with vLLM's key names (completed, failed, duration, total_input_tokens,
// ..., mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms, the same for tpot, itl and e2el,
// input_lens, output_lens, ttfts, itls, generated_texts, errors), plus "requests": every
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
};

// Writes the result block (and the server's view, when given) to `out`.
void PrintResultBlock(std::FILE* out, const BenchSummary& summary, const RunDescription& run,
                      const std::optional<ServerView>& server);

nlohmann::ordered_json ResultJson(const RunDescription& run, const RunResult& result,
                                  const BenchSummary& summary,
                                  const std::optional<ServerView>& server);

}  // namespace tinyserve::bench
