// A real Prometheus server scrapes a running `tinyserve serve` (issue 4, DESIGN §5): the test
// starts the binary (stories260K, a KV cache of 40 blocks of 16 tokens) and the Debian `prometheus`
// server (scrape interval 1 s), both on loopback ports, sends 40 concurrent 200-token completions
// through the OpenAI API so that requests are preempted again and again, and pins that Prometheus'
// query API then reports the target `up` == 1 and `vllm:num_preemptions_total{model_name,engine}` >
// 0, equal to what tinyserve's own /metrics says once it is idle (the counter Prometheus stores is
// the one tinyserve serves, with its labels). ScrapesBothOpenMetricsAndPrometheusText scrapes
// both exposition formats (issue 23), HistogramBucketFlags checks --histogram-buckets and
// --custom-histogram-buckets end to end. Skipped when no `prometheus` is on $PATH (Debian
// package `prometheus`).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/child_process.h"

namespace tinyserve {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kNumRequests = 40;
constexpr int kMaxTokens = 200;

using testing_util::ChildProcess;
using testing_util::FindBinary;
using testing_util::FreeLoopbackPort;
using testing_util::ReadLogFile;

// The value of the sample `name{labels}` (labels as rendered, in order) in Prometheus text format.
std::optional<double> SampleValue(const std::string& text, const std::string& series) {
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return std::nullopt;
}

class PrometheusScrapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef TINYSERVE_BINARY
    GTEST_SKIP() << "built without the tinyserve binary";
#else
    binary_ = TINYSERVE_BINARY;
    model_ = std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin";
    if (!std::filesystem::exists(binary_) || !std::filesystem::exists(model_)) {
      GTEST_SKIP() << "needs " << binary_ << " and " << model_;
    }
    prometheus_ = FindBinary("prometheus");
    if (prometheus_.empty()) {
      GTEST_SKIP() << "needs the Prometheus server: install the Debian package `prometheus` "
                      "(scripts/setup.sh)";
    }
    std::string tmpl = ::testing::TempDir() + "/tinyserve_prometheus_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl;
    dir_ = tmpl;
#endif
  }
  void TearDown() override {
    prometheus_process_.reset();  // stop them before removing their files
    haproxy_process_.reset();
    tinyserve_process_.reset();
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  // Starts tinyserve on a free loopback port with a KV cache that forces preemptions.
  void StartTinyserve(const std::vector<std::string>& extra_args = {}) {
    tinyserve_log_ = dir_ + "/tinyserve.log";
    std::vector<std::string> args = {binary_,
                                     "serve",
                                     "--model",
                                     model_,
                                     "--host",
                                     "127.0.0.1",
                                     "--port",
                                     "0",
                                     "--served-model-name",
                                     "tiny",
                                     "--threads",
                                     "1",
                                     "--block-size",
                                     "16",
                                     "--num-kv-blocks",
                                     "40",
                                     "--max-model-len",
                                     "512",
                                     "--max-num-seqs",
                                     "64"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    tinyserve_process_ = std::make_unique<ChildProcess>(args, tinyserve_log_);
    ASSERT_TRUE(tinyserve_process_->started());
    // The server logs "on http://127.0.0.1:PORT" once it listens.
    const std::regex listening("on http://127\\.0\\.0\\.1:([0-9]+)");
    const auto deadline = Clock::now() + seconds(30);
    while (tinyserve_port_ == 0 && Clock::now() < deadline && tinyserve_process_->Running()) {
      std::smatch m;
      const std::string log = ReadLogFile(tinyserve_log_);
      if (std::regex_search(log, m, listening)) {
        tinyserve_port_ = std::stoi(m[1]);
      } else {
        std::this_thread::sleep_for(milliseconds(50));
      }
    }
    ASSERT_NE(tinyserve_port_, 0) << "tinyserve did not start:\n" << ReadLogFile(tinyserve_log_);
  }

  // A scrape job of the Prometheus config: `job` scraping 127.0.0.1:port/metrics.
  static std::string ScrapeJob(const std::string& job, int port) {
    return "  - job_name: " + job +
           "\n"
           "    metrics_path: /metrics\n"
           "    static_configs:\n"
           "      - targets: ['127.0.0.1:" +
           std::to_string(port) + "']\n";
  }

  // Starts Prometheus scraping every second (by default, job "tinyserve": tinyserve itself);
  // returns once it answers /-/ready. A port taken between FreeLoopbackPort() and Prometheus'
  // bind makes it exit: then another port is tried.
  void StartPrometheus(std::string jobs = "") {
    if (jobs.empty()) jobs = ScrapeJob("tinyserve", tinyserve_port_);
    const std::string config = dir_ + "/prometheus.yml";
    {
      std::ofstream out(config);
      out << "global:\n"
             "  scrape_interval: 1s\n"
             "  scrape_timeout: 1s\n"
             "  evaluation_interval: 1s\n"
             "scrape_configs:\n"
          << jobs;
    }
    prometheus_log_ = dir_ + "/prometheus.log";
    for (int attempt = 0; attempt < 3 && prometheus_port_ == 0; ++attempt) {
      const int port = FreeLoopbackPort();
      ASSERT_NE(port, 0);
      prometheus_process_ = std::make_unique<ChildProcess>(
          std::vector<std::string>{
              prometheus_, "--config.file=" + config,
              "--storage.tsdb.path=" + dir_ + "/data-" + std::to_string(attempt),
              "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"},
          prometheus_log_);
      ASSERT_TRUE(prometheus_process_->started());
      httplib::Client client("127.0.0.1", port);
      client.set_connection_timeout(1, 0);
      client.set_read_timeout(2, 0);
      const auto deadline = Clock::now() + seconds(20);
      while (Clock::now() < deadline && prometheus_process_->Running()) {
        auto ready = client.Get("/-/ready");
        if (ready && ready->status == 200) {
          prometheus_port_ = port;
          break;
        }
        std::this_thread::sleep_for(milliseconds(100));
      }
    }
    ASSERT_NE(prometheus_port_, 0) << "Prometheus did not start:\n" << ReadLogFile(prometheus_log_);
  }

  // The values of an instant query's result (one per series), or nullopt if the query failed.
  std::optional<std::vector<double>> Query(const std::string& promql) {
    httplib::Client client("127.0.0.1", prometheus_port_);
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(5, 0);
    auto res = client.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!res || res->status != 200) return std::nullopt;
    const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
    if (body.is_discarded() || body.value("status", "") != "success") return std::nullopt;
    std::vector<double> values;
    for (const nlohmann::json& series : body["data"]["result"]) {
      values.push_back(std::stod(series["value"][1].get<std::string>()));
    }
    return values;
  }

  // Polls `promql` for up to `timeout` until it returns exactly one series with value `want`;
  // returns the last result seen.
  std::optional<std::vector<double>> QueryUntil(const std::string& promql, double want,
                                                Clock::duration timeout) {
    std::optional<std::vector<double>> got;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      got = Query(promql);
      if (got && got->size() == 1 && (*got)[0] == want) break;
      std::this_thread::sleep_for(milliseconds(200));
    }
    return got;
  }

  // The metadata Prometheus keeps for `metric` ({"target": {...}, "type", "help", "unit"} per
  // target), or an empty array.
  nlohmann::json TargetMetadata(const std::string& metric) {
    httplib::Client client("127.0.0.1", prometheus_port_);
    client.set_read_timeout(5, 0);
    auto res = client.Get("/api/v1/targets/metadata", httplib::Params{{"metric", metric}},
                          httplib::Headers{});
    if (!res || res->status != 200) return nlohmann::json::array();
    const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
    if (body.is_discarded() || !body.contains("data")) return nlohmann::json::array();
    return body["data"];
  }

  // Starts HAProxy in front of tinyserve, replacing every request's Accept header with
  // `accept`; returns its port.
  int StartAcceptRewritingProxy(const std::string& accept) {
    const std::string haproxy = FindBinary("haproxy");
    if (haproxy.empty()) return 0;
    const std::string config = dir_ + "/haproxy.cfg", log = dir_ + "/haproxy.log";
    for (int attempt = 0; attempt < 3; ++attempt) {
      const int port = FreeLoopbackPort();
      {
        std::ofstream out(config);
        out << "global\n  maxconn 64\n"
               "defaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n"
               "  timeout server 30s\n"
               "frontend scrape\n  bind 127.0.0.1:"
            << port << "\n  http-request set-header Accept \"" << accept
            << "\"\n  default_backend tinyserve\n"
               "backend tinyserve\n  server t 127.0.0.1:"
            << tinyserve_port_ << "\n";
      }
      haproxy_process_ = std::make_unique<ChildProcess>(
          std::vector<std::string>{haproxy, "-db", "-f", config}, log);
      httplib::Client client("127.0.0.1", port);
      client.set_connection_timeout(1, 0);
      for (const auto deadline = Clock::now() + seconds(10);
           Clock::now() < deadline && haproxy_process_->Running();) {
        auto res = client.Get("/health");
        if (res && res->status == 200) return port;
        std::this_thread::sleep_for(milliseconds(100));
      }
    }
    ADD_FAILURE() << "HAProxy did not start:\n" << ReadLogFile(log);
    return 0;
  }

  std::string TinyserveMetrics() {
    httplib::Client client("127.0.0.1", tinyserve_port_);
    client.set_read_timeout(5, 0);
    auto res = client.Get("/metrics");
    return res && res->status == 200 ? res->body : "";
  }

  std::string binary_, model_, prometheus_, dir_, tinyserve_log_, prometheus_log_;
  std::unique_ptr<ChildProcess> tinyserve_process_, prometheus_process_, haproxy_process_;
  int tinyserve_port_ = 0, prometheus_port_ = 0;
};

TEST_F(PrometheusScrapeTest, QueryApiReportsPreemptionsAfterPreemptionHeavyLoad) {
  ASSERT_NO_FATAL_FAILURE(StartTinyserve());
  ASSERT_NO_FATAL_FAILURE(StartPrometheus());
  const std::string up =
      "up{job=\"tinyserve\",instance=\"127.0.0.1:" + std::to_string(tinyserve_port_) + "\"}";
  const std::string preemptions = "vllm:num_preemptions_total{model_name=\"tiny\",engine=\"0\"}";

  // Prometheus has scraped the idle server before the load: the target is up, no preemptions yet.
  auto before = QueryUntil(up, 1, seconds(15));
  ASSERT_TRUE(before && before->size() == 1 && (*before)[0] == 1) << "the target is not up\n"
                                                                  << ReadLogFile(prometheus_log_);
  before = QueryUntil(preemptions, 0, seconds(5));
  ASSERT_TRUE(before && before->size() == 1 && (*before)[0] == 0) << ReadLogFile(prometheus_log_);

  // 40 concurrent requests of ~30 + 200 tokens need ~600 blocks' worth of tokens at their peak;
  // the cache holds 640 tokens in all, so the scheduler preempts (and recomputes) over and over.
  const std::string body = nlohmann::json{
      {"model", "tiny"},
      {"prompt",
       "Once upon a time there was a little girl named Lily. She loved to play "
       "outside in the park with her friends every day."},
      {"max_tokens", kMaxTokens},
      {"temperature", 0},
      {"ignore_eos", true}}.dump();
  std::vector<int> statuses(kNumRequests, 0);
  std::vector<std::string> bodies(kNumRequests);
  {
    std::vector<std::thread> clients;
    for (int i = 0; i < kNumRequests; ++i) {
      clients.emplace_back([&, i] {
        httplib::Client client("127.0.0.1", tinyserve_port_);
        client.set_connection_timeout(5, 0);
        client.set_read_timeout(60, 0);
        auto res = client.Post("/v1/completions", body, "application/json");
        if (!res) {
          bodies[i] = httplib::to_string(res.error());
          return;
        }
        statuses[i] = res->status;
        bodies[i] = res->body;
      });
    }
    for (std::thread& t : clients) t.join();
  }
  for (int i = 0; i < kNumRequests; ++i) {
    ASSERT_EQ(statuses[i], 200) << i << ": " << bodies[i];
    const nlohmann::json done = nlohmann::json::parse(bodies[i]);
    EXPECT_EQ(done["usage"]["completion_tokens"], kMaxTokens) << i;
  }

  // tinyserve's own count, once nothing runs or waits (no step can change it any more).
  const std::string labels = "{engine=\"0\",model_name=\"tiny\"}";
  std::optional<double> served;
  for (const auto deadline = Clock::now() + seconds(10); Clock::now() < deadline;) {
    const std::string text = TinyserveMetrics();
    if (SampleValue(text, "vllm:num_requests_running" + labels) == 0.0 &&
        SampleValue(text, "vllm:num_requests_waiting" + labels) == 0.0) {
      served = SampleValue(text, "vllm:num_preemptions_total" + labels);
      break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  ASSERT_TRUE(served.has_value()) << "tinyserve did not become idle:\n" << TinyserveMetrics();
  ASSERT_GT(*served, 0) << "the load preempted nothing; the test needs a smaller KV cache";

  // Prometheus' query API catches up with it within a few scrapes.
  const auto scraped = QueryUntil(preemptions, *served, seconds(20));
  ASSERT_TRUE(scraped.has_value()) << "the query API failed\n" << ReadLogFile(prometheus_log_);
  ASSERT_EQ(scraped->size(), 1u) << ReadLogFile(prometheus_log_);
  EXPECT_GT((*scraped)[0], 0);
  EXPECT_EQ((*scraped)[0], *served);
  std::printf("vllm:num_preemptions_total: %g on /metrics, %g from Prometheus' query API\n",
              *served, (*scraped)[0]);
  const auto still_up = Query(up);
  ASSERT_TRUE(still_up && still_up->size() == 1);
  EXPECT_EQ((*still_up)[0], 1);
}

// Content negotiation (issue 23): the same tinyserve scraped by one real Prometheus twice, job
// "openmetrics" directly (Prometheus 2.42 asks for OpenMetrics 1.0.0 first; it has no
// scrape_protocols setting, which came in 2.49) and job "text" through HAProxy rewriting the
// Accept header to Prometheus text 0.0.4 only. Both jobs are up and store the same counts, and the
// metadata Prometheus keeps proves which parser read each: only the OpenMetrics target carries
// `# UNIT` (unit "seconds") and the counter family named without `_total`.
TEST_F(PrometheusScrapeTest, ScrapesBothOpenMetricsAndPrometheusText) {
  ASSERT_NO_FATAL_FAILURE(StartTinyserve());
  {
    httplib::Client client("127.0.0.1", tinyserve_port_);
    auto om = client.Get("/metrics", httplib::Headers{{"Accept",
                                                       "application/openmetrics-text;version=1.0.0,"
                                                       "text/plain;version=0.0.4;q=0.5"}});
    ASSERT_TRUE(om && om->status == 200);
    EXPECT_EQ(om->get_header_value("Content-Type"),
              "application/openmetrics-text; version=1.0.0; charset=utf-8");
    ASSERT_GE(om->body.size(), 6u);
    EXPECT_EQ(om->body.substr(om->body.size() - 6), "# EOF\n");
    auto text = client.Get("/metrics");
    ASSERT_TRUE(text && text->status == 200);
    EXPECT_EQ(text->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_EQ(text->body.find("# EOF"), std::string::npos);
  }
  const int proxy_port = StartAcceptRewritingProxy("text/plain;version=0.0.4");
  if (proxy_port == 0 && FindBinary("haproxy").empty()) {
    GTEST_SKIP() << "needs `haproxy` (Debian package haproxy, scripts/setup.sh)";
  }
  ASSERT_NE(proxy_port, 0);
  ASSERT_NO_FATAL_FAILURE(
      StartPrometheus(ScrapeJob("openmetrics", tinyserve_port_) + ScrapeJob("text", proxy_port)));

  constexpr int kRequests = 6;
  const std::string body = nlohmann::json{
      {"model", "tiny"},
      {"prompt", "Once upon a time"},
      {"max_tokens", 20},
      {"ignore_eos", true}}.dump();
  httplib::Client client("127.0.0.1", tinyserve_port_);
  client.set_read_timeout(30, 0);
  for (int i = 0; i < kRequests; ++i) {
    auto res = client.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res && res->status == 200) << (res ? res->body : httplib::to_string(res.error()));
  }
  for (const char* job : {"openmetrics", "text"}) {
    const std::string up = std::string("up{job=\"") + job + "\"}";
    auto got = QueryUntil(up, 1, seconds(15));
    ASSERT_TRUE(got && got->size() == 1 && (*got)[0] == 1) << job << " is not up\n"
                                                           << ReadLogFile(prometheus_log_);
    const std::string done =
        std::string("vllm:request_success_total{job=\"") + job + "\",finished_reason=\"length\"}";
    got = QueryUntil(done, kRequests, seconds(15));
    ASSERT_TRUE(got && got->size() == 1) << job << "\n" << ReadLogFile(prometheus_log_);
    EXPECT_EQ((*got)[0], kRequests) << job;
    const std::string tokens = std::string("vllm:generation_tokens_total{job=\"") + job + "\"}";
    got = QueryUntil(tokens, kRequests * 20, seconds(15));
    ASSERT_TRUE(got && got->size() == 1) << job;
    EXPECT_EQ((*got)[0], kRequests * 20) << job;
  }
  // Which parser read which target.
  std::map<std::string, nlohmann::json> ttft_by_job;
  for (const nlohmann::json& m : TargetMetadata("vllm:time_to_first_token_seconds")) {
    ttft_by_job[m["target"]["job"].get<std::string>()] = m;
  }
  ASSERT_EQ(ttft_by_job.size(), 2u) << ReadLogFile(prometheus_log_);
  EXPECT_EQ(ttft_by_job["openmetrics"]["type"], "histogram");
  EXPECT_EQ(ttft_by_job["openmetrics"]["unit"], "seconds");
  EXPECT_EQ(ttft_by_job["text"]["type"], "histogram");
  EXPECT_EQ(ttft_by_job["text"]["unit"], "");
  std::set<std::string> counter_family_jobs;
  for (const nlohmann::json& m : TargetMetadata("vllm:num_preemptions")) {
    EXPECT_EQ(m["type"], "counter");
    counter_family_jobs.insert(m["target"]["job"].get<std::string>());
  }
  EXPECT_EQ(counter_family_jobs, std::set<std::string>{"openmetrics"});
  std::set<std::string> total_family_jobs;
  for (const nlohmann::json& m : TargetMetadata("vllm:num_preemptions_total")) {
    EXPECT_EQ(m["type"], "counter");
    total_family_jobs.insert(m["target"]["job"].get<std::string>());
  }
  EXPECT_EQ(total_family_jobs, std::set<std::string>{"text"});
}

// --histogram-buckets vllm serves vLLM's exact boundaries; bad bucket flags stop `serve` before
// the model loads, with a message naming the flag and the problem.
TEST_F(PrometheusScrapeTest, HistogramBucketFlags) {
  ASSERT_NO_FATAL_FAILURE(
      StartTinyserve({"--histogram-buckets", "vllm", "--custom-histogram-buckets",
                      R"({"request_tokens": [4, 64]})"}));
  const std::string text = TinyserveMetrics();
  const std::string labels = "engine=\"0\",model_name=\"tiny\"";
  EXPECT_NE(text.find("vllm:e2e_request_latency_seconds_bucket{" + labels + ",le=\"0.3\"} 0"),
            std::string::npos);
  EXPECT_EQ(text.find("vllm:e2e_request_latency_seconds_bucket{" + labels + ",le=\"0.2\"}"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{" + labels + ",le=\"0.001\"} 0"),
            std::string::npos);
  EXPECT_NE(text.find("vllm:request_prompt_tokens_bucket{" + labels + ",le=\"64\"} 0"),
            std::string::npos);
  tinyserve_process_.reset();

  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--histogram-buckets", "fine"}, "--histogram-buckets: unknown preset \"fine\""},
           {{"--custom-histogram-buckets", R"({"ttft": [1]})"},
            "--custom-histogram-buckets: unknown bucket family \"ttft\""},
           {{"--custom-histogram-buckets", R"({"request_latency": [2, 1]})"},
            "boundaries must increase strictly"}}) {
    std::vector<std::string> argv = {binary_, "serve", "--model", model_, "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string log = dir_ + "/bad.log";
    ChildProcess child(argv, log);
    for (const auto deadline = Clock::now() + seconds(20);
         child.Running() && Clock::now() < deadline;) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    EXPECT_FALSE(child.Running()) << "serve did not stop on " << args[1];
    const std::string out = ReadLogFile(log);
    EXPECT_NE(out.find(message), std::string::npos) << out;
    EXPECT_EQ(out.find("on http://"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace tinyserve
