// POST /reset_prefix_cache (vLLM's route): 200 and an empty prefix cache when no request holds
// blocks, 409 while one runs, ?reset_running_requests=true preempts the running requests first;
// behind the API key; bad query values are 400, other methods 405.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "tests/server/openai_test_server.h"

namespace tinyserve::testing {
namespace {

using nlohmann::json;

constexpr char kKey[] = "sekret";

// Longer than a block (16 tokens), so a repeat hits the prefix cache.
const json& CachedRequest() {
  static const json r = {
      {"prompt", "Once upon a time there was a little girl named Lily. She liked to play outside."},
      {"max_tokens", 2}};
  return r;
}

httplib::Result PostWithKey(const OpenAiTestServer& server, const std::string& path,
                            const json& body) {
  return server.Client(kKey).Post(path, body.dump(), "application/json");
}

httplib::Result Reset(const OpenAiTestServer& server, const std::string& query = "") {
  return server.Client(kKey).Post("/reset_prefix_cache" + query, "", "text/plain");
}

TestServerOptions Options() {
  TestServerOptions options;
  options.api_key = kKey;
  options.with_metrics = true;
  options.enable_per_request_metrics = true;
  return options;
}

int64_t CachedTokens(const httplib::Result& res) {
  EXPECT_TRUE(res);
  if (!res) return -1;
  EXPECT_EQ(res->status, 200) << res->body;
  return json::parse(res->body).at("metrics").at("cached_prompt_tokens").get<int64_t>();
}

TEST(ResetPrefixCacheRouteTest, ResetEmptiesTheCache) {
  OpenAiTestServer server(Options());
  EXPECT_EQ(CachedTokens(PostWithKey(server, "/v1/completions", CachedRequest())), 0);
  const int64_t cached = CachedTokens(PostWithKey(server, "/v1/completions", CachedRequest()));
  EXPECT_GT(cached, 0);
  const double hits = server.metrics()->prefix_cache_hits.Value();
  EXPECT_EQ(hits, static_cast<double>(cached));

  auto reset = Reset(server);
  ASSERT_TRUE(reset);
  EXPECT_EQ(reset->status, 200) << reset->body;
  EXPECT_EQ(reset->body, "");
  EXPECT_EQ(CachedTokens(PostWithKey(server, "/v1/completions", CachedRequest())), 0);
  EXPECT_EQ(server.metrics()->prefix_cache_hits.Value(), hits);  // no new hits
  // That request cached its blocks again.
  EXPECT_EQ(CachedTokens(PostWithKey(server, "/v1/completions", CachedRequest())), cached);
}

TEST(ResetPrefixCacheRouteTest, NeedsTheApiKeyAndValidQueryValues) {
  OpenAiTestServer server(Options());
  auto no_key = server.Client().Post("/reset_prefix_cache", "", "text/plain");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401) << no_key->body;
  auto wrong_key = server.Client("other").Post("/reset_prefix_cache", "", "text/plain");
  ASSERT_TRUE(wrong_key);
  EXPECT_EQ(wrong_key->status, 401) << wrong_key->body;
  auto bad = Reset(server, "?reset_running_requests=maybe");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("reset_running_requests"), std::string::npos) << bad->body;
  auto get = server.Client(kKey).Get("/reset_prefix_cache");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405) << get->body;
  // FastAPI's other spellings of a boolean; reset_external is accepted (no connector here).
  for (const char* query : {"?reset_running_requests=False", "?reset_running_requests=0",
                            "?reset_external=true", "?reset_running_requests=on"}) {
    auto ok = Reset(server, query);
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << query << " " << ok->body;
  }
}

TEST(ResetPrefixCacheRouteTest, RefusedWhileARequestRunsUnlessItIsPreempted) {
  TestServerOptions options = Options();
  options.step_delay_s = 0.01;  // 300 tokens take about 3 s
  OpenAiTestServer server(options);
  auto running = std::async(std::launch::async, [&server] {
    return PostWithKey(server, "/v1/completions",
                       {{"prompt", "Once upon a time"}, {"max_tokens", 300}, {"ignore_eos", true}});
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.metrics()->num_requests_running.Value() < 1.0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(server.metrics()->num_requests_running.Value(), 1.0);

  auto refused = Reset(server);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 409) << refused->body;
  EXPECT_EQ(json::parse(refused->body)["error"]["code"], 409) << refused->body;
  auto forced = Reset(server, "?reset_running_requests=true");
  ASSERT_TRUE(forced);
  EXPECT_EQ(forced->status, 200) << forced->body;

  // The preempted request resumes and finishes whole.
  const httplib::Result res = running.get();
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  EXPECT_EQ(body["usage"]["completion_tokens"], 300);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["metrics"]["num_preemptions"], 1);
  EXPECT_GT(body["metrics"]["recomputed_tokens"].get<int64_t>(), 0);
  const PrometheusMetrics& m = *server.metrics();
  EXPECT_EQ(m.preemptions_by_reason[static_cast<int>(PreemptionReason::kResetPrefixCache)]->Value(),
            1.0);
  EXPECT_EQ(m.num_preemptions.Value(), 1.0);
}

}  // namespace
}  // namespace tinyserve::testing
