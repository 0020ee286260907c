// Issue 16 item 3, on the libmicrohttpd transport (server/http_server.h): what one connection can
// cost the server. A request head is bounded by the per-connection memory (a header flood, by
// count or by length, gets 431 and the close), a head trickled byte by byte is cut at the read
// deadline, a connection that moves nothing is closed after the idle timeout, and neither slow
// heads nor idle keep-alive connections hold a worker: others are served meanwhile. After each:
// /health 200, other requests served, the server's RSS bounded.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/openai_test_server.h"
#include "tests/server/raw_http_client.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::ExpectServing;
using testing::OpenAiTestServer;
using testing::RawClient;
using testing::TestServerOptions;

using testing::RssBytes;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The reported abort: a head that never ends grew the server's memory without limit (3.3 GB
// after 20 s of one client on cpp-httplib 0.11.4). Now the head stops at the connection's memory
// (32 KiB by default): 431 and the close, whether the head has many lines or one long one.
TEST(HttpLimitsTest, AHeaderFloodGets431AndTheClose) {
  OpenAiTestServer server;
  const int64_t rss_before = RssBytes();
  const std::string many_lines = [] {
    std::string s;
    for (int i = 0; i < 100; ++i) s += "X-Flood-" + std::to_string(i) + ": 1\r\n";
    return s;
  }();
  const std::string long_line = "X-Flood: " + std::string(8000, 'a') + "\r\n";
  for (const std::string& unit : {many_lines, long_line}) {
    RawClient client(server.port());
    client.Send("GET /health HTTP/1.1\r\nHost: x\r\n");
    // Up to 64 MiB: the server must stop reading long before.
    bool refused = false;
    for (int i = 0; i < 64 * 1024 * 1024 / static_cast<int>(unit.size()) && !refused; i += 16) {
      std::string batch;
      for (int j = 0; j < 16; ++j) batch += unit;
      refused = !client.Send(batch);
    }
    client.ReadUntilClosed(3000);
    EXPECT_EQ(client.received().rfind("HTTP/1.1 431", 0), 0u) << client.received();
  }
  EXPECT_LT(RssBytes() - rss_before, int64_t{32} << 20);
  ExpectServing(server);
}

// A head trickled a byte at a time (each byte inside the idle timeout) is cut at the read
// deadline, and the slow clients hold no worker meanwhile: with 2 workers and 200 slow sockets,
// others are served at once.
TEST(HttpLimitsTest, TrickledHeadsAreCutAtTheDeadlineAndHoldNoWorker) {
  TestServerOptions options;
  options.num_threads = 2;
  options.request_read_deadline_s = 1.0;
  OpenAiTestServer server(options);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<RawClient>(server.port()));
    slow.back()->Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
  }
  const double start = Seconds();
  ExpectServing(server);
  EXPECT_LT(Seconds() - start, 1.0);
  // One of them keeps trickling: a byte every 100 ms, never an idle second, never a whole head.
  RawClient& trickler = *slow.front();
  bool closed = false;
  while (!closed && Seconds() - start < 5.0) {
    closed = !trickler.Send("X") || trickler.ReadUntilClosed(100);
  }
  EXPECT_TRUE(closed) << "a trickled head outlived the 1 s deadline";
  EXPECT_LT(Seconds() - start, 2.5);
  ExpectServing(server);
}

// The deadline covers the body too: a whole head, then a body trickled a byte every 100 ms (each
// inside the idle timeout, the body never whole) is cut at the deadline, not served, and holds
// no worker meanwhile.
TEST(HttpLimitsTest, ATrickledBodyIsCutAtTheDeadline) {
  TestServerOptions options;
  options.num_threads = 2;
  options.request_read_deadline_s = 1.0;
  OpenAiTestServer server(options);
  const std::string body =
      R"({"prompt": "Once upon a time", "max_tokens": 1})" + std::string(200, ' ');
  RawClient trickler(server.port());
  ASSERT_TRUE(
      trickler.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                    "Content-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n"));
  const double start = Seconds();
  bool closed = false;
  for (size_t i = 0; !closed && i < body.size() && Seconds() - start < 5.0; ++i) {
    closed = !trickler.Send(body.substr(i, 1)) || trickler.ReadUntilClosed(100);
  }
  EXPECT_TRUE(closed) << "a trickled body outlived the 1 s deadline";
  EXPECT_LT(Seconds() - start, 2.5);
  EXPECT_EQ(trickler.received().find("HTTP/1.1 200"), std::string::npos) << trickler.received();
  ExpectServing(server);
}

// An idle connection (keep-alive after its answer, or one that never sent a byte) is closed after
// the idle timeout, and until then holds no worker.
TEST(HttpLimitsTest, IdleConnectionsHoldNoWorkerAndAreClosedAfterTheIdleTimeout) {
  TestServerOptions options;
  options.num_threads = 2;
  options.idle_timeout_s = 1.0;
  OpenAiTestServer server(options);
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 100; ++i) {
    idle.push_back(std::make_unique<RawClient>(server.port()));
    if (i % 2 == 0) {  // keep-alive after one request
      idle.back()->Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
      ASSERT_TRUE(idle.back()->ReadUntil("\r\n\r\n"));
    }
  }
  const double start = Seconds();
  ExpectServing(server);
  EXPECT_LT(Seconds() - start, 1.0);
  for (auto& client : idle) EXPECT_TRUE(client->ReadUntilClosed(3000));
  EXPECT_LT(Seconds() - start, 3.0);
  ExpectServing(server);
}

}  // namespace
}  // namespace tinyserve
