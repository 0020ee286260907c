// Clients that go away: a streaming client that disconnects mid-stream, one that disconnects
// while its request waits for its first token, and a non-streaming one. Each request finishes
// with reason abort within 100 ms (plus the step in flight) and every KV block is free afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "tests/server/openai_test_server.h"
#include "tests/server/raw_http_client.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::RawClient;
using testing::TestServerOptions;

// Waits until the recorder has a finish for an id starting with `prefix`; returns it.
std::optional<std::pair<std::string, testing::FinishRecorder::Finish>> WaitForFinish(
    const OpenAiTestServer& server, const std::string& prefix, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& [id, finish] : server.recorder().finishes()) {
      if (id.rfind(prefix, 0) == 0) return std::make_pair(id, finish);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::nullopt;
}

// The admission count (num_waiting) drops when the aborted request's HTTP handler returns, which
// can be a moment after the engine's finish: it is waited for too.
void ExpectAllBlocksFree(const OpenAiTestServer& server) {
  for (int i = 0; i < 500 && (server.recorder().used_blocks() != 0 ||
                              server.recorder().live_requests() != 0 || server.num_waiting() != 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(server.recorder().used_blocks(), 0);
  EXPECT_EQ(server.recorder().live_requests(), 0);
  EXPECT_EQ(server.num_waiting(), 0);
}

constexpr double kStepDelay = 0.005;  // 5 ms per step: a 400-token stream takes ~2 s

TEST(OpenAiDisconnectTest, StreamingClientThatLeavesMidStreamIsAborted) {
  TestServerOptions options;
  options.step_delay_s = kStepDelay;
  OpenAiTestServer server(options);
  RawClient client(server.port());
  client.Post("/v1/completions", json({{"prompt", "Once upon a time"},
                                       {"max_tokens", 400},
                                       {"ignore_eos", true},
                                       {"stream", true}})
                                     .dump());
  ASSERT_TRUE(client.ReadChunks(5));  // a few chunks in, the client goes away
  const double closed_at = server.Now();
  client.Close();
  const auto finish = WaitForFinish(server, "cmpl-", 2.0);
  ASSERT_TRUE(finish.has_value());
  EXPECT_EQ(finish->second.reason, FinishReason::kAbort);
  EXPECT_LT(finish->second.ts - closed_at, 0.1 + kStepDelay);
  ExpectAllBlocksFree(server);
}

TEST(OpenAiDisconnectTest, ChatStreamingClientThatLeavesIsAborted) {
  TestServerOptions options;
  options.step_delay_s = kStepDelay;
  OpenAiTestServer server(options);
  const json body = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                     {"max_tokens", 400},
                     {"ignore_eos", true},
                     {"stream", true}};
  RawClient client(server.port());
  client.Post("/v1/chat/completions", body.dump());
  ASSERT_TRUE(client.ReadUntil("\"content\":\" "));  // some content has arrived
  const double closed_at = server.Now();
  client.Close();
  const auto finish = WaitForFinish(server, "chatcmpl-", 2.0);
  ASSERT_TRUE(finish.has_value());
  EXPECT_EQ(finish->second.reason, FinishReason::kAbort);
  EXPECT_LT(finish->second.ts - closed_at, 0.1 + kStepDelay);
  ExpectAllBlocksFree(server);
}

TEST(OpenAiDisconnectTest, ClientThatLeavesBeforeTheFirstTokenIsAborted) {
  TestServerOptions options;
  options.start_engine = false;  // the request waits for its first token: pings meanwhile
  OpenAiTestServer server(options);
  RawClient client(server.port());
  client.Post("/v1/completions", json({{"prompt", "Once upon a time"}, {"stream", true}}).dump());
  ASSERT_TRUE(client.ReadUntil(": ping\n\n"));
  EXPECT_EQ(client.received().find("data:"), std::string::npos);
  EXPECT_EQ(server.num_waiting(), 1);
  client.Close();
  // The abort reaches the engine's inbox within 100 ms; the engine then finishes it at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double started = server.Now();
  server.engine().Start();
  const auto finish = WaitForFinish(server, "cmpl-", 2.0);
  ASSERT_TRUE(finish.has_value());
  EXPECT_EQ(finish->second.reason, FinishReason::kAbort);
  EXPECT_LT(finish->second.ts - started, 0.05);
  ExpectAllBlocksFree(server);
}

TEST(OpenAiDisconnectTest, NonStreamingClientThatLeavesIsAborted) {
  TestServerOptions options;
  options.step_delay_s = kStepDelay;
  OpenAiTestServer server(options);
  RawClient client(server.port());
  client.Post(
      "/v1/completions",
      json({{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}}).dump());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few steps in
  const double closed_at = server.Now();
  client.Close();
  const auto finish = WaitForFinish(server, "cmpl-", 2.0);
  ASSERT_TRUE(finish.has_value());
  EXPECT_EQ(finish->second.reason, FinishReason::kAbort);
  EXPECT_LT(finish->second.ts - closed_at, 0.1 + kStepDelay);
  ExpectAllBlocksFree(server);
}

TEST(OpenAiDisconnectTest, OtherStreamsAreUnaffected) {
  TestServerOptions options;
  options.step_delay_s = 0.001;
  OpenAiTestServer server(options);
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}};
  auto alone = server.Post("/v1/completions", body);
  ASSERT_TRUE(alone);
  const std::string expected = json::parse(alone->body)["choices"][0]["text"];
  RawClient leaver(server.port());
  json leaving = body;
  leaving["stream"] = true;
  leaving["max_tokens"] = 400;
  leaving["ignore_eos"] = true;
  leaver.Post("/v1/completions", leaving.dump());
  ASSERT_TRUE(leaver.ReadUntil("data: {"));
  auto stayer =
      std::async(std::launch::async, [&] { return server.Post("/v1/completions", body); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  leaver.Close();
  auto res = stayer.get();
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], expected);
  ExpectAllBlocksFree(server);
}

}  // namespace
}  // namespace tinyserve
