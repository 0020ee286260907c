// Histogram bucket boundaries of the metrics catalogue (DESIGN §5): vLLM V1's boundaries, with
// finer ones added below them (tiny models on a CPU finish in milliseconds; adding boundaries keeps
// histogram_quantile() dashboards valid). Plain functions; thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

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

// The bucket families of vLLM (vllm/v1/metrics/buckets.py, BucketFamilyKey): every histogram takes
// its boundaries from exactly one family. kv_cache_residency has no histogram in tinyserve (the
// key is accepted, as vLLM's, and changes nothing).
enum class BucketFamily {
  kRequestLatency,         // e2e, queue, prefill, decode, inference
  kTimeToFirstToken,       // vllm:time_to_first_token_seconds
  kInterTokenLatency,      // vllm:inter_token_latency_seconds, ..._time_per_output_token_seconds
  kIterationTokens,        // vllm:iteration_tokens_total
  kRequestParamsN,         // vllm:request_params_n
  kRequestNumPreemptions,  // vllm:request_num_preemptions
  kRequestTokens,          // vllm:request_prompt_tokens, _generation_tokens, _params_max_tokens
  kKvCacheResidency,       // none here
};
inline constexpr int kNumBucketFamilies = 8;
// vLLM's key of `family` ("request_latency", ...).
const char* BucketFamilyKey(BucketFamily family);

// --histogram-buckets: tinyserve's finer defaults (vLLM's boundaries with finer ones below), or
// vLLM's exact defaults, for side-by-side comparison.
enum class BucketPreset { kTinyserve, kVllm };

// Which boundaries each histogram gets: the preset, then any family given by
// --custom-histogram-buckets replaces the preset's list for every histogram of that family.
struct HistogramBucketConfig {
  BucketPreset preset = BucketPreset::kTinyserve;
  std::array<std::optional<std::vector<double>>, kNumBucketFamilies> custom;
};

// The boundaries of `family` under `config`. max_model_len caps the 1-2-5 token-count series of
// kRequestTokens (both presets).
std::vector<double> FamilyBuckets(const HistogramBucketConfig& config, BucketFamily family,
                                  int64_t max_model_len);
// vLLM's default boundaries of `family` (its buckets.py; request_tokens: build_1_2_5_buckets).
std::vector<double> VllmFamilyBuckets(BucketFamily family, int64_t max_model_len);

// Parses --histogram-buckets: "tinyserve" (the default) or "vllm".
StatusOr<BucketPreset> ParseBucketPreset(const std::string& name);
// Parses --custom-histogram-buckets into `config`: a JSON object from vLLM family keys to
// non-empty lists of finite numbers in strictly increasing order, as vLLM's flag takes it
// ('{"request_latency": [0.01, 0.1, 1, 10]}'). Returns InvalidArgument naming the key and the
// problem (unknown key, not a list, empty, not a number, not finite, not increasing).
Status ParseCustomHistogramBuckets(const std::string& json_text, HistogramBucketConfig* config);

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
