// Faults inside the engine, seen over HTTP (engine/fault_injecting_executor.h): a failed step
// fails exactly the requests of its batch (a 500 JSON error, or an error event and [DONE] in a
// stream), the rest stay correct, no KV block leaks and /metrics counts the errors; a fatal device
// error kills the engine: in-flight requests end with an error, /health and new requests get 503.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::SseEvents;
using testing::TestServerOptions;

constexpr int kNumBodies = 20;

json FaultBody(int i) {
  // Token-id prompts: distinct, and short enough that a step holds many requests.
  return {{"prompt", json::array({1, 100 + i, 200 + 3 * i, 7 + i})},
          {"max_tokens", 12 + i % 7},
          {"temperature", 0}};
}

// What one client saw: the text, or the error message (with ok false).
struct Outcome {
  bool ok = false;
  std::string text;
  std::string error;
};

Outcome PostCompletion(const OpenAiTestServer& server, const json& body) {
  Outcome o;
  auto client = server.Client();
  auto res = client.Post("/v1/completions", body.dump(), "application/json");
  if (!res) {
    o.error = "<transport: " + httplib::to_string(res.error()) + ">";
    return o;
  }
  if (!body.value("stream", false)) {
    const json j = json::parse(res->body);
    if (res->status == 200) {
      o.ok = true;
      o.text = j["choices"][0]["text"];
    } else {
      o.error = std::to_string(res->status) + " " + j["error"]["message"].get<std::string>();
    }
    return o;
  }
  const std::vector<std::string> events = SseEvents(res->body);
  if (res->status != 200 || events.empty() || events.back() != "[DONE]") {
    o.error = "<bad stream " + std::to_string(res->status) + ": " + res->body + ">";
    return o;
  }
  o.ok = true;
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    const json chunk = json::parse(events[e]);
    if (chunk.contains("error")) {
      o.ok = false;
      o.error = "stream " + chunk["error"]["message"].get<std::string>();
      EXPECT_EQ(chunk["error"]["code"], 500);
      continue;
    }
    o.text += chunk["choices"][0]["text"].get<std::string>();
  }
  return o;
}

// The value of the series of `name` whose labels contain `label`, from Prometheus text.
double MetricValue(const std::string& text, const std::string& name, const std::string& label) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) == 0 && line.find(label) != std::string::npos) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  ADD_FAILURE() << "no series " << name << " with " << label;
  return -1;
}

// Waits (bounded) until the engine holds no request.
void WaitUntilIdle(const OpenAiTestServer& server) {
  for (int i = 0; i < 1000 && (server.recorder().live_requests() > 0 ||
                               const_cast<OpenAiTestServer&>(server).engine().HasPendingWork());
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST(OpenAiFaultTest, FailedStepsFailExactlyTheirRequestsAndTheRestAreCorrect) {
  std::vector<std::string> solo;
  {
    OpenAiTestServer clean;
    for (int i = 0; i < kNumBodies; ++i) {
      Outcome o = PostCompletion(clean, FaultBody(i));
      ASSERT_TRUE(o.ok) << o.error;
      solo.push_back(o.text);
    }
  }
  constexpr int kNumRequests = 200;
  constexpr int kFaultClients = 12;
  TestServerOptions options;
  options.faults.rate = 0.05;  // 5% of the steps
  options.faults.seed = 2026;
  options.faults.kind = FaultKind::kError;
  options.with_metrics = true;
  options.num_threads = kFaultClients + 8;
  options.num_kv_blocks = 32;  // preemptions too
  OpenAiTestServer server(options);
  std::vector<std::future<std::vector<std::pair<int, Outcome>>>> clients;
  for (int c = 0; c < kFaultClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&server, c] {
      std::vector<std::pair<int, Outcome>> outcomes;
      for (int i = c; i < kNumRequests; i += kFaultClients) {
        json body = FaultBody(i % kNumBodies);
        body["stream"] = i % 2 == 1;
        outcomes.emplace_back(i, PostCompletion(server, body));
      }
      return outcomes;
    }));
  }
  std::map<int64_t, int32_t> failed_per_call;
  int num_ok = 0;
  const std::regex call_re("injected fault at executor call ([0-9]+) ");
  for (auto& client : clients) {
    for (auto& [i, o] : client.get()) {
      if (o.ok) {
        ++num_ok;
        EXPECT_EQ(o.text, solo[static_cast<size_t>(i % kNumBodies)]) << "request " << i;
        continue;
      }
      std::smatch m;
      ASSERT_TRUE(std::regex_search(o.error, m, call_re)) << "request " << i << ": " << o.error;
      EXPECT_TRUE(o.error.rfind("500 ", 0) == 0 || o.error.rfind("stream ", 0) == 0) << o.error;
      ++failed_per_call[std::stoll(m[1])];
    }
  }
  // Exactly the requests of the failed batches failed (one engine request per HTTP request).
  std::map<int64_t, int32_t> injected;
  for (const InjectedFault& f : server.injector().faults()) injected[f.call] = f.num_seqs;
  EXPECT_FALSE(injected.empty());
  EXPECT_EQ(failed_per_call, injected);
  int num_failed = 0;
  for (auto& [call, n] : injected) num_failed += n;
  EXPECT_EQ(num_ok + num_failed, kNumRequests);
  std::printf("[ fault    ] %zu of %lld steps failed: %d of %d requests failed, %lld preemptions\n",
              injected.size(), static_cast<long long>(server.injector().num_calls()), num_failed,
              kNumRequests, static_cast<long long>(server.recorder().num_preemptions()));

  WaitUntilIdle(server);
  EXPECT_EQ(server.recorder().used_blocks(), 0);
  auto metrics = server.Client().Get("/metrics");
  ASSERT_TRUE(metrics);
  const std::string& text = metrics->body;
  const std::string success = "vllm:request_success_total";
  EXPECT_EQ(MetricValue(text, success, "finished_reason=\"error\""), num_failed);
  EXPECT_EQ(MetricValue(text, success, "finished_reason=\"stop\"") +
                MetricValue(text, success, "finished_reason=\"length\""),
            num_ok);
  EXPECT_EQ(MetricValue(text, success, "finished_reason=\"abort\""), 0);
  EXPECT_EQ(MetricValue(text, "tinyserve_kv_cache_blocks", "state=\"used\""), 0);
}

TEST(OpenAiFaultTest, ThrownExceptionIsA500AndTheServerKeepsServing) {
  TestServerOptions options;
  options.faults.calls = {1};
  options.faults.kind = FaultKind::kException;
  OpenAiTestServer server(options);
  Outcome failed = PostCompletion(server, FaultBody(0));
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.error,
            "500 The request failed in the engine: INTERNAL: the executor threw an exception (its "
            "message is in the server log)");
  Outcome next = PostCompletion(server, FaultBody(0));
  EXPECT_TRUE(next.ok) << next.error;
  auto health = server.Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST(OpenAiFaultTest, FatalErrorKillsTheEngineWithoutAHang) {
  TestServerOptions options;
  options.faults.calls = {60};
  options.faults.kind = FaultKind::kFatal;
  options.step_delay_s = 0.01;  // the requests below are in flight at call 60 (0.6 s)
  options.with_metrics = true;
  OpenAiTestServer server(options);
  std::vector<std::future<Outcome>> in_flight;
  for (int i = 0; i < 6; ++i) {
    json body = FaultBody(i);
    body["max_tokens"] = 200;
    body["stream"] = i % 2 == 0;
    in_flight.push_back(
        std::async(std::launch::async, [&server, body] { return PostCompletion(server, body); }));
  }
  int num_failed_in_flight = 0;
  for (auto& f : in_flight) {
    // Bounded: the client's read timeout is 30 s; an engine that hung would fail here.
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready);
    Outcome o = f.get();
    EXPECT_FALSE(o.ok);
    EXPECT_NE(o.error.find("DEVICE_LOST: injected fault at executor call 60"), std::string::npos)
        << o.error;
    // A request that came after the death (a slow client thread) got 503 instead.
    num_failed_in_flight += o.error.rfind("503 The engine is dead", 0) != 0;
  }
  EXPECT_GT(num_failed_in_flight, 0);
  EXPECT_TRUE(server.engine().is_dead());
  auto client = server.Client();
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_NE(health->body.find("dead"), std::string::npos) << health->body;
  for (bool stream : {false, true}) {
    json body = FaultBody(1);
    body["stream"] = stream;
    auto res = client.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503);
    const json error = json::parse(res->body)["error"];
    EXPECT_EQ(error["type"], "ServiceUnavailableError");
    EXPECT_EQ(error["code"], 503);
    EXPECT_NE(error["message"].get<std::string>().find("The engine is dead"), std::string::npos);
  }
  auto chat = client.Post("/v1/chat/completions",
                          json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump(),
                          "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 503);
  EXPECT_EQ(server.recorder().used_blocks(), 0);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(MetricValue(metrics->body, "vllm:request_success_total", "finished_reason=\"error\""),
            num_failed_in_flight);
}

}  // namespace
}  // namespace tinyserve
