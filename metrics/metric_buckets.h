// Histogram bucket boundaries of the metrics catalogue (DESIGN §5): vLLM V1's boundaries, with
// finer ones added below them (tiny models on a CPU finish in milliseconds; adding boundaries keeps
// histogram_quantile() dashboards valid). Plain functions; thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tinyserve {

// vllm:time_to_first_token_seconds: 0.0001 ... 2560.
std::vector<double> TtftBuckets();
// vllm:inter_token_latency_seconds and vllm:request_time_per_output_token_seconds: 0.0001 ... 80.
std::vector<double> TokenLatencyBuckets();
// vllm:e2e_request_latency_seconds and the queue/prefill/decode/inference phases: 0.001 ... 7680.
std::vector<double> RequestLatencyBuckets();
// 1, 2, 5, 10, 20, 50, ... while <= max_value (vLLM's build_1_2_5_buckets); {1} at least.
std::vector<double> OneTwoFiveBuckets(int64_t max_value);
// vllm:iteration_tokens_total: 1, 8, 16, 32, ..., 16384.
std::vector<double> IterationTokensBuckets();
// vllm:request_num_preemptions: 0, 1, 2, 3, 5, 10, 20, 50.
std::vector<double> PreemptionCountBuckets();
// vllm:request_params_n: 1, 2, 5, 10, 20.
std::vector<double> ParamsNBuckets();

// Returns the index of the bucket `value` falls in: the first boundary >= value (Prometheus `le`
// semantics, as prometheus::Histogram::Observe), or boundaries.size() for +Inf.
inline size_t BucketIndex(const std::vector<double>& boundaries, double value) {
  // Branch-free lower_bound: this runs once per token.
  const double* first = boundaries.data();
  size_t n = boundaries.size();
  while (n > 1) {
    const size_t half = n / 2;
    first = first[half - 1] < value ? first + half : first;
    n -= half;
  }
  return static_cast<size_t>(first - boundaries.data()) + (n == 1 && *first < value ? 1 : 0);
}

}  // namespace tinyserve
