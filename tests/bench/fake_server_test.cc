// The load generator end to end against a fake OpenAI server (cpp-httplib on a loopback port)
// that streams scripted chunks. The client's clock is scripted too: with one request in flight
// and an infinite rate, RunBenchmark reads the clock in a fixed order (runner.h), so TTFT, TPOT,
// ITL and E2EL come out equal to hand-computed values exactly, however the network is scheduled.
// Failures (HTTP errors, streams cut short, error events) are recorded and counted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/serve/runner.h"
#include "bench/serve/serve_metrics.h"

namespace tinyserve::bench {
namespace {

// Returns the scripted times in order, one per call; fails the test if called too often.
class ScriptedClock final : public Clock {
 public:
  explicit ScriptedClock(std::vector<double> times) : times_(std::move(times)) {}
  double Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_LT(next_, times_.size()) << "the clock was read more often than scripted";
    return next_ < times_.size() ? times_[next_++] : times_.back();
  }
  size_t calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return next_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<double> times_;
  mutable size_t next_ = 0;  // guarded by mu_
};

// What the fake server streams for one request: text chunks, then a finish chunk, a usage chunk
// (when usage >= 0) and [DONE] (unless cut).
struct Script {
  std::vector<std::string> texts;
  int usage = -1;
  int status = 200;
  bool cut = false;          // end the response without [DONE]
  bool error_event = false;  // send an error object after the text
};

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(std::vector<Script> scripts) : scripts_(std::move(scripts)) {
    auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      const nlohmann::json body = nlohmann::json::parse(req.body);
      Script s;
      {
        std::lock_guard<std::mutex> lock(mu_);
        bodies_.push_back(body);
        s = scripts_.at(next_++ % scripts_.size());
      }
      if (s.status != 200) {
        res.status = s.status;
        res.set_content(R"({"error":{"message":"nope","type":"BadRequestError"}})",
                        "application/json");
        return;
      }
      const bool chat = req.path == "/v1/chat/completions";
      res.set_chunked_content_provider("text/event-stream", [s, chat](size_t,
                                                                      httplib::DataSink& sink) {
        auto send = [&](const nlohmann::json& j) {
          const std::string e = "data: " + j.dump() + "\n\n";
          sink.write(e.data(), e.size());
        };
        const std::string ping = ": ping\n\n";
        sink.write(ping.data(), ping.size());
        if (chat)
          send(
              {{"choices", {{{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}}}}});
        for (const std::string& t : s.texts) {
          if (chat) {
            send({{"choices", {{{"index", 0}, {"delta", {{"content", t}}}}}}});
          } else {
            send({{"choices", {{{"index", 0}, {"text", t}}}}});
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(2));  // separate TCP segments
        }
        if (s.error_event) send({{"error", {{"message", "engine died"}}}});
        if (s.cut) {
          sink.done();
          return true;
        }
        send({{"choices", {{{"index", 0}, {"text", ""}, {"finish_reason", "length"}}}}});
        if (s.usage >= 0) {
          send({{"choices", nlohmann::json::array()},
                {"usage", {{"prompt_tokens", 11}, {"completion_tokens", s.usage}}}});
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
    };
    server_.Post("/v1/completions", handler);
    server_.Post("/v1/chat/completions", handler);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeOpenAiServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<Script> scripts_;         // guarded by mu_
  size_t next_ = 0;                     // guarded by mu_
  std::vector<nlohmann::json> bodies_;  // guarded by mu_
};

RunOptions Options(int port, const std::string& endpoint = "/v1/completions") {
  RunOptions o;
  auto t = ParseTarget("http://127.0.0.1:" + std::to_string(port), endpoint);
  EXPECT_TRUE(t.ok());
  o.target = *t;
  o.target.timeout_s = 30;
  o.model = "fake";
  o.request_rate = INFINITY;
  o.max_concurrency = 1;
  o.ignore_eos = true;
  return o;
}

std::vector<BenchPrompt> Prompts(int n) {
  std::vector<BenchPrompt> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    p[static_cast<size_t>(i)].text = "prompt " + std::to_string(i);
    p[static_cast<size_t>(i)].prompt_len = 2;
    p[static_cast<size_t>(i)].output_len = 8;
  }
  return p;
}

TEST(FakeServerTest, TimingsEqualHandComputedValues) {
  // Request 0: 4 content chunks, usage says 5 tokens (one chunk carried two).
  // Request 1: 2 chunks, no usage: 2 tokens (one per chunk).
  FakeOpenAiServer server({{{"Once", " upon", " a", " time"}, 5}, {{"Hi", "!"}, -1}});
  // Clock reads: start; req0 send, 4 chunks, [DONE]; req1 send, 2 chunks, [DONE]; end.
  ScriptedClock clock({100.0,                                        // benchmark start
                       100.0, 100.5, 100.75, 101.0, 101.5, 101.625,  // request 0
                       102.0, 102.125, 102.375, 102.5,               // request 1
                       103.0});                                      // benchmark end
  auto run = RunBenchmark(Options(server.port()), Prompts(2), clock);
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(clock.calls(), 12u);
  const auto& r = run->records;
  ASSERT_EQ(r.size(), 2u);
  ASSERT_TRUE(r[0].success) << r[0].error;
  ASSERT_TRUE(r[1].success) << r[1].error;
  EXPECT_EQ(r[0].generated_text, "Once upon a time");
  EXPECT_EQ(r[0].output_len, 5);
  EXPECT_EQ(r[0].prompt_len, 11);  // the server's usage wins over the dataset's count
  EXPECT_EQ(r[1].output_len, 2);
  EXPECT_FALSE(r[1].usage_reported);
  EXPECT_EQ(r[1].prompt_len, 2);

  const RequestMetrics m0 = ComputeRequestMetrics(r[0]);
  EXPECT_EQ(m0.ttft_s, 0.5);
  EXPECT_EQ(m0.tpot_s, 0.25);  // (101.5 - 100.5) / (5 - 1)
  EXPECT_EQ(m0.itl_s, (std::vector<double>{0.25, 0.25, 0.5}));
  EXPECT_EQ(m0.e2el_s, 1.625);
  const RequestMetrics m1 = ComputeRequestMetrics(r[1]);
  EXPECT_EQ(m1.ttft_s, 0.125);
  EXPECT_EQ(m1.tpot_s, 0.25);  // (102.375 - 102.125) / (2 - 1)
  EXPECT_EQ(m1.itl_s, (std::vector<double>{0.25}));
  EXPECT_EQ(m1.e2el_s, 0.5);

  const BenchSummary s = Summarize(r, run->end_s - run->start_s, {99});
  EXPECT_EQ(s.duration_s, 3.0);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.total_output_tokens, 7);
  EXPECT_EQ(s.total_input_tokens, 13);
  EXPECT_EQ(s.ttft.mean_ms, 312.5);
  EXPECT_EQ(s.ttft.median_ms, 312.5);
  EXPECT_EQ(s.tpot.mean_ms, 250.0);
  EXPECT_EQ(s.itl.mean_ms, 312.5);  // pooled: 250, 250, 500, 250
  EXPECT_EQ(s.itl.median_ms, 250.0);
  EXPECT_EQ(s.e2el.mean_ms, 1062.5);
  EXPECT_EQ(s.e2el.median_ms, 1062.5);
  EXPECT_DOUBLE_EQ(s.e2el.PercentileMs(99), 500.0 + 1125.0 * 0.99);
  EXPECT_EQ(s.peak_concurrent_requests, 1);

  // The requests carried vLLM bench's fields.
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[0]["model"], "fake");
  EXPECT_EQ(bodies[0]["prompt"], "prompt 0");
  EXPECT_EQ(bodies[0]["max_tokens"], 8);
  EXPECT_EQ(bodies[0]["stream"], true);
  EXPECT_EQ(bodies[0]["stream_options"]["include_usage"], true);
  EXPECT_EQ(bodies[0]["ignore_eos"], true);
}

TEST(FakeServerTest, ChatStreamsSkipTheRoleChunk) {
  FakeOpenAiServer server({{{"a", "b", "c"}, 3}});
  ScriptedClock clock({0.0, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0});
  auto run = RunBenchmark(Options(server.port(), "/v1/chat/completions"), Prompts(1), clock);
  ASSERT_TRUE(run.ok()) << run.status().message();
  ASSERT_TRUE(run->records[0].success) << run->records[0].error;
  const RequestMetrics m = ComputeRequestMetrics(run->records[0]);
  EXPECT_EQ(m.ttft_s, 0.25);
  EXPECT_EQ(m.itl_s, (std::vector<double>{0.25, 0.5}));
  EXPECT_EQ(m.tpot_s, 0.375);
  EXPECT_EQ(m.e2el_s, 1.5);
  EXPECT_EQ(server.bodies()[0]["messages"][0]["content"], "prompt 0");
  EXPECT_EQ(server.bodies()[0]["max_completion_tokens"], 8);
}

TEST(FakeServerTest, FailuresAreRecordedAndCounted) {
  Script http_error;
  http_error.status = 400;
  Script cut{{"x", "y"}, -1};
  cut.cut = true;
  Script error_event{{"x"}, -1};
  error_event.error_event = true;
  FakeOpenAiServer server({http_error, cut, error_event, {{"ok"}, 1}});
  SteadyClock clock;
  RunOptions o = Options(server.port());
  o.max_concurrency = 0;  // all four at once, each on its own connection
  auto run = RunBenchmark(o, Prompts(4), clock);
  ASSERT_TRUE(run.ok());
  int failed = 0;
  std::vector<std::string> errors;
  for (const RequestRecord& r : run->records) {
    if (!r.success) ++failed;
    errors.push_back(r.error);
  }
  EXPECT_EQ(failed, 3);
  const BenchSummary s = Summarize(run->records, 1.0, {99});
  EXPECT_EQ(s.completed, 1);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.total_output_tokens, 1);
  // Which request got which script depends on arrival order at the server; the set is fixed.
  std::sort(errors.begin(), errors.end());
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("HTTP 400"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("engine died"), std::string::npos) << errors[2];
  EXPECT_NE(errors[3].find("without data: [DONE]"), std::string::npos) << errors[3];
}

TEST(FakeServerTest, UnreachableServerFailsEveryRequest) {
  // A port that was free a moment ago, bound without listen() and closed: connections are refused.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  close(fd);
  SteadyClock clock;
  auto run = RunBenchmark(Options(port), Prompts(2), clock);
  ASSERT_TRUE(run.ok());
  for (const RequestRecord& r : run->records) {
    EXPECT_FALSE(r.success);
    EXPECT_NE(r.error.find("HTTP client"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace tinyserve::bench
