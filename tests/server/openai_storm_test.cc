// Storms against the real server: many streaming clients of which half vanish at random moments
// (before their first token, during prefill, mid-stream) against a KV cache small enough to
// preempt, and a burst of 2,000 requests with no queue limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/openai_test_server.h"
#include "tests/server/raw_http_client.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::RawClient;
using testing::StreamText;
using testing::TestServerOptions;

// Sizes: 300 storm clients and a burst of 2,000. The sanitizer runs (scripts/sanitize.sh tsan) set
// TINYSERVE_STORM_CLIENTS and TINYSERVE_BURST_REQUESTS smaller; unset, the full sizes run.
int StormSize(const char* name, int full, int min) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return full;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (*end != '\0' || n < min || n > full) {
    ADD_FAILURE() << name << "=\"" << value << "\": expected an integer in [" << min << ", " << full
                  << "]; running the full size " << full;
    return full;
  }
  return static_cast<int>(n);
}

constexpr int kStormTokens = 40;
// Disconnect -> FINISHED(abort), on the engine clock. The server must notice a leaving client
// within 100 ms (issue 9; the transport polls the parked streams' sockets every 20 ms and sees a
// failed write at once); an abort takes effect at the engine's next step boundary, so each abort
// must be finished by the first step that starts more than 100 ms after the disconnect. The test
// prints how many took longer than 100 ms in all. (ctest runs the storms alone: RUN_SERIAL.)
constexpr double kNoticeSeconds = 0.1;

// Client i's prompt: unique token ids, so the engine request of each client is known by its
// prompt.
std::vector<int32_t> StormPrompt(int i) { return {1, 2 + i, 305 + i % 7, 9}; }

json StormBody(int i, bool stream) {
  return {{"prompt", StormPrompt(i)},
          {"max_tokens", kStormTokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream}};
}

struct StormClient {
  bool cut = false;
  int cut_after_chunks = 0;  // -1: cut after a random delay instead
  double cut_delay_s = 0.0;
  double cut_ts = 0.0;  // the engine clock's time when the socket was closed
  std::string text;     // kept clients: the streamed text
};

TEST(OpenAiStormTest, DisconnectStormAbortsTheLeaversFastAndLeavesTheOthersExact) {
  // At least 12 clients: some of each kind of leaver (i % 6 == 3 cut after a delay, other odd ones
  // after some chunks) and 24 KV blocks too few for the 6 kept ones.
  const int num_clients = StormSize("TINYSERVE_STORM_CLIENTS", 300, 12);
  TestServerOptions options;
  options.num_threads = num_clients + 16;
  options.num_kv_blocks = 24;  // 384 token slots for 300 requests of 44 tokens: preemptions
  OpenAiTestServer server(options);

  // Solo runs of the clients that stay (the even ones).
  std::map<int, std::string> solo;
  for (int i = 0; i < num_clients; i += 2) {
    auto res = server.Post("/v1/completions", StormBody(i, false));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    solo[i] = json::parse(res->body)["choices"][0]["text"];
  }

  std::mt19937 rng(9);
  std::vector<StormClient> clients(static_cast<size_t>(num_clients));
  for (int i = 0; i < num_clients; ++i) {
    StormClient& c = clients[static_cast<size_t>(i)];
    c.cut = i % 2 == 1;
    if (!c.cut) continue;
    // A third leave after a random delay (often before the request is queued or its first
    // token), the others after a random number of chunks (0: right after sending).
    if (i % 3 == 0) {
      c.cut_after_chunks = -1;
      c.cut_delay_s = std::uniform_real_distribution<double>(0.0, 0.3)(rng);
    } else {
      c.cut_after_chunks = std::uniform_int_distribution<int>(0, kStormTokens - 1)(rng);
    }
  }
  std::atomic<int> ready{0};
  std::promise<void> go;
  std::shared_future<void> start = go.get_future().share();
  std::vector<std::thread> threads;
  for (int i = 0; i < num_clients; ++i) {
    threads.emplace_back([&, i] {
      StormClient& c = clients[static_cast<size_t>(i)];
      ready.fetch_add(1);
      start.wait();  // all at once
      RawClient raw(server.port());
      raw.Post("/v1/completions", StormBody(i, true).dump());
      if (!c.cut) {
        raw.ReadUntil("\r\n0\r\n\r\n");  // the last chunk of the chunked body
        c.text = StreamText(raw.received());
        return;
      }
      if (c.cut_after_chunks < 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(c.cut_delay_s));
      } else if (c.cut_after_chunks > 0) {
        raw.ReadChunks(static_cast<size_t>(c.cut_after_chunks));
      }
      c.cut_ts = server.Now();
      raw.Close();
    });
  }
  while (ready.load() < num_clients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  go.set_value();
  for (std::thread& t : threads) t.join();

  // Bounded wait for the engine to go idle.
  for (int i = 0; i < 1000 && server.engine().HasPendingWork(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(server.engine().HasPendingWork());

  // Each engine request by its prompt.
  std::map<std::vector<int32_t>, std::string> id_of;
  for (const auto& [id, prompt] : server.recorder().prompts()) {
    if (id.rfind("cmpl-", 0) == 0) id_of[prompt] = id;  // the storm's (solo runs come first)
  }
  const auto finishes = server.recorder().finishes();
  const auto queued = server.recorder().queued_ts();
  const std::vector<double> steps = server.recorder().step_ts();
  // The latest an abort noticed by `t` may finish: the start of the first step after `t` (the
  // engine applies aborts between steps), or `t` when no step started after it.
  const auto deadline = [&](double t) {
    const auto next = std::upper_bound(steps.begin(), steps.end(), t);
    return next == steps.end() ? t : *next;
  };
  int num_over_100ms = 0;
  std::vector<double> abort_latencies;
  int num_never_queued = 0;
  int num_finished_before_cut = 0;
  int num_read_after_cut = 0;
  for (int i = 0; i < num_clients; ++i) {
    const StormClient& c = clients[static_cast<size_t>(i)];
    if (!c.cut) {
      EXPECT_EQ(c.text, solo[i]) << "client " << i;
      continue;
    }
    auto id = id_of.find(StormPrompt(i));
    if (id == id_of.end()) {
      ++num_never_queued;  // gone before its request was read
      continue;
    }
    auto f = finishes.find(id->second);
    ASSERT_NE(f, finishes.end()) << "client " << i << " never finished";
    if (f->second.reason != FinishReason::kAbort) {
      // A request may still finish normally if its last token came before the disconnect could
      // have been noticed.
      EXPECT_EQ(f->second.reason, FinishReason::kLength) << "client " << i;
      EXPECT_LE(f->second.ts, deadline(c.cut_ts + kNoticeSeconds)) << "client " << i;
      ++num_finished_before_cut;
      continue;
    }
    // From the disconnect, or from the moment the server read the request when that was later
    // (under a burst of connections a request may be read after its client has already left).
    const double since = std::max(c.cut_ts, queued.at(id->second));
    const double latency = f->second.ts - since;
    abort_latencies.push_back(latency);
    num_over_100ms += latency > 0.1;
    num_read_after_cut += queued.at(id->second) > c.cut_ts;
    if (f->second.ts > deadline(since + kNoticeSeconds)) {
      ADD_FAILURE() << "client " << i << " (cut after "
                    << (c.cut_after_chunks < 0 ? std::to_string(c.cut_delay_s) + " s"
                                               : std::to_string(c.cut_after_chunks) + " chunks")
                    << ") was aborted " << latency * 1e3
                    << " ms after it left (or was read); queued "
                    << (queued.at(id->second) - c.cut_ts) * 1e3 << " ms after it left";
    }
  }
  std::sort(abort_latencies.begin(), abort_latencies.end());
  ASSERT_FALSE(abort_latencies.empty());
  const double p50 = abort_latencies[abort_latencies.size() / 2];
  const double max = abort_latencies.back();
  std::printf(
      "[ storm    ] %zu aborted (disconnect or later QUEUED -> FINISHED: p50 %.1f ms, max %.1f "
      "ms, %d over 100 ms; %d read after the disconnect), %d never queued, %d finished normally, "
      "%lld "
      "preemptions\n",
      abort_latencies.size(), p50 * 1e3, max * 1e3, num_over_100ms, num_read_after_cut,
      num_never_queued, num_finished_before_cut,
      static_cast<long long>(server.recorder().num_preemptions()));
  EXPECT_GT(server.recorder().num_preemptions(), 0);
  EXPECT_EQ(server.recorder().used_blocks(), 0);
  EXPECT_EQ(server.recorder().live_requests(), 0);
}

// A burst of 2,000 connections at once, no queue limit: every request is queued and completes.
// (ConnectionWatch once scanned every descriptor of the process per request, O(N^2) here with
// 2,000 server and 2,000 client sockets in one process: most clients timed out.)
TEST(OpenAiStormTest, BurstOf2000RequestsWithoutAQueueLimitAllComplete) {
  const int num_requests = StormSize("TINYSERVE_BURST_REQUESTS", 2000, 8);
  TestServerOptions options;
  options.num_threads = num_requests + 16;  // every request reaches the engine at once
  // 256 running at most (the default) at full size; a reduced burst keeps the engine's queue by
  // running at most an eighth of it.
  options.max_num_seqs = std::min(256, num_requests / 8);
  OpenAiTestServer server(options);
  std::atomic<int> ready{0};
  std::promise<void> go;
  std::shared_future<void> start = go.get_future().share();
  std::vector<int> status(static_cast<size_t>(num_requests), 0);
  std::vector<std::string> finish(static_cast<size_t>(num_requests));
  std::vector<std::string> error_body(static_cast<size_t>(num_requests));  // what a non-200 said
  std::vector<std::thread> threads;
  for (int i = 0; i < num_requests; ++i) {
    threads.emplace_back([&, i] {
      auto client = server.Client();
      ready.fetch_add(1);
      start.wait();  // all at once
      const json body = {{"prompt", json::array({1, 2 + i % 500, 7})},
                         {"max_tokens", 4},
                         {"ignore_eos", true},
                         {"temperature", 0}};
      auto res = client.Post("/v1/completions", body.dump(), "application/json");
      if (!res) return;
      status[static_cast<size_t>(i)] = res->status;
      if (res->status == 200) {
        finish[static_cast<size_t>(i)] = json::parse(res->body)["choices"][0]["finish_reason"];
      } else {
        error_body[static_cast<size_t>(i)] = res->body;
      }
    });
  }
  while (ready.load() < num_requests) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  go.set_value();
  for (std::thread& t : threads) t.join();
  int num_ok = 0;
  for (int i = 0; i < num_requests; ++i) {
    EXPECT_EQ(status[static_cast<size_t>(i)], 200)
        << "request " << i << ": " << error_body[static_cast<size_t>(i)];
    EXPECT_EQ(finish[static_cast<size_t>(i)], "length") << "request " << i;
    num_ok += status[static_cast<size_t>(i)] == 200;
  }
  EXPECT_EQ(num_ok, num_requests);
  std::printf("[ burst    ] %d of %d completed; at most %d waited in the engine at once\n", num_ok,
              num_requests, server.recorder().max_waiting());
  EXPECT_GT(server.recorder().max_waiting(), 0);  // the engine queued them (over max_num_seqs)
  EXPECT_EQ(server.recorder().used_blocks(), 0);
}

}  // namespace
}  // namespace tinyserve
