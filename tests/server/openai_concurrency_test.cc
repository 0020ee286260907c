// Many concurrent streaming clients: every stream is complete (ends with [DONE], one finish) and
// its greedy text equals the same prompt run alone.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::SseEvents;
using testing::TestServerOptions;

constexpr int kConcurrencyClients = 200;

json Body(int i) {
  static const char* const kPrompts[] = {"Once upon a time", "Lily had a big red ball", "The cat",
                                         "One day, Tom", "Sara and Ben"};
  return {{"prompt", kPrompts[i % 5]}, {"max_tokens", 8 + i % 13}, {"temperature", 0}};
}

TEST(OpenAiConcurrencyTest, ConcurrentStreamsEqualTheirSoloRuns) {
  TestServerOptions options;
  options.num_threads = kConcurrencyClients + 8;
  OpenAiTestServer server(options);
  // Solo runs of each distinct body.
  std::vector<std::string> solo;
  for (int i = 0; i < 5 * 13; ++i) {
    auto res = server.Post("/v1/completions", Body(i));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    solo.push_back(json::parse(res->body)["choices"][0]["text"]);
  }
  std::vector<std::future<std::string>> streams;
  for (int i = 0; i < kConcurrencyClients; ++i) {
    streams.push_back(std::async(std::launch::async, [&server, i] {
      json body = Body(i);
      body["stream"] = true;
      auto res = server.Post("/v1/completions", body);
      if (!res) return "<" + httplib::to_string(res.error()) + ">";
      if (res->status != 200) return "<" + std::to_string(res->status) + " " + res->body + ">";
      const std::vector<std::string> events = SseEvents(res->body);
      if (events.empty() || events.back() != "[DONE]") return std::string("<no [DONE]>");
      std::string text;
      int finishes = 0;
      for (size_t e = 0; e + 1 < events.size(); ++e) {
        const json chunk = json::parse(events[e]);
        text += chunk["choices"][0]["text"].get<std::string>();
        finishes += chunk["choices"][0]["finish_reason"].is_null() ? 0 : 1;
      }
      return finishes == 1 ? text : std::string("<finishes: ") + std::to_string(finishes) + ">";
    }));
  }
  for (int i = 0; i < kConcurrencyClients; ++i) {
    EXPECT_EQ(streams[static_cast<size_t>(i)].get(), solo[static_cast<size_t>(i % 65)])
        << "client " << i;
  }
  EXPECT_EQ(server.http().num_in_flight(), 0);
  EXPECT_EQ(server.num_waiting(), 0);
}

}  // namespace
}  // namespace tinyserve
