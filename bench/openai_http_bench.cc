// HTTP overhead measurements on the test server of tests/server/openai_test_server.h (a GoogleTest
// binary so that it shares those fixtures; not a ctest case). Run from the repository root:
//   build/bin/openai_http_bench
// (or --gtest_filter='*Name*' for one) and copy the printed lines into bench/RESULTS.md:
//   - requests/s for `max_tokens: 1` completions on stories260K (keep-alive clients);
//   - time from a token's sampling (the engine step's output time) to its SSE chunk arriving at
//     the client, at 100 concurrent streams (an upper bound of sampling -> write), read two ways:
//     one client thread per stream (SamplingToSseLatencyAt100Streams: 100 more runnable threads
//     on the server's cores, and the reader's wake-up is in the number), and one epoll thread
//     reading all 100 sockets (SamplingToSseLatencyAt100StreamsOneReader: closer to a client on
//     another machine; the number is mostly the server's sampling -> write).
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
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

TEST(OpenAiHttpBench, MaxTokens1RequestsPerSecond) {
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

TEST(OpenAiHttpBench, SamplingToSseLatencyAt100Streams) {
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
      for (const std::string& event : testing::SseEvents(testing::ChunkedBody(r.body))) {
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

// Per-token latencies of the bodies read by the clients: `chunk_ts[k]` is the receipt time of the
// k-th `data: {` chunk of a body.
struct ReceivedStream {
  std::string body;
  std::vector<double> chunk_ts;
};

// `first_token`: skip the tokens before it (the first ones overlap the other streams' start-up).
std::vector<double> TokenLatencies(const std::vector<ReceivedStream>& all,
                                   const std::map<std::string, std::vector<double>>& ts,
                                   size_t first_token, size_t* num_chunks) {
  std::vector<double> latencies;
  const std::regex id_re("\"id\":\"(cmpl-[0-9a-f]+)\"");
  for (const ReceivedStream& r : all) {
    std::smatch m;
    if (!std::regex_search(r.body, m, id_re)) continue;
    const auto it = ts.find(m[1].str() + "-0");
    if (it == ts.end()) continue;
    size_t token = 0;
    size_t chunk = 0;
    for (const std::string& event : testing::SseEvents(testing::ChunkedBody(r.body))) {
      if (event == "[DONE]" || chunk >= r.chunk_ts.size()) break;
      const json c = json::parse(event, nullptr, false);
      if (!c.is_object()) break;
      // The chunk's tokens: its logprobs entries, or else the growth of its continuous usage.
      size_t n = 0;
      if (!c["choices"].empty() && c["choices"][0]["logprobs"].is_object()) {
        n = c["choices"][0]["logprobs"]["tokens"].size();
      } else if (c.contains("usage") && c["usage"].is_object()) {
        const auto total = c["usage"]["completion_tokens"].get<size_t>();
        n = total > token ? total - token : 0;
      }
      for (size_t k = 0; k < n && token < it->second.size(); ++k, ++token) {
        if (token >= first_token) latencies.push_back(r.chunk_ts[chunk] - it->second[token]);
      }
      ++chunk;
    }
    *num_chunks += chunk;
  }
  return latencies;
}

// `step_delay_s`: the engine sleeps that long before each forward pass (a stand-in for an
// accelerator: the step takes time but leaves the CPUs to the HTTP side). `logprobs`: the streams
// ask for `logprobs: 0` (each chunk lists its tokens), else for continuous usage stats (each chunk
// carries the running completion token count), as most streaming clients ask for no logprobs.
void MeasureWithOneReader(double step_delay_s, bool logprobs = true) {
  constexpr int kStreams = 100;
  TestServerOptions options;
  options.num_threads = kStreams + 8;
  options.step_delay_s = step_delay_s;
  OpenAiTestServer server(options);
  json request = {{"prompt", "Once upon a time"},
                  {"max_tokens", 100},
                  {"ignore_eos", true},
                  {"temperature", 0},
                  {"stream", true}};
  if (logprobs) {
    request["logprobs"] = 0;  // chunk -> its tokens
  } else {
    request["stream_options"] = {{"include_usage", true}, {"continuous_usage_stats", true}};
  }
  const std::string body = request.dump();
  std::vector<std::unique_ptr<testing::RawClient>> clients;
  std::vector<ReceivedStream> received(kStreams);
  std::vector<size_t> scanned(kStreams, 0);  // bytes of the body already searched for chunks
  std::vector<bool> done(kStreams, false);
  const int ep = epoll_create1(0);
  ASSERT_GE(ep, 0);
  for (int c = 0; c < kStreams; ++c) {
    clients.push_back(std::make_unique<testing::RawClient>(server.port()));
    clients.back()->Post("/v1/completions", body);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(c);
    ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, clients.back()->fd(), &ev), 0);
  }
  int open = kStreams;
  std::vector<epoll_event> events(kStreams);
  char buf[1 << 16];
  while (open > 0) {
    const int n = epoll_wait(ep, events.data(), kStreams, 30000);
    ASSERT_GT(n, 0) << "no data for 30 s";
    const double now = Seconds();
    for (int e = 0; e < n; ++e) {
      const size_t c = events[static_cast<size_t>(e)].data.u32;
      const ssize_t got = read(clients[c]->fd(), buf, sizeof(buf));
      ReceivedStream& r = received[c];
      if (got > 0) r.body.append(buf, static_cast<size_t>(got));
      // Count the new chunks (a chunk marker may straddle two reads: back up 6 bytes).
      size_t pos = scanned[c] >= 6 ? scanned[c] - 6 : 0;
      while ((pos = r.body.find("data: {", pos)) != std::string::npos) {
        r.chunk_ts.push_back(now);
        pos += 7;
      }
      scanned[c] = r.body.size();
      if (got <= 0 || r.body.find("data: [DONE]", scanned[c] > 4096 ? scanned[c] - 4096 : 0) !=
                          std::string::npos) {
        if (!done[c]) {
          done[c] = true;
          --open;
          epoll_ctl(ep, EPOLL_CTL_DEL, clients[c]->fd(), nullptr);
        }
      }
    }
  }
  close(ep);
  const auto ts = server.recorder().token_ts();
  size_t num_chunks = 0;
  const std::vector<double> latencies = TokenLatencies(received, ts, 0, &num_chunks);
  size_t unused = 0;
  const std::vector<double> steady = TokenLatencies(received, ts, 10, &unused);
  // The engine's step interval (from the output times of one request's tokens).
  if (const char* path = std::getenv("TINYSERVE_BENCH_DUMP")) {  // stream,chunk,receipt_s
    if (FILE* f = std::fopen(path, "w")) {
      for (size_t c = 0; c < received.size(); ++c) {
        for (size_t k = 0; k < received[c].chunk_ts.size(); ++k) {
          std::fprintf(f, "%zu,%zu,%.6f\n", c, k, received[c].chunk_ts[k]);
        }
      }
      std::fclose(f);
    }
  }
  std::vector<double> steps;
  for (const auto& [id, t] : ts) {
    for (size_t i = 1; i < t.size(); ++i) steps.push_back(t[i] - t[i - 1]);
  }
  std::printf(
      "sampling -> SSE chunk at the client (one epoll reader, engine sleeps %.0f ms per step), %d "
      "concurrent streams x 100 tokens (%zu tokens matched in %zu chunks, %zu requests): p50 %.3f "
      "ms, p90 %.3f ms, p99 %.3f ms, "
      "max %.3f ms; tokens 10-99 only: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; engine "
      "step interval p50 %.3f ms\n",
      1e3 * step_delay_s, kStreams, latencies.size(), num_chunks, ts.size(),
      1e3 * Quantile(latencies, 0.5), 1e3 * Quantile(latencies, 0.9),
      1e3 * Quantile(latencies, 0.99), 1e3 * Quantile(latencies, 1.0), 1e3 * Quantile(steady, 0.5),
      1e3 * Quantile(steady, 0.9), 1e3 * Quantile(steady, 0.99), 1e3 * Quantile(steady, 1.0),
      1e3 * Quantile(steps, 0.5));
  EXPECT_GT(latencies.size(), 0u);
}

TEST(OpenAiHttpBench, SamplingToSseLatencyAt100StreamsOneReader) { MeasureWithOneReader(0.0); }

// The same with the engine's CPU work shortened by nothing but a 5 ms sleep per step: how much of
// the latency is the HTTP side competing with a CPU-bound engine for the two cores.
TEST(OpenAiHttpBench, SamplingToSseLatencyAt100StreamsOneReaderSleepingEngine) {
  MeasureWithOneReader(0.005);
}

TEST(OpenAiHttpBench, SamplingToSseLatencyAt100StreamsOneReaderSleepingEngineNoLogprobs) {
  MeasureWithOneReader(0.005, /*logprobs=*/false);
}

}  // namespace
}  // namespace tinyserve
