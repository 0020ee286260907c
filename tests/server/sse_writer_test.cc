// The SSE writer thread (server/sse_writer.h) through the real server: a client that stops
// reading gets its stream buffered and completed later while the others go on; streams written by
// the writer are byte-for-byte those written by the HTTP workers (ids and times aside); several
// writer threads share the streams.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
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

json StreamBody(const std::string& prompt, int max_tokens, int logprobs) {
  return {{"prompt", prompt},
          {"max_tokens", max_tokens},
          {"ignore_eos", true},
          {"temperature", 0},
          {"logprobs", logprobs},
          {"stream", true},
          {"stream_options", {{"include_usage", true}}}};
}

std::string SoloText(OpenAiTestServer& server, json body) {
  body["stream"] = false;
  body.erase("stream_options");
  auto res = server.Post("/v1/completions", body);
  EXPECT_TRUE(res);
  if (!res) return "";
  EXPECT_EQ(res->status, 200) << res->body;
  return json::parse(res->body)["choices"][0]["text"];
}

std::string ReadWholeStream(RawClient& client) {
  EXPECT_TRUE(client.ReadUntil("\r\n0\r\n\r\n")) << client.received();
  return client.received();
}

// Server sockets with a send buffer this small (no autotuning: on loopback the kernel would give
// a connection megabytes), so that a client that does not read blocks the writer's sends.
constexpr int kSmallSendBuffer = 8192;

TEST(SseWriterTest, ClientThatStopsReadingIsBufferedAndTheOthersGoOn) {
  TestServerOptions options;
  options.socket_send_buffer_bytes = kSmallSendBuffer;
  options.sse_writer_options.stall_seconds =
      120;  // the client stalls on purpose (for long under sanitizers)
  OpenAiTestServer server(options);
  // ~500 chunks with 5 top logprobs each: far more than the slow client's TCP window (4 KiB) and
  // the server socket's send buffer (16 KiB) can take.
  const json slow_body = StreamBody("Once upon a time", 500, 5);
  const std::string slow_solo = SoloText(server, slow_body);
  const size_t num_finished_before = server.recorder().finishes().size();
  RawClient slow(server.port(), /*receive_buffer_bytes=*/2048);
  slow.Post("/v1/completions", slow_body.dump());

  // The engine finishes the slow client's request although the client reads nothing.
  bool finished = false;
  for (int i = 0; i < 5000 && !finished; ++i) {
    finished = server.recorder().finishes().size() > num_finished_before &&
               server.recorder().live_requests() == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(finished);

  // Meanwhile other streams are served in full.
  for (int i = 0; i < 3; ++i) {
    const json body = StreamBody("Tom had a", 30 + 10 * i, 0);
    const std::string solo = SoloText(server, body);
    RawClient other(server.port());
    other.Post("/v1/completions", body.dump());
    EXPECT_EQ(StreamText(ReadWholeStream(other)), solo) << "stream " << i;
  }

  // The slow client finally reads: the whole stream, in order, ending in [DONE].
  const std::string response = ReadWholeStream(slow);
  EXPECT_GT(response.size(), 64u * 1024u);  // really more than the buffers could hold
  EXPECT_EQ(StreamText(response), slow_solo);
  EXPECT_EQ(server.recorder().used_blocks(), 0);
}

TEST(SseWriterTest, ClientThatTakesNothingForTheStallTimeIsGone) {
  TestServerOptions options;
  options.step_delay_s = 0.01;  // 400 tokens take ~4 s
  options.sse_writer_options.stall_seconds = 0.3;
  options.socket_send_buffer_bytes = kSmallSendBuffer;
  OpenAiTestServer server(options);
  const size_t num_finished_before = server.recorder().finishes().size();
  RawClient stalled(server.port(), /*receive_buffer_bytes=*/2048);
  stalled.Post("/v1/completions", StreamBody("Once upon a time", 400, 5).dump());
  // It never reads: once its socket is full, 0.3 s later the writer gives up and the request is
  // aborted long before its 400 tokens are done.
  std::optional<testing::FinishRecorder::Finish> finish;
  for (int i = 0; i < 5000 && !finish; ++i) {
    const auto finishes = server.recorder().finishes();
    if (finishes.size() > num_finished_before) finish = finishes.rbegin()->second;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(finish.has_value());
  EXPECT_EQ(finish->reason, FinishReason::kAbort);
  // The connection was closed: what the client finally reads has no chunked terminator.
  EXPECT_FALSE(stalled.ReadUntil("\r\n0\r\n\r\n"));
  for (int i = 0; i < 500 && server.recorder().used_blocks() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(server.recorder().used_blocks(), 0);
}

// What a streamed completion says, whatever its chunking: per choice its text, tokens and finish
// reason, then the usage chunk's usage, and whether it ended with [DONE].
json StreamSummary(const std::string& response) {
  json summary = {{"choices", json::object()}, {"usage", nullptr}, {"done", false}};
  for (const std::string& e : testing::SseEvents(testing::ChunkedBody(response))) {
    if (e == "[DONE]") {
      summary["done"] = true;
      continue;
    }
    const json chunk = json::parse(e);
    if (chunk.contains("usage") && chunk["choices"].empty()) summary["usage"] = chunk["usage"];
    for (const json& c : chunk["choices"]) {
      json& s = summary["choices"][std::to_string(c["index"].get<int>())];
      if (s.is_null()) s = {{"text", ""}, {"tokens", json::array()}, {"finish_reason", nullptr}};
      s["text"] = s["text"].get<std::string>() + c["text"].get<std::string>();
      for (const json& t : c["logprobs"]["tokens"]) s["tokens"].push_back(t);
      if (!c["finish_reason"].is_null()) s["finish_reason"] = c["finish_reason"];
    }
  }
  return summary;
}

TEST(SseWriterTest, WriterAndWorkerWriteTheSameStream) {
  json body = StreamBody("Lily wanted", 40, 2);
  body["n"] = 2;
  body["temperature"] = 0.8;
  body["seed"] = 7;
  std::vector<json> summaries;
  for (const int writers : {1, 0}) {
    TestServerOptions options;
    options.sse_writer_threads = writers;
    OpenAiTestServer server(options);
    RawClient client(server.port());
    client.Post("/v1/completions", body.dump());
    summaries.push_back(StreamSummary(ReadWholeStream(client)));
  }
  const json& s = summaries[0];
  ASSERT_EQ(s["choices"].size(), 2u) << s.dump();
  EXPECT_EQ(s["choices"]["0"]["tokens"].size(), 40u);
  EXPECT_EQ(s["choices"]["1"]["finish_reason"], "length");
  EXPECT_EQ(s["usage"]["completion_tokens"], 80);
  EXPECT_TRUE(s["done"]);
  EXPECT_EQ(summaries[0], summaries[1]);
}

TEST(SseWriterTest, TwoWriterThreadsShareTheStreams) {
  TestServerOptions options;
  options.sse_writer_threads = 2;
  OpenAiTestServer server(options);
  constexpr int kStreams = 24;
  std::vector<std::string> solo(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    solo[i] = SoloText(server, StreamBody("Once upon a time " + std::to_string(i), 24, 0));
  }
  std::vector<std::string> streamed(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      RawClient client(server.port());
      client.Post("/v1/completions",
                  StreamBody("Once upon a time " + std::to_string(i), 24, 0).dump());
      client.ReadUntil("\r\n0\r\n\r\n");
      streamed[i] = StreamText(client.received());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(streamed[i], solo[i]) << "stream " << i;
}

}  // namespace
}  // namespace tinyserve
