#include "metrics/metric_buckets.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace tinyserve {

std::vector<double> TtftBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08,  0.1,   0.25,  0.5,
          0.75,   1.0,     2.5,    5.0,   7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> TokenLatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,
          0.3,    0.4,     0.5,    0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
}

std::vector<double> RequestLatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01,  0.025, 0.05,  0.1,   0.2,    0.3,   0.5,
          0.8,   1.0,    1.5,   2.0,   2.5,   5.0,   10.0,  15.0,   20.0,  30.0,
          40.0,  50.0,   60.0,  120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::vector<double> OneTwoFiveBuckets(int64_t max_value) {
  std::vector<double> buckets;
  static constexpr int64_t kMantissas[] = {1, 2, 5};
  for (int64_t exponent = 1;; exponent *= 10) {
    for (int64_t m : kMantissas) {
      const int64_t value = m * exponent;
      if (value > max_value) {
        if (buckets.empty()) buckets.push_back(1.0);
        return buckets;
      }
      buckets.push_back(static_cast<double>(value));
    }
  }
}

std::vector<double> IterationTokensBuckets() {
  std::vector<double> buckets = {1.0};
  for (int64_t v = 8; v <= 16384; v *= 2) buckets.push_back(static_cast<double>(v));
  return buckets;
}

std::vector<double> PreemptionCountBuckets() { return {0, 1, 2, 3, 5, 10, 20, 50}; }

std::vector<double> ParamsNBuckets() { return {1, 2, 5, 10, 20}; }

namespace {

constexpr const char* kFamilyKeys[kNumBucketFamilies] = {
    "request_latency",  "time_to_first_token",     "inter_token_latency", "iteration_tokens",
    "request_params_n", "request_num_preemptions", "request_tokens",      "kv_cache_residency"};

std::string KnownKeys() {
  std::string keys;
  for (const char* key : kFamilyKeys) keys += (keys.empty() ? "" : ", ") + std::string(key);
  return keys;
}

}  // namespace

const char* BucketFamilyKey(BucketFamily family) { return kFamilyKeys[static_cast<int>(family)]; }

std::vector<double> VllmFamilyBuckets(BucketFamily family, int64_t max_model_len) {
  switch (family) {
    case BucketFamily::kRequestLatency:
      return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
              30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
    case BucketFamily::kTimeToFirstToken:
      return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
              1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
    case BucketFamily::kInterTokenLatency:
      return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
              0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
    case BucketFamily::kIterationTokens:
      return IterationTokensBuckets();
    case BucketFamily::kRequestParamsN:
      return ParamsNBuckets();
    case BucketFamily::kRequestNumPreemptions:
      return {1, 2, 3, 4, 5, 10, 20};
    case BucketFamily::kRequestTokens:
      return OneTwoFiveBuckets(max_model_len);
    case BucketFamily::kKvCacheResidency:
      return {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,  1,   2,
              5,     10,    20,    30,   60,   120,  300, 600, 1200, 1800};
  }
  return {};
}

std::vector<double> FamilyBuckets(const HistogramBucketConfig& config, BucketFamily family,
                                  int64_t max_model_len) {
  const auto& custom = config.custom[static_cast<int>(family)];
  if (custom) return *custom;
  if (config.preset == BucketPreset::kVllm) return VllmFamilyBuckets(family, max_model_len);
  switch (family) {
    case BucketFamily::kRequestLatency:
      return RequestLatencyBuckets();
    case BucketFamily::kTimeToFirstToken:
      return TtftBuckets();
    case BucketFamily::kInterTokenLatency:
      return TokenLatencyBuckets();
    case BucketFamily::kRequestNumPreemptions:
      return PreemptionCountBuckets();
    default:
      return VllmFamilyBuckets(family, max_model_len);
  }
}

StatusOr<BucketPreset> ParseBucketPreset(const std::string& name) {
  if (name == "tinyserve") return BucketPreset::kTinyserve;
  if (name == "vllm") return BucketPreset::kVllm;
  return InvalidArgument("--histogram-buckets: unknown preset \"" + name +
                         "\" (known: tinyserve, vllm)");
}

Status ParseCustomHistogramBuckets(const std::string& json_text, HistogramBucketConfig* config) {
  const std::string flag = "--custom-histogram-buckets: ";
  const nlohmann::json parsed =
      nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return InvalidArgument(flag + "not valid JSON: " + json_text);
  if (!parsed.is_object()) {
    return InvalidArgument(flag + "expected a JSON object from bucket family keys (" + KnownKeys() +
                           ") to lists of boundaries");
  }
  for (const auto& item : parsed.items()) {
    const std::string& key = item.key();
    int family = -1;
    for (int i = 0; i < kNumBucketFamilies; ++i) {
      if (key == kFamilyKeys[i]) family = i;
    }
    if (family < 0) {
      return InvalidArgument(flag + "unknown bucket family \"" + key + "\" (known: " + KnownKeys() +
                             ")");
    }
    const std::string where = flag + "\"" + key + "\": ";
    if (!item.value().is_array()) return InvalidArgument(where + "expected a list of numbers");
    if (item.value().empty()) return InvalidArgument(where + "the list of boundaries is empty");
    std::vector<double> bounds;
    for (const nlohmann::json& v : item.value()) {
      if (!v.is_number()) return InvalidArgument(where + "not a number: " + v.dump());
      const double b = v.get<double>();
      if (!std::isfinite(b)) return InvalidArgument(where + "not finite: " + v.dump());
      if (!bounds.empty() && b <= bounds.back()) {
        return InvalidArgument(where + "boundaries must increase strictly, but " + v.dump() +
                               " follows " + nlohmann::json(bounds.back()).dump());
      }
      bounds.push_back(b);
    }
    config->custom[family] = std::move(bounds);
  }
  return Status::Ok();
}

}  // namespace tinyserve
