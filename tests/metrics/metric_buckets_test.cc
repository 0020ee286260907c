// BucketIndex (branch-free) agrees with std::lower_bound, i.e. Prometheus `le` semantics; the
// bucket families of --histogram-buckets / --custom-histogram-buckets reach every histogram.
#include "metrics/metric_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "metrics/prometheus_metrics.h"

namespace tinyserve {
namespace {

TEST(MetricBucketsTest, BucketIndexIsLowerBound) {
  const std::vector<std::vector<double>> all = {TtftBuckets(),
                                                TokenLatencyBuckets(),
                                                RequestLatencyBuckets(),
                                                OneTwoFiveBuckets(512),
                                                IterationTokensBuckets(),
                                                PreemptionCountBuckets(),
                                                ParamsNBuckets(),
                                                {1.0},
                                                {}};
  for (const std::vector<double>& b : all) {
    std::vector<double> values = {-1.0, 0.0, 1e9, std::nan("")};
    for (double x : b) {
      values.push_back(x);
      values.push_back(std::nextafter(x, -1e300));
      values.push_back(std::nextafter(x, 1e300));
    }
    for (double v : values) {
      const size_t want = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
      if (std::isnan(v)) continue;  // lower_bound's answer is meaningless for NaN
      EXPECT_EQ(BucketIndex(b, v), want) << "value " << v << " over " << b.size() << " bounds";
    }
  }
}

// The finite upper bounds of every histogram family the registry renders, by name.
std::map<std::string, std::vector<double>> HistogramBounds(const PrometheusMetrics& metrics) {
  std::map<std::string, std::vector<double>> out;
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.type != prometheus::MetricType::Histogram) continue;
    std::vector<double>& bounds = out[family.name];
    for (const auto& bucket : family.metric.at(0).histogram.bucket) {
      if (std::isfinite(bucket.upper_bound)) bounds.push_back(bucket.upper_bound);
    }
  }
  return out;
}

MetricsConfig ConfigWith(HistogramBucketConfig buckets) {
  MetricsConfig config;
  config.max_model_len = 300;
  config.buckets = std::move(buckets);
  return config;
}

// vLLM's defaults, written out from vllm/v1/metrics/buckets.py (not computed by the code under
// test).
const std::vector<double> kVllmRequestLatency = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                 5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kVllmTtft = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                       0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                       20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kVllmItl = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};

TEST(BucketFamiliesTest, VllmPresetGivesVllmsExactDefaultsToEveryHistogram) {
  HistogramBucketConfig buckets;
  buckets.preset = BucketPreset::kVllm;
  PrometheusMetrics metrics(ConfigWith(buckets));
  const auto bounds = HistogramBounds(metrics);
  for (const char* name : {"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                           "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                           "vllm:request_inference_time_seconds"}) {
    EXPECT_EQ(bounds.at(name), kVllmRequestLatency) << name;
  }
  EXPECT_EQ(bounds.at("vllm:time_to_first_token_seconds"), kVllmTtft);
  EXPECT_EQ(bounds.at("vllm:inter_token_latency_seconds"), kVllmItl);
  EXPECT_EQ(bounds.at("vllm:request_time_per_output_token_seconds"), kVllmItl);
  EXPECT_EQ(bounds.at("vllm:iteration_tokens_total"),
            (std::vector<double>{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}));
  EXPECT_EQ(bounds.at("vllm:request_params_n"), (std::vector<double>{1, 2, 5, 10, 20}));
  EXPECT_EQ(bounds.at("vllm:request_num_preemptions"),
            (std::vector<double>{1, 2, 3, 4, 5, 10, 20}));
  for (const char* name : {"vllm:request_prompt_tokens", "vllm:request_generation_tokens",
                           "vllm:request_params_max_tokens"}) {
    EXPECT_EQ(bounds.at(name), (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200})) << name;
  }
  // The observer's pre-sorted ITL flush uses the same boundaries.
  EXPECT_EQ(metrics.token_latency_buckets(), kVllmItl);
}

TEST(BucketFamiliesTest, DefaultPresetKeepsTheFinerBoundaries) {
  PrometheusMetrics metrics(ConfigWith({}));
  const auto bounds = HistogramBounds(metrics);
  EXPECT_EQ(bounds.at("vllm:time_to_first_token_seconds"), TtftBuckets());
  EXPECT_EQ(bounds.at("vllm:time_to_first_token_seconds").front(), 0.0001);
  EXPECT_EQ(bounds.at("vllm:request_queue_time_seconds"), RequestLatencyBuckets());
  EXPECT_EQ(bounds.at("vllm:inter_token_latency_seconds"), TokenLatencyBuckets());
  EXPECT_EQ(bounds.at("vllm:request_num_preemptions"), PreemptionCountBuckets());
  // Every vLLM boundary is kept under the finer defaults (dashboards' quantiles stay valid).
  const std::vector<double> ttft = TtftBuckets(), itl = TokenLatencyBuckets();
  for (double b : kVllmTtft) EXPECT_NE(std::count(ttft.begin(), ttft.end(), b), 0) << b;
  for (double b : kVllmItl) EXPECT_NE(std::count(itl.begin(), itl.end(), b), 0) << b;
}

TEST(BucketFamiliesTest, CustomFamilyReplacesEveryHistogramOfThatFamilyOnly) {
  HistogramBucketConfig buckets;
  buckets.preset = BucketPreset::kVllm;
  ASSERT_TRUE(ParseCustomHistogramBuckets(
                  R"({"request_latency": [0.01, 0.05, 1, 30], "request_tokens": [4, 64],
                      "kv_cache_residency": [1, 2]})",
                  &buckets)
                  .ok());
  PrometheusMetrics metrics(ConfigWith(buckets));
  const auto bounds = HistogramBounds(metrics);
  for (const char* name : {"vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                           "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                           "vllm:request_inference_time_seconds"}) {
    EXPECT_EQ(bounds.at(name), (std::vector<double>{0.01, 0.05, 1, 30})) << name;
  }
  EXPECT_EQ(bounds.at("vllm:request_prompt_tokens"), (std::vector<double>{4, 64}));
  EXPECT_EQ(bounds.at("vllm:request_params_max_tokens"), (std::vector<double>{4, 64}));
  EXPECT_EQ(bounds.at("vllm:time_to_first_token_seconds"), kVllmTtft);  // unlisted: the preset's
}

TEST(BucketFamiliesTest, BadValuesAreClearErrors) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {"[1, 2]", "expected a JSON object"},
      {"{\"request_latency\": [1, 2]", "not valid JSON"},
      {R"({"e2e_latency": [1]})", "unknown bucket family \"e2e_latency\""},
      {R"({"request_latency": 1})", "\"request_latency\": expected a list of numbers"},
      {R"({"request_latency": []})", "\"request_latency\": the list of boundaries is empty"},
      {R"({"time_to_first_token": [0.1, "1"]})", "not a number: \"1\""},
      {R"({"inter_token_latency": [0.1, 0.1]})", "must increase strictly, but 0.1 follows 0.1"},
      {R"({"iteration_tokens": [8, 4]})", "must increase strictly, but 4 follows 8.0"},
  };
  for (const Case& c : cases) {
    HistogramBucketConfig buckets;
    const Status status = ParseCustomHistogramBuckets(c.json, &buckets);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_NE(status.message().find("--custom-histogram-buckets: "), std::string::npos);
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
  }
  EXPECT_EQ(ParseBucketPreset("vllm").value(), BucketPreset::kVllm);
  EXPECT_EQ(ParseBucketPreset("tinyserve").value(), BucketPreset::kTinyserve);
  const auto bad = ParseBucketPreset("sglang");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown preset \"sglang\" (known: tinyserve, vllm)"),
            std::string::npos);
}

}  // namespace
}  // namespace tinyserve
