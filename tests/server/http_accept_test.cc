// The wait before a handler made visible and bounded (server/http_server.h): arrival is stamped
// when the server accepts a connection, so a request that waited for a worker has that wait in its
// server-side TTFT and e2e and in tinyserve_http_queue_time_seconds; over max_connections a new
// connection gets an immediate 503 and is closed; idle connections hold no worker.
//
// Workers are held by non-streaming requests whose clients the test releases, so every wait here
// is forced by the test, and the assertions compare clocks (one SteadyClock for the client and
// the server), not speeds.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/metric_family.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
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

// How long the test keeps a request queued behind busy workers.
constexpr double kForcedWaitS = 0.3;

struct HistogramSample {
  uint64_t count = 0;
  double sum = 0.0;
  std::vector<uint64_t> cumulative;  // per bucket, +Inf last
};

// The one series of histogram `name` in the server's registry.
HistogramSample ReadHistogram(const OpenAiTestServer& server, const std::string& name) {
  HistogramSample out;
  for (const prometheus::MetricFamily& family : server.metrics()->registry()->Collect()) {
    if (family.name != name) continue;
    EXPECT_EQ(family.metric.size(), 1u);
    const prometheus::ClientMetric::Histogram& h = family.metric.at(0).histogram;
    out.count = h.sample_count;
    out.sum = h.sample_sum;
    for (const auto& b : h.bucket) out.cumulative.push_back(b.cumulative_count);
    return out;
  }
  ADD_FAILURE() << "no histogram " << name;
  return out;
}

double MaxConnectionRejections(const OpenAiTestServer& server) {
  return server.metrics()
      ->admission_rejections[static_cast<int>(AdmissionRejection::kMaxConnections)]
      ->Value();
}

// Waits (bounded) until the server counts `n` connections queued or served.
bool WaitForConnections(OpenAiTestServer& server, int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.http().num_connections() != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::string CompletionBody(bool stream, int first_token = 1) {
  return json({{"prompt", json::array({first_token, 2, 3})},
               {"max_tokens", 4},
               {"ignore_eos", true},
               {"temperature", 0},
               {"stream", stream}})
      .dump();
}

std::string ChatBody() {
  return json({{"messages", json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
               {"max_tokens", 4},
               {"ignore_eos", true},
               {"temperature", 0},
               {"stream", true}})
      .dump();
}

// The same streaming request, with the request's own metrics in its usage chunk.
std::string WithMetrics(const std::string& body) {
  json j = json::parse(body);
  j["stream_options"] = {{"include_usage", true}};
  return j.dump();
}

// The `metrics` object of the stream's usage chunk (--enable-per-request-metrics).
json StreamMetrics(const std::string& received) {
  const size_t at = received.rfind("\"metrics\":");
  if (at == std::string::npos) return json();
  const size_t start = received.find('{', at);
  const size_t end = received.find('}', start);
  return json::parse(received.substr(start, end - start + 1), nullptr, false);
}

// A streaming request to `path` that waits behind busy workers (both held by non-streaming
// requests until the test closes their clients): its TTFT and e2e on the server include that
// wait, and the queue-time histogram has it. The client sees its first token in SSE chunk
// `first_token_chunk` (a chat stream opens with the assistant's role, before any token).
void ExpectAQueuedRequestCountsItsWait(const std::string& path, const std::string& body,
                                       size_t first_token_chunk) {
  TestServerOptions options;
  options.num_threads = 2;
  options.with_metrics = true;
  options.enable_per_request_metrics = true;
  options.step_delay_s = 0.005;
  OpenAiTestServer server(options);
  const std::string long_body = json({{"prompt", json::array({1, 2, 3})},
                                      {"max_tokens", 400},
                                      {"ignore_eos", true},
                                      {"temperature", 0}})
                                    .dump();
  std::vector<std::unique_ptr<RawClient>> blockers;
  for (int i = 0; i < 2; ++i) {
    blockers.push_back(std::make_unique<RawClient>(server.port()));
    blockers.back()->Post("/v1/completions", long_body);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.http().num_in_flight() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(server.http().num_in_flight(), 2);
  const HistogramSample wait_before = ReadHistogram(server, "tinyserve_http_queue_time_seconds");
  ASSERT_EQ(wait_before.count, 2u);

  const double client_start = server.Now();
  RawClient queued(server.port());
  queued.Post(path, WithMetrics(body));
  std::this_thread::sleep_for(std::chrono::duration<double>(kForcedWaitS));
  const double released = server.Now();
  blockers.clear();  // their handlers see the clients gone and free the workers
  ASSERT_TRUE(queued.ReadChunks(first_token_chunk)) << queued.received();
  const double client_ttft = server.Now() - client_start;
  ASSERT_TRUE(queued.ReadUntil("data: [DONE]")) << queued.received();
  const double client_e2e = server.Now() - client_start;
  EXPECT_EQ(queued.received().rfind("HTTP/1.1 200", 0), 0u) << queued.received();

  const HistogramSample wait_after = ReadHistogram(server, "tinyserve_http_queue_time_seconds");
  ASSERT_EQ(wait_after.count, 3u);
  const double wait = wait_after.sum - wait_before.sum;
  const json metrics = StreamMetrics(queued.received());
  ASSERT_TRUE(metrics.is_object()) << queued.received();
  const double ttft = metrics["time_to_first_token_ms"].get<double>() / 1e3;
  const double e2e = ttft + metrics["generation_time_ms"].get<double>() / 1e3;
  // The wait for a worker began at the accept (after client_start, before the sleep) and lasted
  // until a worker was released (after the sleep); the server saw the first token and the finish
  // before the client read them. One SteadyClock for both sides.
  EXPECT_GE(wait, kForcedWaitS);
  EXPECT_LE(wait, client_ttft);
  EXPECT_GE(ttft, wait);
  EXPECT_LE(ttft, client_ttft);
  EXPECT_GE(e2e, ttft);
  EXPECT_LE(e2e, client_e2e);
  EXPECT_GE(released - client_start, kForcedWaitS);
}

TEST(HttpAcceptTest, AQueuedRequestsTtftAndE2eCountItsWaitForAWorker) {
  ExpectAQueuedRequestCountsItsWait("/v1/completions", CompletionBody(/*stream=*/true), 1);
}

// The chat route stamps the same arrival (the accept), not the handler's start.
TEST(HttpAcceptTest, AQueuedChatRequestsTtftAndE2eCountItsWaitForAWorker) {
  ExpectAQueuedRequestCountsItsWait("/v1/chat/completions", ChatBody(), 2);
}

TEST(HttpAcceptTest, OverMaxConnectionsANewConnectionGetsAnImmediate503AndIsClosed) {
  TestServerOptions options;
  options.num_threads = 2;
  options.max_connections = 3;
  options.with_metrics = true;
  OpenAiTestServer server(options);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::make_unique<RawClient>(server.port()));
  ASSERT_TRUE(WaitForConnections(server, 3));

  RawClient refused(server.port());
  refused.Post("/v1/completions", CompletionBody(/*stream=*/false));
  // The answer comes while the held connections stay open, and the server closes the connection.
  EXPECT_TRUE(refused.ReadUntilClosed(/*idle_ms=*/10'000)) << refused.received();
  const std::string& response = refused.received();
  ASSERT_EQ(response.rfind("HTTP/1.1 503", 0), 0u) << response;
  EXPECT_NE(response.find("Connection: close\r\n"), std::string::npos) << response;
  const size_t body_at = response.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos);
  const json body = json::parse(response.substr(body_at + 4));
  EXPECT_EQ(body["error"]["code"], 503);
  EXPECT_EQ(body["error"]["type"], "ServiceUnavailableError");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("--max-connections 3"),
            std::string::npos)
      << body.dump();
  EXPECT_EQ(server.http().num_connections(), 3);  // the refused one never counted
  EXPECT_EQ(MaxConnectionRejections(server), 1.0);

  // Once the held connections go, the server serves again.
  held.clear();
  ASSERT_TRUE(WaitForConnections(server, 0));
  auto client = server.Client();
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto completion = client.Post("/v1/completions", CompletionBody(false), "application/json");
  ASSERT_TRUE(completion);
  EXPECT_EQ(completion->status, 200) << completion->body;
  EXPECT_EQ(json::parse(completion->body)["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(MaxConnectionRejections(server), 1.0);
}

// Every request that reaches the server's handlers gives one sample, keep-alive ones too (a
// keep-alive request waits from its request line, which is read at once).
TEST(HttpAcceptTest, TheQueueTimeHistogramCountsEveryRequest) {
  TestServerOptions options;
  options.num_threads = 2;
  options.with_metrics = true;
  OpenAiTestServer server(options);
  auto keep_alive = server.Client();
  keep_alive.set_keep_alive(true);
  for (int i = 0; i < 3; ++i) {
    auto res = keep_alive.Get("/health");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
  }
  auto res = server.Client().Post("/v1/completions", CompletionBody(false), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = server.Client().Get("/no/such/route");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  const HistogramSample wait = ReadHistogram(server, "tinyserve_http_queue_time_seconds");
  EXPECT_EQ(wait.count, 5u);
  ASSERT_FALSE(wait.cumulative.empty());
  // The two keep-alive requests after the first waited exactly 0 (the lowest bucket, le=0.001).
  EXPECT_GE(wait.cumulative.front(), 2u);
  EXPECT_EQ(wait.cumulative.back(), 5u);
}

// Raises the soft limit on open files as far as the hard limit allows; returns the soft limit.
rlim_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

// One streaming client as the probe saw it: when it began connecting, when its first SSE data
// chunk had arrived (-1: never), and every byte it received.
struct ProbedStream {
  double start_s = 0.0;
  double first_chunk_s = -1.0;
  std::string received;
};

// Opens `num_clients` streaming completions at once (client i posts body(i)) and reads them all
// to their last chunk, on this one thread over epoll: the clients' own scheduling (hundreds of
// client threads on two cores) would otherwise be most of what the clients measure beyond the
// server. Each client stamps its start before its connect() and its first chunk when the read
// that completes it returns; a loopback connect completes in the kernel, so the request is
// written at once. Fails the test if a stream does not end within 60 s.
std::vector<ProbedStream> ProbeStreams(const OpenAiTestServer& server, int num_clients,
                                       const std::function<std::string(int)>& body) {
  std::vector<ProbedStream> streams(static_cast<size_t>(num_clients));
  std::vector<int> fds(static_cast<size_t>(num_clients), -1);
  const int epoll = epoll_create1(EPOLL_CLOEXEC);
  EXPECT_GE(epoll, 0);
  int open = 0;
  for (int i = 0; i < num_clients; ++i) {
    ProbedStream& stream = streams[static_cast<size_t>(i)];
    const std::string b = body(i);
    const std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(b.size()) + "\r\n\r\n" + b;
    stream.start_s = server.Now();
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(request.size())) {
      ADD_FAILURE() << "client " << i << " could not connect and send: " << std::strerror(errno);
      if (fd >= 0) close(fd);
      continue;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = static_cast<uint32_t>(i);
    EXPECT_EQ(epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event), 0);
    fds[static_cast<size_t>(i)] = fd;
    ++open;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<epoll_event> ready(256);
  char buf[16384];
  while (open > 0 && std::chrono::steady_clock::now() < deadline) {
    const int n = epoll_wait(epoll, ready.data(), static_cast<int>(ready.size()), 100);
    for (int e = 0; e < n; ++e) {
      const size_t i = ready[static_cast<size_t>(e)].data.u32;
      ProbedStream& stream = streams[i];
      bool ended = false;
      while (true) {
        const ssize_t got = read(fds[i], buf, sizeof(buf));
        if (got > 0) {
          stream.received.append(buf, static_cast<size_t>(got));
          continue;
        }
        ended = got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        break;
      }
      if (stream.first_chunk_s < 0 && stream.received.find("data: {") != std::string::npos) {
        stream.first_chunk_s = server.Now();
      }
      if (ended || stream.received.find("\r\n0\r\n\r\n") != std::string::npos) {
        close(fds[i]);
        fds[i] = -1;
        --open;
      }
    }
  }
  EXPECT_EQ(open, 0) << "streams still open after 60 s";
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  close(epoll);
  return streams;
}

// Issue 16: with many streaming clients, the clients' mean TTFT and the server's
// (vllm:time_to_first_token_seconds) agree within 10% or 50 ms, because the server's counts from
// the accept. (On cpp-httplib the wait for a worker was invisible at first: 6.27 s against 2.30 s
// at 1,500 clients.) The bound is on what is measured, not on how fast: the client's TTFT adds
// only the connect before the accept and the delivery after the step. Streams hold no worker
// (only their handler's start does), so the waves are the engine's (256 running sequences at
// most): long enough at 2,000 streams (a mean TTFT of 1-2 s) that the 10% bound is what is
// tested. Every stream must also be whole and carry the text a server without load gives.
void ExpectClientAndServerMeanTtftAgree(int num_clients, int num_workers, double step_delay_s) {
  const rlim_t files = RaiseOpenFileLimit();
  ASSERT_GE(files, rlim_t(4 * num_clients)) << "RLIMIT_NOFILE too low for the test";
  constexpr int kNumPrompts = 200;  // client i sends prompt [1 + i % 200, 2, 3]
  std::vector<std::string> expected(kNumPrompts);
  {
    OpenAiTestServer reference;
    for (int p = 0; p < kNumPrompts; ++p) {
      auto res = reference.Post("/v1/completions", json::parse(CompletionBody(false, 1 + p)));
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 200) << res->body;
      expected[static_cast<size_t>(p)] = json::parse(res->body)["choices"][0]["text"];
    }
  }
  TestServerOptions options;
  options.num_threads = num_workers;
  options.step_delay_s = step_delay_s;
  options.with_metrics = true;
  OpenAiTestServer server(options);
  const std::vector<ProbedStream> streams = ProbeStreams(server, num_clients, [](int i) {
    return CompletionBody(/*stream=*/true, 1 + i % kNumPrompts);
  });
  std::vector<double> client_ttft(static_cast<size_t>(num_clients));
  std::vector<std::string> text(static_cast<size_t>(num_clients));
  for (int i = 0; i < num_clients; ++i) {
    const ProbedStream& stream = streams[static_cast<size_t>(i)];
    client_ttft[static_cast<size_t>(i)] = stream.first_chunk_s - stream.start_s;
    text[static_cast<size_t>(i)] = StreamText(stream.received);
  }
  double client_sum = 0.0;
  for (int i = 0; i < num_clients; ++i) {
    ASSERT_GE(client_ttft[static_cast<size_t>(i)], 0.0) << "client " << i << " got no token";
    EXPECT_EQ(text[static_cast<size_t>(i)], expected[static_cast<size_t>(i % kNumPrompts)])
        << "client " << i;
    client_sum += client_ttft[static_cast<size_t>(i)];
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ReadHistogram(server, "vllm:e2e_request_latency_seconds").count <
             static_cast<uint64_t>(num_clients) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const HistogramSample ttft = ReadHistogram(server, "vllm:time_to_first_token_seconds");
  const HistogramSample wait = ReadHistogram(server, "tinyserve_http_queue_time_seconds");
  ASSERT_EQ(ttft.count, static_cast<uint64_t>(num_clients));
  EXPECT_EQ(wait.count, static_cast<uint64_t>(num_clients));
  const double client_mean = client_sum / num_clients;
  const double server_mean = ttft.sum / num_clients;
  std::printf(
      "[ ttft     ] %d streams, %d workers, %.0f ms steps: client mean %.4f s, server mean "
      "%.4f s, mean wait for a worker %.4f s\n",
      num_clients, num_workers, step_delay_s * 1e3, client_mean, server_mean,
      wait.sum / num_clients);
  EXPECT_LE(server_mean, client_mean);  // every server TTFT is inside its client's
  EXPECT_LE(client_mean - server_mean, std::max(0.10 * client_mean, 0.05));
}

// 300 streams on 16 workers (the streams hand their workers back at once): one wave; client
// 53-63 ms against server 45-59 ms, 4-8 ms apart (12-17 ms beside two busy loops; with a thread
// per client it was 13-34 ms, and 52 ms once in CI).
TEST(HttpAcceptTest, ClientAndServerMeanTtftAgreeWithMoreStreamsThanWorkers) {
  ExpectClientAndServerMeanTtftAgree(300, 16, 0.02);
}

// Issue 16's size: 2,000 streams on the product's 512 workers (and its 256 running sequences),
// ~8 waves of 100 ms steps: client 1.60-1.63 s against server 1.59-1.62 s (0.5-0.8%).
TEST(HttpAcceptTest, ClientAndServerMeanTtftAgreeWith2000Streams) {
  ExpectClientAndServerMeanTtftAgree(2000, 512, 0.1);
}

}  // namespace
}  // namespace tinyserve
