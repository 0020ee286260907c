// The OpenMetrics 1.0.0 serializer and the Accept negotiation of GET /metrics
// (metrics/openmetrics_text.h): exact text for a small registry, the same samples as the 0.0.4
// text for the whole catalogue, and promtool (tests/metrics/metrics_catalogue_test.cc) on both.
#include "metrics/openmetrics_text.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "metrics/metrics_observer.h"
#include "metrics/prometheus_metrics.h"
#include "tests/metrics/metrics_test_util.h"
#include "tests/metrics/prometheus_text.h"

namespace tinyserve::testing {
namespace {

TEST(NegotiateExpositionTest, OpenMetricsOnlyWhenAcceptAsksForIt) {
  using F = ExpositionFormat;
  const std::pair<const char*, F> cases[] = {
      {"", F::kPrometheusText004},
      {"*/*", F::kPrometheusText004},
      {"text/plain", F::kPrometheusText004},
      {"text/plain;version=0.0.4;q=1,*/*;q=0.1", F::kPrometheusText004},
      // Prometheus 2.42's scrape header.
      {"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
       "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
       F::kOpenMetrics100},
      // Prometheus 2.49+ with scrape_protocols [PrometheusText0.0.4] first.
      {"text/plain;version=0.0.4;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,*/*;q=0.1",
       F::kPrometheusText004},
      {"application/openmetrics-text", F::kOpenMetrics100},
      {"Application/OpenMetrics-Text; version=\"1.0.0\"; q=0.9 , text/plain;q=0.5",
       F::kOpenMetrics100},
      {"application/openmetrics-text;version=0.0.1", F::kOpenMetrics100},
      {"application/openmetrics-text;version=2.0.0", F::kPrometheusText004},
      {"application/openmetrics-text;q=0", F::kPrometheusText004},
      {"application/openmetrics-text;q=bad", F::kPrometheusText004},
      {"text/plain, application/openmetrics-text", F::kPrometheusText004},  // tie: the first
      {"application/openmetrics-text, text/plain", F::kOpenMetrics100},
      {"text/plain;q=0.2, application/openmetrics-text;q=0.3", F::kOpenMetrics100},
  };
  for (const auto& [accept, want] : cases) {
    EXPECT_EQ(NegotiateExposition(accept), want) << accept;
  }
}

TEST(OpenMetricsFloatTest, CanonicalFloats) {
  EXPECT_EQ(OpenMetricsFloat(1.0), "1.0");
  EXPECT_EQ(OpenMetricsFloat(0.0), "0.0");
  EXPECT_EQ(OpenMetricsFloat(0.00025), "0.00025");
  EXPECT_EQ(OpenMetricsFloat(2560.0), "2560.0");
  EXPECT_EQ(OpenMetricsFloat(-3.5), "-3.5");
  EXPECT_EQ(OpenMetricsFloat(1e21), "1e+21");
  EXPECT_EQ(OpenMetricsFloat(INFINITY), "+Inf");
  EXPECT_EQ(OpenMetricsFloat(-INFINITY), "-Inf");
  EXPECT_EQ(OpenMetricsFloat(NAN), "NaN");
}

TEST(SerializeOpenMetricsTest, ExactTextOfASmallRegistry) {
  prometheus::Registry registry;
  prometheus::BuildCounter()
      .Name("demo:requests_total")
      .Help("Requests \"done\"\\ here.\nSecond line.")
      .Register(registry)
      .Add({{"model_name", "a\"b\\c\nd"}})
      .Increment(3);
  prometheus::BuildGauge().Name("demo_running").Help("Running.").Register(registry).Add({}).Set(2);
  auto& h = prometheus::BuildHistogram()
                .Name("demo_latency_seconds")
                .Help("Latency.")
                .Register(registry)
                .Add({{"engine", "0"}}, prometheus::Histogram::BucketBoundaries{0.5, 1, 2.5});
  h.Observe(0.25);
  h.Observe(2);
  h.Observe(7);
  EXPECT_EQ(SerializeOpenMetrics(registry.Collect(), 1700000000.5),
            "# TYPE demo:requests counter\n"
            "# HELP demo:requests Requests \\\"done\\\"\\\\ here.\\nSecond line.\n"
            "demo:requests_total{model_name=\"a\\\"b\\\\c\\nd\"} 3.0\n"
            "demo:requests_created{model_name=\"a\\\"b\\\\c\\nd\"} 1700000000.5\n"
            "# TYPE demo_running gauge\n"
            "# HELP demo_running Running.\n"
            "demo_running 2.0\n"
            "# TYPE demo_latency_seconds histogram\n"
            "# UNIT demo_latency_seconds seconds\n"
            "# HELP demo_latency_seconds Latency.\n"
            "demo_latency_seconds_bucket{engine=\"0\",le=\"0.5\"} 1\n"
            "demo_latency_seconds_bucket{engine=\"0\",le=\"1.0\"} 1\n"
            "demo_latency_seconds_bucket{engine=\"0\",le=\"2.5\"} 2\n"
            "demo_latency_seconds_bucket{engine=\"0\",le=\"+Inf\"} 3\n"
            "demo_latency_seconds_count{engine=\"0\"} 3\n"
            "demo_latency_seconds_sum{engine=\"0\"} 9.25\n"
            "demo_latency_seconds_created{engine=\"0\"} 1700000000.5\n"
            "# EOF\n");
}

// (name, labels with `le` as a number, value) of every sample, `_created` left out.
std::set<std::tuple<std::string, std::map<std::string, std::string>, double>> Samples(
    const std::string& text) {
  const ParsedText parsed = ParsePrometheusText(text);
  EXPECT_TRUE(parsed.errors.empty()) << parsed.errors.front();
  std::set<std::tuple<std::string, std::map<std::string, std::string>, double>> out;
  for (TextSample s : parsed.samples) {
    const std::string created = "_created";
    if (s.name.size() > created.size() &&
        s.name.compare(s.name.size() - created.size(), created.size(), created) == 0) {
      continue;
    }
    auto le = s.labels.find("le");
    if (le != s.labels.end()) le->second = OpenMetricsFloat(std::stod(le->second));
    out.emplace(s.name, s.labels, s.value);
  }
  return out;
}

TEST(SerializeOpenMetricsTest, SameSamplesAsTheTextFormatForTheWholeCatalogue) {
  PrometheusMetrics metrics(TestMetricsConfig());
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
  // lora_requests_info's value is the wall-clock time of a step: the same in both renders only if
  // no step runs between them (none does here).
  const std::string text = metrics.Render();
  const std::string open = metrics.RenderOpenMetrics();
  EXPECT_EQ(Samples(open), Samples(text));
  ASSERT_GE(open.size(), 6u);
  EXPECT_EQ(open.substr(open.size() - 6), "# EOF\n");
  EXPECT_NE(open.find("# TYPE vllm:num_preemptions counter\n"), std::string::npos);
  EXPECT_NE(open.find("\nvllm:num_preemptions_total{"), std::string::npos);
  EXPECT_NE(open.find("\nvllm:num_preemptions_created{"), std::string::npos);
  EXPECT_NE(open.find("# UNIT vllm:time_to_first_token_seconds seconds\n"), std::string::npos);
  EXPECT_NE(open.find("# TYPE vllm:iteration_tokens_total histogram\n"), std::string::npos);
  EXPECT_EQ(open.find("# TYPE vllm:num_preemptions_total"), std::string::npos);
}

}  // namespace
}  // namespace tinyserve::testing
