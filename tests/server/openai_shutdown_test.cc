// Shutdown as `tinyserve serve` does it: after Drain() new generation requests get 503 while a
// stream in flight goes on; stopping the engine then ends that stream cleanly (a final chunk with
// finish_reason abort, then [DONE]) and nothing is left in flight.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

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

}  // namespace
}  // namespace tinyserve
