// Admission limits in vLLM's spelling (--max-num-queued-reqs, --max-num-queued-tokens): the 503
// shape, vllm:admission_rejections_total{reason}, and that a burst over the limit loses nothing
// it admitted; and the per-request `metrics` object (--enable-per-request-metrics) in responses,
// equal to what the histograms observed for the request.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/metrics/metrics_test_util.h"
#include "tests/server/openai_test_server.h"

namespace tinyserve::testing {
namespace {

using nlohmann::json;

double Rejections(const OpenAiTestServer& server, AdmissionRejection reason) {
  return server.metrics()->admission_rejections[static_cast<int>(reason)]->Value();
}

void Expect503(const httplib::Result& res, const std::string& flag) {
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const json body = json::parse(res->body);
  const json& e = body.at("error");
  EXPECT_EQ(e.at("code"), 503);
  EXPECT_EQ(e.at("type"), "ServiceUnavailableError");
  EXPECT_TRUE(e.at("param").is_null());
  EXPECT_NE(e.at("message").get<std::string>().find(flag), std::string::npos) << e;
}

template <typename Pred>
bool WaitFor(Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

TEST(OpenAiAdmissionTest, QueuedTokensLimitIs503AndCounted) {
  const std::vector<int32_t> ids = Stories260K().tokenizer->Encode("Once upon a time", true);
  ASSERT_GT(ids.size(), 1u);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Once upon a time, far away"}}}}};
  int64_t chat_tokens = 0;
  {
    OpenAiTestServer probe;
    auto t = probe.Post("/tokenize", chat);
    ASSERT_TRUE(t);
    chat_tokens = json::parse(t->body)["count"].get<int64_t>();
  }
  ASSERT_GT(chat_tokens, static_cast<int64_t>(ids.size()));
  TestServerOptions options;
  options.with_metrics = true;
  options.start_engine = false;  // nothing gets a first token: prompt tokens stay queued
  // Room for either request alone (a larger one is a 400, never admitted), not beside the chat.
  options.max_num_queued_tokens = chat_tokens + static_cast<int64_t>(ids.size()) - 1;
  OpenAiTestServer s(options);
  const json one = {{"prompt", "Once upon a time"}, {"max_tokens", 2}};
  auto first = std::async(std::launch::async, [&] { return s.Post("/v1/chat/completions", chat); });
  ASSERT_TRUE(WaitFor([&] { return s.num_waiting() == 1; }));
  Expect503(s.Post("/v1/completions", one), "--max-num-queued-tokens");
  Expect503(s.Post("/v1/chat/completions", chat), "--max-num-queued-tokens");
  EXPECT_EQ(Rejections(s, AdmissionRejection::kMaxNumQueuedTokens), 2.0);
  EXPECT_EQ(Rejections(s, AdmissionRejection::kMaxNumQueuedReqs), 0.0);
  s.engine().Start();
  auto res = first.get();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(s.num_waiting(), 0);
  // The prompt's tokens left the count with its first token: the next request is admitted.
  auto after = s.Post("/v1/completions", one);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

TEST(OpenAiAdmissionTest, BurstOverTheRequestLimitLosesNothingItAdmitted) {
  TestServerOptions options;
  options.with_metrics = true;
  options.max_queue_len = 4;  // --max-num-queued-reqs 4
  options.start_engine = false;
  options.num_threads = 24;
  OpenAiTestServer server(options);
  constexpr int kClients = 12;
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"ignore_eos", true}};
  std::vector<std::future<httplib::Result>> results;
  for (int i = 0; i < kClients; ++i) {
    results.push_back(
        std::async(std::launch::async, [&] { return server.Post("/v1/completions", body); }));
  }
  // Every client is either admitted (waiting, the engine is stopped) or refused.
  ASSERT_TRUE(WaitFor([&] {
    return server.num_waiting() + Rejections(server, AdmissionRejection::kMaxNumQueuedReqs) ==
           kClients;
  }));
  EXPECT_EQ(server.num_waiting(), 4);
  server.engine().Start();
  int ok = 0, refused = 0;
  for (auto& f : results) {
    httplib::Result res = f.get();
    ASSERT_TRUE(res);
    if (res->status == 503) {
      Expect503(res, "--max-num-queued-reqs 4");
      ++refused;
      continue;
    }
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    EXPECT_EQ(j["usage"]["completion_tokens"], 5);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    ++ok;
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(refused, kClients - 4);
  EXPECT_EQ(Rejections(server, AdmissionRejection::kMaxNumQueuedReqs), kClients - 4);
  const PrometheusMetrics& m = *server.metrics();
  EXPECT_EQ(m.request_success[FinishReasonIndex(FinishReason::kLength)]->Value(), 4.0);
  EXPECT_EQ(m.generation_tokens.Value(), 4 * 5.0);
  EXPECT_EQ(server.num_waiting(), 0);
  EXPECT_EQ(server.http().num_in_flight(), 0);
  // An n over the limit could never fit: 400, not counted as a rejection.
  auto too_many = server.Post("/v1/completions", {{"prompt", "a"}, {"n", 5}});
  ASSERT_TRUE(too_many);
  EXPECT_EQ(too_many->status, 400);
  EXPECT_EQ(Rejections(server, AdmissionRejection::kMaxNumQueuedReqs), kClients - 4);
}

TEST(OpenAiPerRequestMetricsTest, ResponseCarriesTheHistogramsNumbers) {
  TestServerOptions options;
  options.with_metrics = true;
  options.enable_per_request_metrics = true;
  OpenAiTestServer server(options);
  auto res = server.Post("/v1/completions",
                         {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"ignore_eos", true}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  const json& m = body.at("metrics");
  const std::vector<std::string> keys = {
      "time_to_first_token_ms", "generation_time_ms",   "queue_time_ms",  "mean_itl_ms",
      "tokens_per_second",      "prefill_time_ms",      "decode_time_ms", "num_preemptions",
      "recomputed_tokens",      "cached_prompt_tokens", "finished_reason"};
  std::vector<std::string> got;  // in the order sent (vLLM's five first)
  const nlohmann::ordered_json in_order = nlohmann::ordered_json::parse(res->body).at("metrics");
  for (auto it = in_order.begin(); it != in_order.end(); ++it) got.push_back(it.key());
  EXPECT_EQ(got, keys);
  const PrometheusMetrics& pm = *server.metrics();
  EXPECT_EQ(m["time_to_first_token_ms"].get<double>(), Read(pm.time_to_first_token).sum * 1000.0);
  EXPECT_EQ(m["generation_time_ms"].get<double>(), Read(pm.decode_time).sum * 1000.0);
  EXPECT_EQ(m["queue_time_ms"].get<double>(), Read(pm.queue_time).sum * 1000.0);
  EXPECT_EQ(m["prefill_time_ms"].get<double>(), Read(pm.prefill_time).sum * 1000.0);
  EXPECT_EQ(m["mean_itl_ms"].get<double>(), Read(pm.time_per_output_token).sum * 1000.0);
  EXPECT_EQ(m["decode_time_ms"], m["generation_time_ms"]);
  EXPECT_EQ(m["tokens_per_second"].get<double>(), 6 / Read(pm.inference_time).sum);
  EXPECT_EQ(m["num_preemptions"], 0);
  EXPECT_EQ(m["recomputed_tokens"], 0);
  EXPECT_EQ(m["cached_prompt_tokens"], 0);
  EXPECT_EQ(m["finished_reason"], "length");

  // Streaming: in the usage chunk (the last before [DONE]) only.
  auto stream =
      server.Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                           {"max_tokens", 3},
                                           {"ignore_eos", true},  // seedless sampling: no early EOS
                                           {"stream", true},
                                           {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(stream);
  const std::vector<std::string> events = SseEvents(stream->body);
  ASSERT_GE(events.size(), 3u);
  ASSERT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    EXPECT_FALSE(json::parse(events[i]).contains("metrics")) << events[i];
  }
  const json usage_chunk = json::parse(events[events.size() - 2]);
  ASSERT_TRUE(usage_chunk.contains("usage"));
  EXPECT_TRUE(usage_chunk["metrics"]["time_to_first_token_ms"].is_number());
  EXPECT_EQ(usage_chunk["metrics"]["finished_reason"], "length");

  // n > 1: no single request's timing is the response's (vLLM): null.
  auto two = server.Post("/v1/completions", {{"prompt", "a"}, {"n", 2}, {"max_tokens", 2}});
  ASSERT_TRUE(two);
  ASSERT_EQ(two->status, 200);
  EXPECT_TRUE(json::parse(two->body).at("metrics").is_null());
}

TEST(OpenAiPerRequestMetricsTest, OffByDefault) {
  OpenAiTestServer server;
  auto res = server.Post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 2}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_FALSE(json::parse(res->body).contains("metrics"));
}

TEST(OpenAiPerRequestMetricsTest, StopStringResponseWaitsForTheEngineFinish) {
  TestServerOptions options;
  options.with_metrics = true;
  options.enable_per_request_metrics = true;
  OpenAiTestServer server(options);
  // " " ends the text at its first space. The frontend then aborts the engine request with reason
  // stop, but the engine may have run to max_tokens first (30 tokens of stories260K take a few
  // milliseconds): either way the response waits for the engine's finish, and `finished_reason` is
  // the engine's, the one request_success counted, while the choice says stop.
  auto res = server.Post(
      "/v1/completions",
      {{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"ignore_eos", true}, {"stop", " "}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  const json& m = body.at("metrics");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  const auto& success = server.metrics()->request_success;
  double stops = 0, lengths = 0;
  // An aborted request's finish can reach its stream an instant before the observer counts it
  // (seen under load): wait for the count, bounded.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    stops = success[FinishReasonIndex(FinishReason::kStop)]->Value();
    lengths = success[FinishReasonIndex(FinishReason::kLength)]->Value();
    if (stops + lengths >= 1.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(stops + lengths, 1.0);
  EXPECT_EQ(m["finished_reason"], stops == 1.0 ? "stop" : "length") << m;
  EXPECT_TRUE(m["recomputed_tokens"].is_number()) << m;
  EXPECT_EQ(m["generation_time_ms"].get<double>(),
            Read(server.metrics()->decode_time).sum * 1000.0);
}

// Regression: a streamed choice ended by a stop string sent its usage chunk before the engine's
// finish, so `recomputed_tokens` and `cached_prompt_tokens` were null. The chunk now waits for
// that finish (the abort the frontend sent), as the non-streaming response does.
TEST(OpenAiPerRequestMetricsTest, StreamedStopStringUsageChunkWaitsForTheEngineFinish) {
  TestServerOptions options;
  options.with_metrics = true;
  options.enable_per_request_metrics = true;
  OpenAiTestServer server(options);
  // Longer than a block (16 tokens), so the second and third requests hit the prefix cache.
  const json request = {
      {"prompt", "Once upon a time there was a little girl named Lily. She liked to play outside."},
      {"max_tokens", 200},
      {"ignore_eos", true},
      {"stop", " "}};
  auto first = server.Post("/v1/completions", request);  // fills the cache
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  auto plain = server.Post("/v1/completions", request);
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  const json want = json::parse(plain->body).at("metrics");
  ASSERT_TRUE(want["cached_prompt_tokens"].is_number()) << want;
  EXPECT_GT(want["cached_prompt_tokens"].get<int64_t>(), 0) << want;

  json streamed = request;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  auto stream = server.Post("/v1/completions", streamed);
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->status, 200) << stream->body;
  const std::vector<std::string> events = SseEvents(stream->body);
  ASSERT_GE(events.size(), 3u);
  ASSERT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 3])["choices"][0]["finish_reason"], "stop");
  const json m = json::parse(events[events.size() - 2]).at("metrics");
  // Every field is filled, except the mean inter-token latency when the engine made one token
  // only (the stop string can end the first one, and the abort may beat a second).
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it.key() == "mean_itl_ms" && it->is_null()) {
      EXPECT_EQ(m["decode_time_ms"], 0.0) << m;
      continue;
    }
    EXPECT_FALSE(it->is_null()) << it.key() << m;
  }
  EXPECT_EQ(m["cached_prompt_tokens"], want["cached_prompt_tokens"]);
  EXPECT_EQ(m["recomputed_tokens"], want["recomputed_tokens"]);
  EXPECT_EQ(m["num_preemptions"], want["num_preemptions"]);
  const std::string reason = m["finished_reason"].get<std::string>();
  EXPECT_TRUE(reason == "stop" || reason == "length") << m;  // length: the engine got there first

  // Chat streams wait the same way.
  auto chat = server.Post("/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", request["prompt"]}}}},
                           {"max_tokens", 200},
                           {"ignore_eos", true},
                           {"stop", " "},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  const std::vector<std::string> chat_events = SseEvents(chat->body);
  ASSERT_GE(chat_events.size(), 3u);
  const json chat_m = json::parse(chat_events[chat_events.size() - 2]).at("metrics");
  EXPECT_TRUE(chat_m["cached_prompt_tokens"].is_number()) << chat_m;
  EXPECT_TRUE(chat_m["recomputed_tokens"].is_number()) << chat_m;
}

}  // namespace
}  // namespace tinyserve::testing
