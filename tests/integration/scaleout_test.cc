// Scale-out on loopback (issue 22): three `tinyserve serve` replicas (stories260K, KV-cache events
// on) behind a real HAProxy started by the test, a real Prometheus scraping all three from its own
// config file, and a load of a few hundred completions through the balancer. Pins: every request
// is answered once (200, a distinct id, and the replicas together count exactly that many
// finishes); each replica got some; the sum over replicas of vllm:request_success_total in
// Prometheus equals the requests sent, and per instance equals that replica's own /metrics; each
// replica's /load, /get_load and gauges agree with its state when idle (0 running, 0 waiting, no
// KV usage, no load) and showed load while busy; every PromQL expression of the Grafana dashboard
// (deploy/grafana/tinyserve-dashboard.json, $model_name as ".*") returns data through
// Prometheus' query API. Ephemeral ports, a temporary directory, every process stopped. Skipped
// only when `haproxy` or `prometheus` is not installed.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
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

constexpr int kReplicas = 3;
constexpr int kRequests = 300;
constexpr int kClients = 12;

using testing_util::ChildProcess;
using testing_util::FindBinary;
using testing_util::FreeLoopbackPort;
using testing_util::ReadLogFile;

// The sum of every sample of `name` (any labels) in Prometheus text; nullopt if none.
std::optional<double> SumSamples(const std::string& text, const std::string& name) {
  std::stringstream lines(text);
  std::optional<double> sum;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    const size_t sp = line.rfind(' ');
    sum = sum.value_or(0.0) + std::stod(line.substr(sp + 1));
  }
  return sum;
}

struct Replica {
  std::unique_ptr<ChildProcess> process;
  std::string log;
  int port = 0;
};

class ScaleOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef TINYSERVE_BINARY
    GTEST_SKIP() << "built without the tinyserve binary";
#else
    binary_ = TINYSERVE_BINARY;
    model_ = std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin";
    dashboard_ = std::string(TINYSERVE_SOURCE_DIR) + "/deploy/grafana/tinyserve-dashboard.json";
    ASSERT_TRUE(std::filesystem::exists(binary_)) << binary_;
    ASSERT_TRUE(std::filesystem::exists(model_)) << model_;
    haproxy_ = FindBinary("haproxy");
    prometheus_ = FindBinary("prometheus");
    if (haproxy_.empty() || prometheus_.empty()) {
      GTEST_SKIP() << "needs `haproxy` and `prometheus` (Debian packages haproxy, prometheus; "
                      "scripts/setup.sh installs them); missing: "
                   << (haproxy_.empty() ? "haproxy " : "")
                   << (prometheus_.empty() ? "prometheus" : "");
    }
    std::string tmpl = ::testing::TempDir() + "/tinyserve_scaleout_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << tmpl;
    dir_ = tmpl;
#endif
  }
  void TearDown() override {
    haproxy_process_.reset();
    prometheus_process_.reset();
    for (Replica& r : replicas_) r.process.reset();
    if (!dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  void StartReplicas() {
    replicas_.resize(kReplicas);
    for (int i = 0; i < kReplicas; ++i) {
      Replica& r = replicas_[i];
      r.log = dir_ + "/tinyserve-" + std::to_string(i) + ".log";
      r.process = std::make_unique<ChildProcess>(
          std::vector<std::string>{
              binary_,
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
              "--num-kv-blocks",
              "48",
              "--max-model-len",
              "256",
              "--max-num-seqs",
              "8",
              "--metrics-compat",
              "gpu-cache-usage",
              "--kv-events-config",
              R"({"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:*",
                  "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv"})"},
          r.log);
      ASSERT_TRUE(r.process->started());
    }
    const std::regex listening("on http://127\\.0\\.0\\.1:([0-9]+)");
    const auto deadline = Clock::now() + seconds(30);
    for (Replica& r : replicas_) {
      while (r.port == 0 && Clock::now() < deadline && r.process->Running()) {
        std::smatch m;
        const std::string log = ReadLogFile(r.log);
        if (std::regex_search(log, m, listening)) {
          r.port = std::stoi(m[1]);
        } else {
          std::this_thread::sleep_for(milliseconds(50));
        }
      }
      ASSERT_NE(r.port, 0) << "a replica did not start:\n" << ReadLogFile(r.log);
      EXPECT_NE(ReadLogFile(r.log).find("publishing KV-cache events on tcp://127.0.0.1:"),
                std::string::npos)
          << ReadLogFile(r.log);
    }
  }

  // Starts `args` (which name `port`) until it serves GET `ready_path` with 200 on `port`, trying
  // another free port if the first was taken meanwhile. Returns the port.
  template <typename MakeArgs>
  int StartServer(std::unique_ptr<ChildProcess>* process, const std::string& log,
                  MakeArgs make_args, const std::string& ready_path) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      const int port = FreeLoopbackPort();
      if (port == 0) continue;
      *process = std::make_unique<ChildProcess>(make_args(port, attempt), log);
      if (!(*process)->started()) continue;
      httplib::Client client("127.0.0.1", port);
      client.set_connection_timeout(1, 0);
      client.set_read_timeout(2, 0);
      const auto deadline = Clock::now() + seconds(20);
      while (Clock::now() < deadline && (*process)->Running()) {
        auto res = client.Get(ready_path);
        if (res && res->status == 200) return port;
        std::this_thread::sleep_for(milliseconds(100));
      }
    }
    return 0;
  }

  void StartHaproxy() {
    const std::string log = dir_ + "/haproxy.log";
    const std::string config = dir_ + "/haproxy.cfg";
    haproxy_port_ = StartServer(
        &haproxy_process_, log,
        [&](int port, int) {
          std::ofstream out(config);
          out << "global\n  maxconn 256\n"
                 "defaults\n  mode http\n  retries 0\n  timeout connect 2s\n"
                 "  timeout client 60s\n  timeout server 60s\n"
                 "frontend llm\n  bind 127.0.0.1:"
              << port << "\n  default_backend replicas\n"
              << "backend replicas\n  balance leastconn\n  option httpchk GET /health\n";
          for (int i = 0; i < kReplicas; ++i) {
            out << "  server r" << i << " 127.0.0.1:" << replicas_[i].port << " check inter 1s\n";
          }
          out.close();
          // -db: foreground; -W: master-worker mode off is the default for -db.
          return std::vector<std::string>{haproxy_, "-db", "-f", config};
        },
        "/health");
    ASSERT_NE(haproxy_port_, 0) << "HAProxy did not start:\n" << ReadLogFile(log);
  }

  void StartPrometheus() {
    const std::string log = dir_ + "/prometheus.log";
    const std::string config = dir_ + "/prometheus.yml";
    {
      std::ofstream out(config);
      out << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
             "scrape_configs:\n  - job_name: tinyserve\n    metrics_path: /metrics\n"
             "    static_configs:\n      - targets: [";
      for (int i = 0; i < kReplicas; ++i) {
        out << (i ? ", " : "") << "'127.0.0.1:" << replicas_[i].port << "'";
      }
      out << "]\n";
    }
    prometheus_port_ = StartServer(
        &prometheus_process_, log,
        [&](int port, int attempt) {
          return std::vector<std::string>{
              prometheus_, "--config.file=" + config,
              "--storage.tsdb.path=" + dir_ + "/data-" + std::to_string(attempt),
              "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"};
        },
        "/-/ready");
    ASSERT_NE(prometheus_port_, 0) << "Prometheus did not start:\n" << ReadLogFile(log);
  }

  // An instant query's result (the "result" array), or nullopt if it failed.
  std::optional<nlohmann::json> Query(const std::string& promql) {
    httplib::Client client("127.0.0.1", prometheus_port_);
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(5, 0);
    auto res = client.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!res || res->status != 200) return std::nullopt;
    const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
    if (body.is_discarded() || body.value("status", "") != "success") return std::nullopt;
    return body["data"]["result"];
  }

  std::string Get(int port, const std::string& path) {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(5, 0);
    auto res = client.Get(path);
    return res && res->status == 200 ? res->body : "";
  }

  std::string binary_, model_, dashboard_, haproxy_, prometheus_, dir_;
  std::vector<Replica> replicas_;
  std::unique_ptr<ChildProcess> haproxy_process_, prometheus_process_;
  int haproxy_port_ = 0, prometheus_port_ = 0;
};

TEST_F(ScaleOutTest, ThreeReplicasBehindHaproxyScrapedByPrometheus) {
  const auto start = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StartReplicas());
  ASSERT_NO_FATAL_FAILURE(StartHaproxy());
  ASSERT_NO_FATAL_FAILURE(StartPrometheus());
  // All three targets up before the load.
  const auto up_deadline = Clock::now() + seconds(20);
  for (;;) {
    auto up = Query("sum(up{job=\"tinyserve\"})");
    if (up && up->size() == 1 && (*up)[0]["value"][1] == std::to_string(kReplicas)) break;
    ASSERT_LT(Clock::now(), up_deadline) << "the replicas are not all up in Prometheus";
    std::this_thread::sleep_for(milliseconds(200));
  }

  // The load, through HAProxy; a sampler watches every replica's /load meanwhile.
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<int> statuses(kRequests, 0);
  std::vector<std::string> ids(kRequests);
  std::atomic<bool> load_done{false};
  std::vector<int64_t> max_load(kReplicas, 0);
  std::thread sampler([&] {
    while (!load_done.load()) {
      for (int i = 0; i < kReplicas; ++i) {
        const nlohmann::json j =
            nlohmann::json::parse(Get(replicas_[i].port, "/load"), nullptr, false);
        if (!j.is_discarded() && j.contains("server_load")) {
          std::lock_guard<std::mutex> lock(mu);
          max_load[i] = std::max<int64_t>(max_load[i], j["server_load"].get<int64_t>());
        }
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      httplib::Client client("127.0.0.1", haproxy_port_);
      client.set_read_timeout(60, 0);
      for (int k; (k = next.fetch_add(1)) < kRequests;) {
        const std::string body = nlohmann::json{
            {"model", "tiny"},
            {"prompt", "Once upon a time " + std::to_string(k)},
            {"max_tokens", 8 + k % 24},
            {"temperature", 0},
            {"ignore_eos", true}}.dump();
        auto res = client.Post("/v1/completions", body, "application/json");
        std::lock_guard<std::mutex> lock(mu);
        statuses[k] = res ? res->status : -1;
        if (res && res->status == 200) {
          const nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
          if (!j.is_discarded()) ids[k] = j.value("id", "");
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  load_done.store(true);
  sampler.join();

  std::set<std::string> distinct;
  for (int k = 0; k < kRequests; ++k) {
    EXPECT_EQ(statuses[k], 200) << "request " << k;
    EXPECT_FALSE(ids[k].empty()) << "request " << k;
    distinct.insert(ids[k]);
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kRequests));  // each answered once, by one

  // Each replica, idle now: its own /metrics, /load and /get_load agree with its state.
  double total_success = 0.0;
  std::vector<double> replica_success(kReplicas, 0.0);
  for (int i = 0; i < kReplicas; ++i) {
    SCOPED_TRACE("replica " + std::to_string(i));
    const int port = replicas_[i].port;
    const std::string metrics = Get(port, "/metrics");
    ASSERT_FALSE(metrics.empty());
    const std::optional<double> success = SumSamples(metrics, "vllm:request_success_total");
    ASSERT_TRUE(success);
    replica_success[i] = *success;
    total_success += *success;
    EXPECT_GT(*success, 0.0) << "HAProxy sent this replica nothing";
    EXPECT_EQ(SumSamples(metrics, "vllm:num_requests_running"), 0.0);
    EXPECT_EQ(SumSamples(metrics, "vllm:num_requests_waiting"), 0.0);
    EXPECT_EQ(SumSamples(metrics, "vllm:kv_cache_usage_perc"), 0.0);
    EXPECT_EQ(SumSamples(metrics, "vllm:gpu_cache_usage_perc"), 0.0);
    EXPECT_EQ(SumSamples(metrics, "vllm:prefix_cache_queries_total"),
              SumSamples(metrics, "vllm:gpu_prefix_cache_queries_total"));
    EXPECT_EQ(nlohmann::json::parse(Get(port, "/load")), (nlohmann::json{{"server_load", 0}}));
    EXPECT_EQ(nlohmann::json::parse(Get(port, "/get_load")), (nlohmann::json{{"load", 0}}));
    EXPECT_GT(max_load[i], 0) << "/load never showed this replica busy";
    EXPECT_LE(max_load[i], kClients);
  }
  EXPECT_EQ(total_success, kRequests);  // nothing counted twice, nothing lost

  // Prometheus agrees: the sum over replicas, and each instance's own count.
  const std::string sum_query = "sum(vllm:request_success_total{model_name=\"tiny\"})";
  std::optional<nlohmann::json> sum;
  const auto deadline = Clock::now() + seconds(15);
  while (Clock::now() < deadline) {
    sum = Query(sum_query);
    if (sum && sum->size() == 1 &&
        std::stod((*sum)[0]["value"][1].get<std::string>()) == static_cast<double>(kRequests)) {
      break;
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_TRUE(sum && sum->size() == 1);
  EXPECT_EQ(std::stod((*sum)[0]["value"][1].get<std::string>()), kRequests);
  const auto by_instance =
      Query("sum by (instance) (vllm:request_success_total{model_name=\"tiny\"})");
  ASSERT_TRUE(by_instance);
  ASSERT_EQ(by_instance->size(), static_cast<size_t>(kReplicas));
  for (const nlohmann::json& series : *by_instance) {
    const std::string instance = series["metric"]["instance"];
    const double value = std::stod(series["value"][1].get<std::string>());
    for (int i = 0; i < kReplicas; ++i) {
      if (instance == "127.0.0.1:" + std::to_string(replicas_[i].port)) {
        EXPECT_EQ(value, replica_success[i]) << instance;
      }
    }
  }

  // Every expression of the dashboard returns data.
  std::this_thread::sleep_for(seconds(2));  // two more scrapes of the idle replicas
  const nlohmann::json dashboard = nlohmann::json::parse(ReadLogFile(dashboard_), nullptr, false);
  ASSERT_FALSE(dashboard.is_discarded()) << dashboard_;
  int num_exprs = 0;
  for (const nlohmann::json& panel : dashboard["panels"]) {
    for (const nlohmann::json& target : panel["targets"]) {
      std::string expr = target["expr"];
      expr = std::regex_replace(expr, std::regex("\\$model_name"), ".*");
      ++num_exprs;
      auto result = Query(expr);
      ASSERT_TRUE(result) << "the query failed: " << expr;
      EXPECT_FALSE(result->empty())
          << "no data for panel \"" << panel["title"].get<std::string>() << "\": " << expr;
    }
  }
  EXPECT_GE(num_exprs, 12);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("scale-out test: %d requests through HAProxy over %d replicas in %.1f s\n", kRequests,
              kReplicas, elapsed);
}

}  // namespace
}  // namespace tinyserve
