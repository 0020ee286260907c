// A test harness for the OpenAI routes: the real stories260K model (loaded once per binary) on a
// real EngineCore (SteadyClock, its own thread), the HttpServer (with its OpenAI routes) on a
// random loopback port, and an httplib::Client for it. An observer records every request's finish
// and the KV blocks in use after each step. An optional per-step delay slows the model down so
// that a test can act in the middle of a stream; optional fault injection
// (engine/fault_injecting_executor.h) fails chosen steps; optional Prometheus metrics serve
// /metrics as `tinyserve serve` does.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <cstdint>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "engine/fault_injecting_executor.h"
#include "kernels/backend.h"
#include "metrics/metrics_observer.h"
#include "metrics/prometheus_metrics.h"
#include "models/model_loader.h"
#include "models/model_runner.h"
#include "server/http_server.h"
#include "tests/sanitizer.h"

namespace tinyserve::testing {

// This process' resident set, in bytes (a test server runs in it); -1 if /proc does not say.
inline int64_t RssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

// How much a test server's process may grow while it answers a test's hostile requests
// (ExpectServing): each is refused or served and then forgotten, never held.
inline constexpr int64_t kServingRssGrowthBound = int64_t{64} << 20;

// Under AddressSanitizer or ThreadSanitizer the resident set is the sanitizer's (quarantined
// frees, shadow memory: a test's own 100,000-level strings cost 146 MB of RSS under TSan), so the
// bound is not checked there.
inline constexpr bool kRssIsTheSanitizers = testing_util::kUnderSanitizer;

inline const LoadedModel& Stories260K() {
  static LoadedModel* model = [] {
    const std::string shared = TINYSERVE_SHARED_DIR;
    auto loaded = ResolveAndLoadModel({shared + "/models/stories260K.bin", ""}, shared);
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status().ToString();
      std::abort();
    }
    return new LoadedModel(std::move(loaded).value());
  }();
  return *model;
}

// Sleeps `delay_s` before each forward pass of the wrapped executor, and counts the requests that
// registered with it asking for prompt logprobs.
class DelayedExecutor final : public ModelExecutor {
 public:
  DelayedExecutor(ModelExecutor* inner, double delay_s) : inner_(inner), delay_s_(delay_s) {}
  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override {
    for (const SamplingRegistration& r : batch.new_requests) {
      if (r.params.prompt_logprobs) num_scoring_prompts_.fetch_add(1);
    }
    if (delay_s_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
    return inner_->Execute(batch);
  }
  // The engine requests that asked for prompt logprobs (each registers once). Thread-safe.
  int64_t num_scoring_prompts() const { return num_scoring_prompts_.load(); }
  void Release(const std::vector<uint64_t>& keys) override { inner_->Release(keys); }
  int32_t num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  int32_t block_size() const override { return inner_->block_size(); }
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t max_model_len() const override { return inner_->max_model_len(); }

 private:
  ModelExecutor* const inner_;
  const double delay_s_;
  std::atomic<int64_t> num_scoring_prompts_{0};
};

// Records finishes (by request id, with the engine clock's time) and the KV blocks in use.
class FinishRecorder final : public EngineObserver {
 public:
  struct Finish {
    FinishReason reason = FinishReason::kNone;
    double ts = 0.0;
  };
  void OnRequestEvent(const RequestRecord& request, const RequestEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id(request.request_id);
    if (event.type == EventType::kQueued) {
      queued_ts_[id] = event.ts;
      prompts_[id].assign(request.prompt_token_ids.begin(), request.prompt_token_ids.end());
    } else if (event.type == EventType::kFinished) {
      finishes_[id] = {event.finish_reason, event.ts};
    } else if (event.type == EventType::kNewTokens) {
      auto& ts = token_ts_[id];
      ts.insert(ts.end(), static_cast<size_t>(event.num_tokens), event.ts);
    }
  }
  void OnStep(const SchedulerStats& stats) override {
    std::lock_guard<std::mutex> lock(mu_);
    used_blocks_ = stats.num_used_blocks;
    num_preemptions_ += stats.num_preemptions;
    max_waiting_ = std::max(max_waiting_, stats.num_waiting);
    running_ = stats.num_running;
    waiting_ = stats.num_waiting;
    step_ts_.push_back(stats.ts);
  }
  std::map<std::string, Finish> finishes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return finishes_;
  }
  // The output time of each token of each request.
  std::map<std::string, std::vector<double>> token_ts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return token_ts_;
  }
  // The prompt token ids of each request the engine accepted.
  std::map<std::string, std::vector<int32_t>> prompts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return prompts_;
  }
  // The most requests the engine held waiting after any step.
  int32_t max_waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_waiting_;
  }
  // When the engine accepted each request (QUEUED).
  std::map<std::string, double> queued_ts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queued_ts_;
  }
  int64_t num_preemptions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return num_preemptions_;
  }
  // The schedule time of every engine step that did work, in order.
  std::vector<double> step_ts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return step_ts_;
  }
  int32_t used_blocks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return used_blocks_;
  }
  int32_t live_requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return running_ + waiting_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Finish> finishes_;
  std::vector<double> step_ts_;
  std::map<std::string, std::vector<double>> token_ts_;
  std::map<std::string, std::vector<int32_t>> prompts_;
  std::map<std::string, double> queued_ts_;
  int64_t num_preemptions_ = 0;
  int32_t max_waiting_ = 0;
  int32_t used_blocks_ = 0;
  int32_t running_ = 0;
  int32_t waiting_ = 0;
};

struct TestServerOptions {
  std::string api_key;
  int64_t max_queue_len = 0;          // --max-num-queued-reqs
  int64_t max_num_queued_tokens = 0;  // --max-num-queued-tokens
  bool enable_per_request_metrics = false;
  bool start_engine = true;
  double step_delay_s = 0.0;
  int32_t num_kv_blocks = 256;
  size_t max_body_bytes = size_t{4} << 20;
  int num_threads = 16;         // HTTP worker threads
  int64_t max_connections = 0;  // HttpServerOptions::max_connections (0: unlimited)
  FaultInjectionConfig faults;  // none by default
  bool with_metrics = false;    // serve /metrics (PrometheusMetrics + MetricsObserver)
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;  // EngineConfig::max_num_batched_tokens
  int socket_send_buffer_bytes = 0;       // HttpServerOptions::socket_send_buffer_bytes
  double request_read_deadline_s = 30.0;  // HttpServerOptions::request_read_deadline_s
  double idle_timeout_s = 5.0;            // HttpServerOptions::idle_timeout_s
  std::string chat_template = "plain";    // --chat-template
  std::string tool_call_parser;           // --tool-call-parser ("": the template's)
  // > 0: stories260K with this context length instead of its 512 (a copy of the weights with a
  // longer max_seq_len; RoPE extrapolates, and the tests read its output as random text anyway),
  // for prompts that do not fit in 512 tokens (tools' preambles).
  int32_t max_model_len = 0;
};

class OpenAiTestServer {
 public:
  explicit OpenAiTestServer(TestServerOptions options = {}) {
    const LoadedModel& model = Stories260K();
    std::shared_ptr<const LlamaWeights> weights = model.weights;
    if (options.max_model_len > 0) {
      auto longer = std::make_shared<LlamaWeights>(*model.weights);
      longer->config.max_seq_len = options.max_model_len;
      weights = std::move(longer);
    }
    ModelRunnerOptions runner_options;
    runner_options.num_kv_blocks = options.num_kv_blocks;
    auto runner = ModelRunner::Create(weights, CreateCpuBackend(1), runner_options);
    EXPECT_TRUE(runner.ok()) << runner.status().ToString();
    runner_ = std::move(runner).value();
    executor_ = std::make_unique<DelayedExecutor>(runner_.get(), options.step_delay_s);
    injector_ = std::make_unique<FaultInjectingExecutor>(executor_.get(), options.faults);
    EngineConfig config;
    config.max_num_seqs = options.max_num_seqs;
    config.max_num_batched_tokens = options.max_num_batched_tokens;
    if (!model.weights->config.stop_token_ids.empty()) {
      config.eos_token_id = model.weights->config.stop_token_ids.front();
    }
    engine_ = std::make_unique<EngineCore>(config, injector_.get(), &clock_);
    engine_->AddObserver(&recorder_);
    if (options.with_metrics) {
      MetricsConfig metrics_config;
      metrics_config.model_name = "stories";
      metrics_config.max_model_len = engine_->max_model_len();
      metrics_config.num_gpu_blocks = options.num_kv_blocks;
      metrics_ = std::make_unique<PrometheusMetrics>(metrics_config);
      metrics_observer_ = std::make_unique<MetricsObserver>(metrics_.get());
      engine_->AddObserver(metrics_observer_.get());
    }

    ServerContext context;
    context.engine = engine_.get();
    context.tokenizer = model.tokenizer.get();
    context.clock = &clock_;
    context.served_model_name = "stories";
    context.api_key = options.api_key;
    context.max_queue_len = options.max_queue_len;
    context.max_num_queued_tokens = options.max_num_queued_tokens;
    context.enable_per_request_metrics = options.enable_per_request_metrics;
    context.chat_template = options.chat_template;
    context.tool_call_parser = options.tool_call_parser;
    context.metrics = metrics_.get();
    HttpServerOptions server_options;
    server_options.port = 0;
    server_options.max_body_bytes = options.max_body_bytes;
    server_options.num_threads = options.num_threads;
    server_options.max_connections = options.max_connections;
    server_options.socket_send_buffer_bytes = options.socket_send_buffer_bytes;
    server_options.request_read_deadline_s = options.request_read_deadline_s;
    server_options.idle_timeout_s = options.idle_timeout_s;
    server_ = std::make_unique<HttpServer>(server_options, context);
    EXPECT_TRUE(server_->Bind().ok());
    port_ = server_->port();
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Serve().ok()); });
    if (options.start_engine) engine_->Start();
    rss_at_start_ = RssBytes();
  }
  // The process' resident set once this server was up.
  int64_t rss_at_start() const { return rss_at_start_; }
  ~OpenAiTestServer() {
    engine_->Stop();
    server_->Stop();
    thread_.join();
  }

  httplib::Client Client(const std::string& api_key = "") const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(30, 0);
    if (!api_key.empty()) client.set_bearer_token_auth(api_key);
    return client;
  }
  // POSTs `body` as JSON; the parsed response (status in "status", body in "body").
  httplib::Result Post(const std::string& path, const nlohmann::json& body) const {
    return Client().Post(path, body.dump(), "application/json");
  }

  int port() const { return port_; }
  EngineCore& engine() { return *engine_; }
  const Tokenizer& tokenizer() const { return *Stories260K().tokenizer; }
  const FinishRecorder& recorder() const { return recorder_; }
  // The engine requests that asked for prompt logprobs (counted as they reach the executor).
  int64_t num_scoring_prompts() const { return executor_->num_scoring_prompts(); }
  const FaultInjectingExecutor& injector() const { return *injector_; }
  HttpServer& http() { return *server_; }
  // The engine requests in flight, as --max-num-queued-reqs counts them.
  int64_t num_waiting() const { return server_->num_waiting(); }
  // Null unless TestServerOptions::with_metrics.
  const PrometheusMetrics* metrics() const { return metrics_.get(); }
  double Now() const { return clock_.Now(); }

 private:
  SteadyClock clock_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<DelayedExecutor> executor_;
  std::unique_ptr<FaultInjectingExecutor> injector_;
  FinishRecorder recorder_;
  std::unique_ptr<PrometheusMetrics> metrics_;
  std::unique_ptr<MetricsObserver> metrics_observer_;
  std::unique_ptr<EngineCore> engine_;
  std::unique_ptr<HttpServer> server_;
  int port_ = -1;
  std::thread thread_;
  int64_t rss_at_start_ = -1;
};

// The `data:` payloads of an SSE body, in order ("[DONE]" included); comments are skipped.
inline std::vector<std::string> SseEvents(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) events.push_back(event.substr(6));
    pos = end + 2;
  }
  return events;
}

// The body of an HTTP response with chunked transfer encoding (status line and headers included
// in `http_response`), decoded: the chunks' data joined. Stops at the last chunk, or where the
// response was cut (a partial last chunk is kept as far as it came).
inline std::string ChunkedBody(const std::string& http_response) {
  const size_t body_at = http_response.find("\r\n\r\n");
  if (body_at == std::string::npos) return "";
  std::string body;
  size_t pos = body_at + 4;
  while (pos < http_response.size()) {
    const size_t eol = http_response.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t size = std::stoul(http_response.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) break;
    body += http_response.substr(eol + 2, size);
    pos = eol + 2 + size + 2;
  }
  return body;
}

// The text of a whole HTTP response carrying a streamed completion (status line, headers, chunked
// SSE body), or a "<...>" description of what is wrong with it.
inline std::string StreamText(const std::string& http_response) {
  if (http_response.rfind("HTTP/1.1 200", 0) != 0 ||
      http_response.find("\r\n\r\n") == std::string::npos) {
    return "<not a 200 response: " + http_response.substr(0, 200) + ">";
  }
  const std::vector<std::string> events = SseEvents(ChunkedBody(http_response));
  if (events.empty() || events.back() != "[DONE]") return "<no [DONE]>";
  std::string text;
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    const nlohmann::json chunk = nlohmann::json::parse(events[e]);
    if (chunk.contains("error")) return "<error event " + events[e] + ">";
    if (!chunk.contains("choices") || chunk["choices"].empty()) continue;  // the usage chunk
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  return text;
}

// Expects the server to be serving: /health 200 and a short completion 200 (after a hostile
// request, say).
// The process has grown by less than kServingRssGrowthBound since `server` started (not checked
// under a sanitizer).
inline void ExpectRssBounded(const OpenAiTestServer& server) {
  if (kRssIsTheSanitizers) return;
  EXPECT_LT(RssBytes() - server.rss_at_start(), kServingRssGrowthBound)
      << "resident set at start " << server.rss_at_start() << " bytes, now " << RssBytes();
}

// The server serves on: /health is 200, a completion is 200, and the process has grown by less
// than kServingRssGrowthBound since the server started (ExpectRssBounded).
inline void ExpectServing(const OpenAiTestServer& server) {
  ExpectRssBounded(server);
  auto health = server.Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ok = server.Post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace tinyserve::testing
