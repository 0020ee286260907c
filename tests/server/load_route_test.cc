// GET /load (vLLM's {"server_load": N}) and GET /get_load (vllm-project/router's load monitor reads
// the integer "load" of GET {worker}/get_load, src/routers/http/router.rs): both count the
// generation requests in flight, so they are 0 when idle and follow concurrent requests held in
// the engine by a slow executor.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "tests/server/openai_test_server.h"

namespace tinyserve::testing {
namespace {

int64_t GetLoad(const OpenAiTestServer& server, const char* path, const char* key) {
  httplib::Client client = server.Client();
  auto res = client.Get(path);
  EXPECT_TRUE(res);
  if (!res) return -1;
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const nlohmann::json body = nlohmann::json::parse(res->body);
  EXPECT_EQ(body.size(), 1u) << res->body;  // exactly the one field each reader expects
  EXPECT_TRUE(body.at(key).is_number_integer()) << res->body;
  return body.at(key).get<int64_t>();
}

TEST(LoadRouteTest, CountsTheGenerationRequestsInFlight) {
  TestServerOptions options;
  options.step_delay_s = 0.02;  // each request of 40 tokens takes about a second
  OpenAiTestServer server(options);
  EXPECT_EQ(GetLoad(server, "/load", "server_load"), 0);
  EXPECT_EQ(GetLoad(server, "/get_load", "load"), 0);

  constexpr int kRequests = 3;
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&server] {
      auto res = server.Post("/v1/completions", {{"model", "stories"},
                                                 {"prompt", "Once upon a time"},
                                                 {"max_tokens", 40},
                                                 {"ignore_eos", true},
                                                 {"temperature", 0}});
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200);
    });
  }
  // All three get admitted; while they run both routes say 3.
  int64_t seen = 0;
  for (int i = 0; i < 200 && seen < kRequests; ++i) {
    seen = GetLoad(server, "/load", "server_load");
    if (seen < kRequests) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(seen, kRequests);
  EXPECT_EQ(GetLoad(server, "/get_load", "load"), kRequests);
  EXPECT_EQ(server.http().num_in_flight(), kRequests);
  for (auto& t : clients) t.join();
  // Answered: back to 0 (a job ends when its response is complete).
  int64_t after = -1;
  for (int i = 0; i < 200 && after != 0; ++i) {
    after = GetLoad(server, "/get_load", "load");
    if (after != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(after, 0);
  EXPECT_EQ(GetLoad(server, "/load", "server_load"), 0);
}

}  // namespace
}  // namespace tinyserve::testing
