// HTTP overhead measurements (disabled by default; run with
//   test_server --gtest_also_run_disabled_tests --gtest_filter='*HttpBench*'
// and copy the printed lines into bench/RESULTS.md):
//   - requests/s for `max_tokens: 1` completions on stories260K (keep-alive clients);
//   - time from a token's sampling (the engine step's output time) to its SSE chunk arriving at
//     the client, at 100 concurrent streams (an upper bound of sampling -> write).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/server/openai_test_server.h"
#include "tests/server/raw_http_client.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::TestServerOptions;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

TEST(OpenAiHttpBench, DISABLED_MaxTokens1RequestsPerSecond) {
  TestServerOptions options;
  options.num_threads = 64;
  OpenAiTestServer server(options);
  for (int concurrency : {1, 8, 32}) {
    constexpr int kPerClient = 200;
    const double start = Seconds();
    std::vector<std::future<int>> clients;
    for (int c = 0; c < concurrency; ++c) {
      clients.push_back(std::async(std::launch::async, [&server] {
        httplib::Client client = server.Client();
        client.set_keep_alive(true);
        client.set_tcp_nodelay(true);  // else the client's header + body writes wait for an ACK
        int ok = 0;
        for (int i = 0; i < kPerClient; ++i) {
          auto res =
              client.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 1})",
                          "application/json");
          ok += res && res->status == 200 ? 1 : 0;
        }
        return ok;
      }));
    }
    int ok = 0;
    for (auto& c : clients) ok += c.get();
    const double secs = Seconds() - start;
    std::printf(
        "max_tokens=1 completions, %d keep-alive clients: %d requests in %.2f s = %.0f req/s\n",
        concurrency, ok, secs, ok / secs);
    EXPECT_EQ(ok, concurrency * kPerClient);
  }
}

TEST(OpenAiHttpBench, DISABLED_SamplingToSseLatencyAt100Streams) {
  constexpr int kStreams = 100;
  TestServerOptions options;
  options.num_threads = kStreams + 8;
  OpenAiTestServer server(options);
  struct Received {
    std::string body;
    std::vector<double> chunk_ts;  // receipt time of each `data: {` chunk
  };
  std::vector<std::future<Received>> clients;
  for (int c = 0; c < kStreams; ++c) {
    clients.push_back(std::async(std::launch::async, [&server] {
      Received r;
      testing::RawClient client(server.port());
      client.Post("/v1/completions", json({{"prompt", "Once upon a time"},
                                           {"max_tokens", 100},
                                           {"ignore_eos", true},
                                           {"temperature", 0},
                                           {"logprobs", 0},  // chunk -> its tokens
                                           {"stream", true}})
                                         .dump());
      size_t seen = 0;
      for (size_t n = 1; client.ReadChunks(n); ++n) {
        const double now = Seconds();
        const std::string& got = client.received();
        size_t count = 0;
        for (size_t pos = got.find("data: {"); pos != std::string::npos;
             pos = got.find("data: {", pos + 1)) {
          ++count;
        }
        for (; seen < count; ++seen) r.chunk_ts.push_back(now);
        n = count;
        if (got.find("data: [DONE]") != std::string::npos) break;
      }
      r.body = client.received();
      return r;
    }));
  }
  std::vector<double> latencies;
  const auto token_ts = [&] {
    std::vector<Received> all;
    for (auto& c : clients) all.push_back(c.get());
    const auto ts = server.recorder().token_ts();
    const std::regex id_re("\"id\":\"(cmpl-[0-9a-f]+)\"");
    for (const Received& r : all) {
      std::smatch m;
      if (!std::regex_search(r.body, m, id_re)) continue;
      const auto it = ts.find(m[1].str() + "-0");
      if (it == ts.end()) continue;
      // The k-th chunk carries logprobs.tokens for each of its tokens (several when the stream
      // fell behind a step): each token's latency is its chunk's receipt time - its output time.
      size_t token = 0;
      size_t chunk = 0;
      for (const std::string& event :
           testing::SseEvents(std::regex_replace(r.body, std::regex("\r\n[0-9a-f]+\r\n"), ""))) {
        if (event == "[DONE]" || chunk >= r.chunk_ts.size()) break;
        const json c = json::parse(event, nullptr, false);
        if (!c.is_object()) break;
        const json& lp = c["choices"][0]["logprobs"];
        const size_t n = lp.is_object() ? lp["tokens"].size() : 0;
        for (size_t k = 0; k < n && token < it->second.size(); ++k, ++token) {
          latencies.push_back(r.chunk_ts[chunk] - it->second[token]);
        }
        ++chunk;
      }
    }
    return ts.size();
  }();
  std::printf(
      "sampling -> SSE chunk at the client, %d concurrent streams x 100 tokens (%zu tokens "
      "matched, %zu requests): p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms\n",
      kStreams, latencies.size(), token_ts, 1e3 * Quantile(latencies, 0.5),
      1e3 * Quantile(latencies, 0.9), 1e3 * Quantile(latencies, 0.99),
      1e3 * Quantile(latencies, 1.0));
  EXPECT_GT(latencies.size(), 0u);
}

}  // namespace
}  // namespace tinyserve
