// Shutdown as `tinyserve serve` does it: after Drain() new generation requests get 503 while a
// stream in flight goes on; stopping the engine then ends that stream cleanly (a final chunk with
// finish_reason abort, then [DONE]) and nothing is left in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
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

TEST(OpenAiShutdownTest, DrainRefusesNewRequestsAndStopEndsStreamsCleanly) {
  TestServerOptions options;
  options.step_delay_s = 0.005;
  OpenAiTestServer server(options);
  RawClient stream(server.port());
  stream.Post("/v1/completions", json({{"prompt", "Once upon a time"},
                                       {"max_tokens", 400},
                                       {"ignore_eos", true},
                                       {"stream", true}})
                                     .dump());
  ASSERT_TRUE(stream.ReadChunks(2));
  EXPECT_EQ(server.http().num_in_flight(), 1);

  server.http().Drain();
  auto refused = server.Post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_NE(refused->body.find("shutting down"), std::string::npos);
  auto health = server.Client().Get("/v1/models");  // other routes still answer
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  ASSERT_TRUE(stream.ReadChunks(4));  // the stream in flight goes on
  server.engine().Stop();
  ASSERT_TRUE(stream.ReadUntil("data: [DONE]\n\n"));
  EXPECT_NE(stream.received().find("\"finish_reason\":\"abort\""), std::string::npos);
  for (int i = 0; i < 500 && server.http().num_in_flight() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(server.http().num_in_flight(), 0);
}

// Issue 16: Stop() left the listen loop waiting for a worker reading a request head that a
// client trickled (each byte restarts httplib's 5 s read timeout), and for one waiting for a
// keep-alive request (up to its 5 s timeout). Stop() shuts the connections' reading sides: Serve()
// returns while the client still trickles, well before either timeout could end them.
TEST(OpenAiShutdownTest, StopEndsWorkersReadingATrickledHeadOrWaitingOnKeepAlive) {
  OpenAiTestServer server;
  RawClient keep_alive(server.port());
  ASSERT_TRUE(keep_alive.Send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  ASSERT_TRUE(keep_alive.ReadUntil("\r\n\r\n"));
  EXPECT_EQ(keep_alive.received().rfind("HTTP/1.1 200", 0), 0u) << keep_alive.received();

  RawClient trickler(server.port());
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    const std::string head = "GET /health HTTP/1.1\r\nX-Pad: " + std::string(200, 'a');
    for (char c : head) {
      if (stop.load() || !trickler.Send(std::string(1, c))) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a worker is reading the head
  ASSERT_EQ(server.http().num_connections(), 2);
  server.http().Stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!server.http().has_stopped() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool stopped = server.http().has_stopped();
  stop.store(true);
  trickle.join();
  EXPECT_TRUE(stopped);
  EXPECT_EQ(server.http().num_connections(), 0);
  EXPECT_TRUE(keep_alive.ReadUntilClosed(1000));  // the server closed it
}

}  // namespace
}  // namespace tinyserve
