// The rendered /metrics text holds every name, type, label set and bucket boundary of DESIGN §5,
// and `promtool check metrics` finds only the lint findings vLLM's names force.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "metrics/metric_buckets.h"
#include "tests/metrics/metrics_test_util.h"
#include "tests/metrics/prometheus_text.h"

namespace tinyserve::testing {
namespace {

struct Expected {
  const char* name;
  const char* type;
  std::set<std::string> extra_labels;                       // besides model_name and engine
  std::vector<std::vector<std::string>> label_values = {};  // for each extra label, all values
  bool has_engine_label = true;  // vllm:admission_rejections_total has model_name only (vLLM's)
};

const std::vector<Expected>& Catalogue() {
  static const std::vector<Expected> kCatalogue = {
      {"vllm:num_requests_running", "gauge", {}},
      {"vllm:num_requests_waiting", "gauge", {}},
      {"vllm:kv_cache_usage_perc", "gauge", {}},
      {"vllm:cache_config_info",
       "gauge",
       {"block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype",
        "gpu_memory_utilization", "calculate_kv_scales"}},
      {"vllm:lora_requests_info",
       "gauge",
       {"max_lora", "running_lora_adapters", "waiting_lora_adapters"}},
      {"vllm:num_preemptions_total", "counter", {}},
      {"vllm:prompt_tokens_total", "counter", {}},
      {"vllm:generation_tokens_total", "counter", {}},
      {"vllm:request_success_total",
       "counter",
       {"finished_reason"},
       {{"stop", "length", "abort", "error"}}},
      {"vllm:prefix_cache_queries_total", "counter", {}},
      {"vllm:prefix_cache_hits_total", "counter", {}},
      {"vllm:time_to_first_token_seconds", "histogram", {}},
      {"vllm:inter_token_latency_seconds", "histogram", {}},
      {"vllm:request_time_per_output_token_seconds", "histogram", {}},
      {"vllm:e2e_request_latency_seconds", "histogram", {}},
      {"vllm:request_queue_time_seconds", "histogram", {}},
      {"vllm:request_prefill_time_seconds", "histogram", {}},
      {"vllm:request_decode_time_seconds", "histogram", {}},
      {"vllm:request_inference_time_seconds", "histogram", {}},
      {"vllm:request_prompt_tokens", "histogram", {}},
      {"vllm:request_generation_tokens", "histogram", {}},
      {"vllm:request_params_max_tokens", "histogram", {}},
      {"vllm:request_params_n", "histogram", {}},
      {"vllm:iteration_tokens_total", "histogram", {}},
      {"vllm:request_num_preemptions", "histogram", {}},
      {"tinyserve_http_queue_time_seconds", "histogram", {}},
      {"tinyserve_num_requests_preempted", "gauge", {}},
      {"tinyserve_kv_cache_blocks", "gauge", {"state"}, {{"used", "cached", "free"}}},
      {"vllm:prompt_tokens_cached_total", "counter", {}},
      {"vllm:admission_rejections_total",
       "counter",
       {"reason"},
       {{"max_num_queued_reqs", "max_num_queued_tokens", "max_connections"}},
       /*has_engine_label=*/false},
      {"tinyserve_recomputed_tokens_total", "counter", {"token_type"}, {{"prompt", "output"}}},
      {"tinyserve_step_tokens_total",
       "counter",
       {"kind"},
       {{"prefill_computed", "prefix_cache_hit", "decode", "recompute"}}},
      {"tinyserve_num_preemptions_by_reason_total",
       "counter",
       {"reason"},
       {{"kv_full", "priority", "reset_prefix_cache"}}},
      {"tinyserve_structured_output_requests_total",
       "counter",
       {"kind"},
       {{"json_object", "json", "regex", "choice", "grammar"}}},
  };
  return kCatalogue;
}

// The rendered text after one request (queued, scheduled, two tokens, finished) and one step.
std::string RenderAfterOneRequest(PrometheusMetrics& metrics, bool openmetrics = false) {
  MetricsObserver observer(&metrics);
  SyntheticEngine engine(&observer);
  SyntheticRequest* r = engine.NewRequest("one", 0.0, 8, 2);
  engine.Queued(r, 0.0);
  engine.Scheduled(r, 0.001);
  engine.Token(r, 0.003);
  engine.Step(0.001, 1, 0);
  engine.Token(r, 0.004);
  engine.Finished(r, 0.004, FinishReason::kLength);
  engine.Step(0.003, 0, 0);
  return openmetrics ? metrics.RenderOpenMetrics() : metrics.Render();
}

std::string BaseName(const std::string& sample, const std::string& type) {
  if (type != "histogram") return sample;
  for (const char* suffix : {"_bucket", "_count", "_sum"}) {
    const std::string s = suffix;
    if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
      return sample.substr(0, sample.size() - s.size());
    }
  }
  return sample;
}

TEST(MetricsCatalogueTest, EveryNameTypeAndLabelSetIsPresent) {
  PrometheusMetrics metrics(TestMetricsConfig());
  const ParsedText text = ParsePrometheusText(RenderAfterOneRequest(metrics));
  EXPECT_TRUE(text.errors.empty()) << text.errors.front();
  std::set<std::string> expected_names;
  for (const Expected& e : Catalogue()) {
    SCOPED_TRACE(e.name);
    expected_names.insert(e.name);
    auto it = text.families.find(e.name);
    ASSERT_NE(it, text.families.end());
    EXPECT_EQ(it->second.type, e.type);
    EXPECT_FALSE(it->second.help.empty());
    std::set<std::vector<std::string>> seen_values;
    int num_samples = 0;
    for (const TextSample& s : text.samples) {
      if (BaseName(s.name, e.type) != e.name) continue;
      ++num_samples;
      std::set<std::string> keys;
      std::vector<std::string> values;
      for (const auto& [k, v] : s.labels) {
        if (k == "le" && e.type == std::string("histogram")) continue;
        keys.insert(k);
        if (e.extra_labels.count(k) && !e.label_values.empty()) values.push_back(v);
      }
      std::set<std::string> want = e.extra_labels;
      want.insert("model_name");
      if (e.has_engine_label) want.insert("engine");
      EXPECT_EQ(keys, want) << s.name;
      EXPECT_EQ(s.labels.at("model_name"), "test-model");
      if (e.has_engine_label) {
        EXPECT_EQ(s.labels.at("engine"), "0");
      }
      if (!values.empty()) seen_values.insert(values);
    }
    EXPECT_GT(num_samples, 0);
    if (!e.label_values.empty()) {
      std::set<std::vector<std::string>> want;
      for (const std::string& v : e.label_values[0]) want.insert({v});
      EXPECT_EQ(seen_values, want);
    }
  }
  for (const auto& [name, family] : text.families) {
    EXPECT_TRUE(expected_names.count(name)) << "unexpected family " << name;
  }
  // Values after the one request.
  EXPECT_EQ(text.Value("vllm:request_success_total", {{"finished_reason", "length"}}), 1.0);
  EXPECT_EQ(text.Value("vllm:generation_tokens_total"), 2.0);
  EXPECT_EQ(text.Value("vllm:time_to_first_token_seconds_count"), 1.0);
  EXPECT_EQ(text.Value("vllm:time_to_first_token_seconds_sum"), 0.003);
  EXPECT_EQ(text.Value("vllm:cache_config_info", {{"block_size", "16"},
                                                  {"num_gpu_blocks", "64"},
                                                  {"enable_prefix_caching", "True"},
                                                  {"cache_dtype", "auto"},
                                                  {"gpu_memory_utilization", "0.9"},
                                                  {"calculate_kv_scales", "False"}}),
            1.0);
  // No LoRA: present, max_lora 0, empty adapter lists, the value a Unix time (of the last step).
  const double lora =
      text.Value("vllm:lora_requests_info",
                 {{"max_lora", "0"}, {"running_lora_adapters", ""}, {"waiting_lora_adapters", ""}});
  EXPECT_GT(lora, 1.7e9);
  EXPECT_LT(lora, 1e10);
}

// --metrics-compat gpu-cache-usage adds the three pre-V1 names with the current names' values;
// without it they are absent (the test above finds no unexpected family).
TEST(MetricsCatalogueTest, CompatAliasesCarryTheCurrentValues) {
  MetricsConfig config = TestMetricsConfig();
  config.compat_gpu_cache_usage = true;
  PrometheusMetrics metrics(config);
  MetricsObserver observer(&metrics);
  SchedulerStats s;
  s.kv_cache_usage = 0.375;
  s.prefix_cache_queries = 48;
  s.prefix_cache_hits = 32;
  observer.OnStep(s);
  s.kv_cache_usage = 0.5;
  s.prefix_cache_queries = 16;
  s.prefix_cache_hits = 0;
  observer.OnStep(s);
  const ParsedText text = ParsePrometheusText(metrics.Render());
  EXPECT_EQ(text.families.at("vllm:gpu_cache_usage_perc").type, "gauge");
  EXPECT_EQ(text.families.at("vllm:gpu_prefix_cache_queries_total").type, "counter");
  EXPECT_EQ(text.families.at("vllm:gpu_prefix_cache_hits_total").type, "counter");
  EXPECT_EQ(text.Value("vllm:gpu_cache_usage_perc"), 0.5);
  EXPECT_EQ(text.Value("vllm:gpu_cache_usage_perc"), text.Value("vllm:kv_cache_usage_perc"));
  EXPECT_EQ(text.Value("vllm:gpu_prefix_cache_queries_total"), 64.0);
  EXPECT_EQ(text.Value("vllm:gpu_prefix_cache_queries_total"),
            text.Value("vllm:prefix_cache_queries_total"));
  EXPECT_EQ(text.Value("vllm:gpu_prefix_cache_hits_total"), 32.0);
  EXPECT_EQ(text.Value("vllm:gpu_prefix_cache_hits_total"),
            text.Value("vllm:prefix_cache_hits_total"));
  EXPECT_EQ(
      text.Value("vllm:gpu_cache_usage_perc", {{"model_name", "test-model"}, {"engine", "0"}}),
      0.5);
}

// Histogram boundaries as rendered, for every histogram.
TEST(MetricsCatalogueTest, BucketBoundaries) {
  PrometheusMetrics metrics(TestMetricsConfig());
  const ParsedText text = ParsePrometheusText(RenderAfterOneRequest(metrics));
  const std::vector<double> ttft = {0.0001, 0.00025, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06,
                                    0.08,   0.1,     0.25,   0.5,   0.75,  1,    2.5,  5,    7.5,
                                    10,     20,      40,     80,    160,   640,  2560};
  const std::vector<double> token = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
      0.3,    0.4,     0.5,    0.75,  1,      2.5,   5,    7.5,   10,   20,    40,  80};
  const std::vector<double> request = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2,  0.3, 0.5,
                                       0.8,   1,      1.5,   2,    2.5,   5,    10,  15,   20,  30,
                                       40,    50,     60,    120,  240,   480,  960, 1920, 7680};
  const std::vector<double> counts = {1, 2, 5, 10, 20, 50, 100, 200};  // max_model_len 256
  std::vector<double> iteration = {1};
  for (double v = 8; v <= 16384; v *= 2) iteration.push_back(v);
  const std::vector<std::pair<std::string, std::vector<double>>> want = {
      {"vllm:time_to_first_token_seconds", ttft},
      {"vllm:inter_token_latency_seconds", token},
      {"vllm:request_time_per_output_token_seconds", token},
      {"vllm:e2e_request_latency_seconds", request},
      {"vllm:request_queue_time_seconds", request},
      {"vllm:request_prefill_time_seconds", request},
      {"vllm:request_decode_time_seconds", request},
      {"vllm:request_inference_time_seconds", request},
      {"vllm:request_prompt_tokens", counts},
      {"vllm:request_generation_tokens", counts},
      {"vllm:request_params_max_tokens", counts},
      {"vllm:request_params_n", {1, 2, 5, 10, 20}},
      {"vllm:iteration_tokens_total", iteration},
      {"vllm:request_num_preemptions", {0, 1, 2, 3, 5, 10, 20, 50}},
      {"tinyserve_http_queue_time_seconds", request},
  };
  for (const auto& [name, bounds] : want) {
    SCOPED_TRACE(name);
    std::vector<double> got;
    bool has_inf = false;
    for (const TextSample& s : text.samples) {
      if (s.name != name + "_bucket") continue;
      const std::string& le = s.labels.at("le");
      if (le == "+Inf") {
        has_inf = true;
      } else {
        got.push_back(std::stod(le));
      }
    }
    EXPECT_EQ(got, bounds);
    EXPECT_TRUE(has_inf);
  }
  EXPECT_EQ(OneTwoFiveBuckets(1), std::vector<double>{1});
  EXPECT_EQ(OneTwoFiveBuckets(0), std::vector<double>{1});
  EXPECT_EQ(OneTwoFiveBuckets(2048).back(), 2000.0);
}

bool HavePromtool() { return std::system("command -v promtool >/dev/null 2>&1") == 0; }

// Runs `promtool check metrics` on `text`; returns its output lines.
std::vector<std::string> Promtool(const std::string& text) {
  // One file per test process: ctest runs the promtool tests in parallel.
  const std::string path = ::testing::TempDir() + "/tinyserve_metrics_" +
                           std::to_string(::getpid()) + "_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".txt";
  std::ofstream(path) << text;
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::vector<std::string> lines;
  std::array<char, 4096> buf{};
  while (pipe != nullptr && std::fgets(buf.data(), buf.size(), pipe) != nullptr) {
    std::string line = buf.data();
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  if (pipe != nullptr) pclose(pipe);
  std::remove(path.c_str());
  return lines;
}

// `promtool check metrics` on `text` finds only the lints vLLM's names force: a colon in every
// vllm: family, and the `_total` suffix of the vllm:iteration_tokens_total histogram. For the
// OpenMetrics text, promtool 2.42 (Debian 12) has no OpenMetrics parser in `check metrics`: it
// reads the text as 0.0.4, where a counter family `X` declared by `# TYPE X counter` has no
// samples and its `X_total` and `X_created` samples (and a histogram's `X_created`) read as
// families without HELP. Exactly those "no help text" findings are allowed there, and the colon
// lint then names those sample families.
void ExpectOnlyTheLintsVllmNamesForce(const std::string& text, bool openmetrics = false) {
  std::set<std::string> sample_families;  // what promtool sees as families
  std::set<std::string> no_help_expected;
  for (const Expected& e : Catalogue()) {
    const std::string name = e.name;
    if (!openmetrics) {
      sample_families.insert(name);
    } else if (std::string(e.type) == "counter") {
      const std::string base = name.substr(0, name.size() - 6);  // without _total
      for (const std::string& n : {base + "_total", base + "_created"}) {
        sample_families.insert(n);
        no_help_expected.insert(n);
      }
    } else {
      sample_families.insert(name);
      if (std::string(e.type) == "histogram") {
        sample_families.insert(name + "_created");
        no_help_expected.insert(name + "_created");
      }
    }
  }
  const std::vector<std::string> lines = Promtool(text);
  std::set<std::string> colon_flagged, no_help;
  bool iteration_total_flagged = false;
  for (const std::string& line : lines) {
    const std::string colon = " metric names should not contain ':'";
    const std::string help = " no help text";
    if (line.rfind("vllm:", 0) == 0 && line.size() > colon.size() &&
        line.compare(line.size() - colon.size(), colon.size(), colon) == 0) {
      colon_flagged.insert(line.substr(0, line.size() - colon.size()));
    } else if (openmetrics && line.size() > help.size() &&
               line.compare(line.size() - help.size(), help.size(), help) == 0) {
      no_help.insert(line.substr(0, line.size() - help.size()));
    } else if (line ==
               "vllm:iteration_tokens_total non-counter metrics should not have \"_total\" "
               "suffix") {
      iteration_total_flagged = true;
    } else {
      ADD_FAILURE() << "unexpected promtool finding: " << line;
    }
  }
  EXPECT_TRUE(iteration_total_flagged);
  // Every vllm: family is flagged for its colon, and nothing else is.
  std::set<std::string> vllm_names;
  for (const std::string& name : sample_families) {
    if (name.rfind("vllm:", 0) == 0) vllm_names.insert(name);
  }
  EXPECT_EQ(colon_flagged, vllm_names);
  EXPECT_EQ(no_help, no_help_expected);
}

TEST(MetricsCatalogueTest, PromtoolFindsOnlyTheLintsVllmNamesForce) {
  if (!HavePromtool()) {
    GTEST_SKIP()
        << "promtool not found (Debian package `prometheus`; scripts/setup.sh installs it)";
  }
  PrometheusMetrics metrics(TestMetricsConfig());
  ExpectOnlyTheLintsVllmNamesForce(RenderAfterOneRequest(metrics));
}

// The OpenMetrics text (GET /metrics with an OpenMetrics Accept header) passes the same way.
TEST(MetricsCatalogueTest, PromtoolFindsOnlyTheLintsVllmNamesForceInOpenMetrics) {
  if (!HavePromtool()) {
    GTEST_SKIP()
        << "promtool not found (Debian package `prometheus`; scripts/setup.sh installs it)";
  }
  PrometheusMetrics metrics(TestMetricsConfig());
  const std::string text = RenderAfterOneRequest(metrics, /*openmetrics=*/true);
  ASSERT_EQ(text.substr(text.size() - 6), "# EOF\n");
  ExpectOnlyTheLintsVllmNamesForce(text, /*openmetrics=*/true);
}

// The tinyserve_* extras alone are lint-clean.
TEST(MetricsCatalogueTest, PromtoolFindsNothingInTheExtras) {
  if (!HavePromtool()) {
    GTEST_SKIP()
        << "promtool not found (Debian package `prometheus`; scripts/setup.sh installs it)";
  }
  PrometheusMetrics metrics(TestMetricsConfig());
  const std::string text = RenderAfterOneRequest(metrics);
  std::string extras;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t name_at = line.rfind("# ", 0) == 0 ? 7 : 0;
    if (line.compare(name_at, 10, "tinyserve_") == 0) extras += line + "\n";
  }
  ASSERT_FALSE(extras.empty());
  EXPECT_EQ(Promtool(extras), std::vector<std::string>{});
}

}  // namespace
}  // namespace tinyserve::testing
