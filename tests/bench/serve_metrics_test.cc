// The pure parts of the load generator (bench/serve): numpy-compatible percentiles, the vLLM
// metric definitions over hand-built records, SSE splitting, chunk recording, Prometheus text
// parsing and diffs, target URLs, datasets and arrival schedules.
#include "bench/serve/serve_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "bench/serve/arrivals.h"
#include "bench/serve/dataset.h"
#include "bench/serve/result_json.h"
#include "bench/serve/server_metrics.h"
#include "bench/serve/stream_client.h"
#include "bench/serve/stream_record.h"

namespace tinyserve::bench {
namespace {

TEST(PercentileTest, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], p): 50 -> 2.5, 0 -> 1, 100 -> 4, 25 -> 1.75.
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_EQ(Percentile(v, 50), 2.5);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile(v, 100), 4);
  EXPECT_EQ(Percentile(v, 25), 1.75);
  // numpy.percentile([10, 20], 99) == 19.9 (idx 0.99).
  EXPECT_DOUBLE_EQ(Percentile({10, 20}, 99), 19.9);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({}, 99), 0);
}

RequestRecord Record(double start, std::vector<double> chunks, double end, int out,
                     bool ok = true) {
  RequestRecord r;
  r.success = ok;
  r.start_s = start;
  r.chunk_s = std::move(chunks);
  r.end_s = end;
  r.output_len = out;
  r.prompt_len = 10;
  return r;
}

TEST(SummarizeTest, VllmDefinitionsOnHandBuiltRecords) {
  // Request A: sent at 0, chunks at 0.5, 0.75, 1.0, 1.5 carrying 5 tokens, stream ends at 1.625.
  //   TTFT 500 ms, TPOT (1.5 - 0.5) / 4 = 250 ms, ITLs 250, 250, 500, E2EL 1625 ms.
  // Request B: sent at 1, one chunk at 1.25 (1 token), ends 1.5: TTFT 250, no TPOT, no ITL.
  // Request C failed: excluded from every statistic, counted as failed.
  std::vector<RequestRecord> records = {Record(0, {0.5, 0.75, 1.0, 1.5}, 1.625, 5),
                                        Record(1, {1.25}, 1.5, 1), Record(1, {}, 1.25, 0, false)};
  const BenchSummary s = Summarize(records, 2.0, {50, 99});
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input_tokens, 20);
  EXPECT_EQ(s.total_output_tokens, 6);
  EXPECT_EQ(s.request_throughput, 1.0);
  EXPECT_EQ(s.output_throughput, 3.0);
  EXPECT_EQ(s.total_token_throughput, 13.0);
  EXPECT_EQ(s.ttft.mean_ms, 375.0);
  EXPECT_EQ(s.ttft.median_ms, 375.0);
  EXPECT_EQ(s.ttft.std_ms, 125.0);
  EXPECT_DOUBLE_EQ(s.ttft.PercentileMs(99), 250.0 + 250.0 * 0.99);
  EXPECT_EQ(s.tpot.mean_ms, 250.0);
  EXPECT_EQ(s.itl.mean_ms, 1000.0 / 3.0);
  EXPECT_EQ(s.itl.median_ms, 250.0);
  EXPECT_EQ(s.e2el.mean_ms, (1625.0 + 500.0) / 2);
  EXPECT_EQ(s.peak_concurrent_requests, 3);  // A, B and C overlap in [1, 1.25)
  // 1-second buckets: A's 4 chunks carry 1.25 tokens each, 2 in [0, 1) and 2 in [1, 2); B's one
  // token is in [1, 2).
  const std::vector<double> tput = OutputThroughputOverTime(records, 0.0, 2.0, 1.0);
  ASSERT_EQ(tput.size(), 2u);
  EXPECT_EQ(tput[0], 2.5);
  EXPECT_EQ(tput[1], 3.5);
  EXPECT_EQ(s.peak_output_throughput, 3.5);
  // A run of 1.5 s: the second bucket is half a second wide.
  EXPECT_EQ(OutputThroughputOverTime(records, 0.0, 1.5, 1.0)[1], 7.0);
}

TEST(SummarizeTest, GoodputCountsRequestsMeetingEverySlo) {
  // A: TTFT 500 ms, TPOT 250 ms, E2EL 1625 ms. B: TTFT 250 ms, one token (TPOT 0 for goodput),
  // E2EL 500 ms. C failed (never good).
  std::vector<RequestRecord> records = {Record(0, {0.5, 0.75, 1.0, 1.5}, 1.625, 5),
                                        Record(1, {1.25}, 1.5, 1), Record(1, {}, 1.25, 0, false)};
  EXPECT_FALSE(Summarize(records, 2.0, {99}).request_goodput.has_value());  // no SLOs: null
  struct Case {
    std::vector<std::string> slos;
    int good;
  };
  const Case cases[] = {
      {{"ttft:500"}, 2},    // <= is good (vLLM: slo >= value)
      {{"ttft:499.9"}, 1},  // only B
      {{"tpot:0"}, 1},      // B's TPOT counts as 0
      {{"tpot:250", "e2el:1625"}, 2},
      {{"ttft:1000", "e2el:1000"}, 1},
      {{"e2el:100"}, 0},
  };
  for (const Case& c : cases) {
    const auto slos = ParseGoodput(c.slos);
    ASSERT_TRUE(slos.ok()) << slos.status().message();
    const BenchSummary s = Summarize(records, 2.0, {99}, *slos);
    EXPECT_EQ(s.good_completed, c.good) << c.slos[0];
    ASSERT_TRUE(s.request_goodput.has_value());
    EXPECT_EQ(*s.request_goodput, c.good / 2.0) << c.slos[0];
  }
}

TEST(GoodputTest, ParsesVllmPairsAndRejectsBadOnes) {
  const auto slos = ParseGoodput({"ttft:200", "tpot:12.5", "e2el:3000"});
  ASSERT_TRUE(slos.ok());
  EXPECT_EQ(*slos->ttft_s, 0.2);
  EXPECT_EQ(*slos->tpot_s, 0.0125);
  EXPECT_EQ(*slos->e2el_s, 3.0);
  EXPECT_FALSE(ParseGoodput({}).value().any());
  for (const auto& [pair, message] : std::vector<std::pair<std::string, std::string>>{
           {"ttft", "invalid format 'ttft'"},
           {"ttft:abc", "invalid format"},
           {"ttft:1:2", "invalid format"},
           {"itl:10", "invalid metric name in 'itl:10'"},
           {"ttft:-1",
            "invalid value in 'ttft:-1': the service level objective must be non-negative"}}) {
    const auto bad = ParseGoodput({pair});
    ASSERT_FALSE(bad.ok()) << pair;
    EXPECT_NE(bad.status().message().find("--goodput: " + message), std::string::npos)
        << bad.status().message();
  }
}

TEST(PercentileMetricsTest, ParsesTheKnownNames) {
  EXPECT_EQ(ParsePercentileMetrics("ttft,tpot,itl").value(),
            (std::vector<std::string>{"ttft", "tpot", "itl"}));
  EXPECT_EQ(ParsePercentileMetrics("e2el").value(), std::vector<std::string>{"e2el"});
  for (const char* bad : {"", "ttft,", "ttft,latency", "client_queue_time"}) {
    const auto r = ParsePercentileMetrics(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--percentile-metrics: unknown or unsupported metric"),
              std::string::npos);
  }
}

TEST(ResultJsonTest, VllmKeysAndOnlyTheSelectedPercentileMetrics) {
  RunResult result;
  result.records = {Record(0, {0.5, 0.75, 1.0, 1.5}, 1.625, 5), Record(1, {1.25}, 1.5, 1)};
  result.start_s = 0;
  result.end_s = 2;
  RunDescription run;
  run.backend = "openai";
  run.percentiles = {50, 99.9};
  run.percentile_metrics = {"ttft", "e2el"};
  const BenchSummary s =
      Summarize(result.records, 2.0, run.percentiles, ParseGoodput({"ttft:400"}).value());
  const nlohmann::ordered_json j = ResultJson(run, result, s, std::nullopt);
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  const std::vector<std::string> head(keys.begin(), keys.begin() + 4);
  EXPECT_EQ(head, (std::vector<std::string>{"date", "endpoint_type", "backend", "label"}));
  EXPECT_EQ(j["label"], nullptr);
  EXPECT_EQ(j["request_goodput"], 0.5);  // B alone meets TTFT <= 400 ms
  EXPECT_EQ(j["latencies"], nlohmann::ordered_json({1.625, 0.5}));
  EXPECT_EQ(j["start_times"], nlohmann::ordered_json({0.0, 1.0}));
  EXPECT_EQ(j["rtfx"], 0.0);
  for (const char* key : {"mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms",
                          "p99.9_ttft_ms", "mean_e2el_ms", "p99.9_e2el_ms"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"mean_tpot_ms", "p99.9_itl_ms", "median_itl_ms"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["p50_e2el_ms"], (1625.0 + 500.0) / 2);
}

TEST(SummarizeTest, EmptyRunGivesZeros) {
  const BenchSummary s = Summarize({}, 0.0, {99});
  EXPECT_EQ(s.completed, 0);
  EXPECT_EQ(s.ttft.mean_ms, 0);
  EXPECT_EQ(s.itl.PercentileMs(99), 0);
}

TEST(SseParserTest, SplitsEventsAcrossArbitraryReads) {
  const std::string stream =
      ": ping\n\ndata: {\"a\":1}\n\ndata: two\r\ndata: lines\r\n\r\nevent: x\ndata: [DONE]\n\n";
  for (size_t step : {size_t{1}, size_t{3}, size_t{7}, stream.size()}) {
    SseParser parser;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += step) {
      parser.Feed(std::string_view(stream).substr(i, step), [&](std::string_view d) {
        got.emplace_back(d);
        return true;
      });
    }
    EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "two\nlines", "[DONE]"})) << step;
  }
}

TEST(StreamRecorderTest, CountsContentChunksAndTakesUsage) {
  FakeClock clock(5.0);
  RequestRecord r;
  StreamRecorder rec(&r, &clock);
  // Chat role chunk (no content): not a content chunk.
  EXPECT_TRUE(
      rec.OnPayload(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"));
  clock.Set(6.0);
  EXPECT_TRUE(rec.OnPayload(R"({"choices":[{"index":0,"delta":{"content":"Hi"}}]})"));
  clock.Set(6.5);
  EXPECT_TRUE(rec.OnPayload(R"({"choices":[{"index":0,"text":" there"}]})"));
  EXPECT_TRUE(rec.OnPayload(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})"));
  EXPECT_TRUE(rec.OnPayload(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}})"));
  clock.Set(7.0);
  EXPECT_FALSE(rec.OnPayload("[DONE]"));
  EXPECT_TRUE(rec.done());
  EXPECT_EQ(r.chunk_s, (std::vector<double>{6.0, 6.5}));
  EXPECT_EQ(r.generated_text, "Hi there");
  EXPECT_EQ(r.output_len, 3);
  EXPECT_EQ(r.prompt_len, 7);
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.end_s, 7.0);
  EXPECT_TRUE(r.error.empty());
}

TEST(StreamRecorderTest, ErrorObjectAndGarbageEndTheStream) {
  FakeClock clock;
  RequestRecord a;
  StreamRecorder ra(&a, &clock);
  EXPECT_FALSE(ra.OnPayload(R"({"error":{"message":"boom","type":"InternalServerError"}})"));
  EXPECT_NE(a.error.find("boom"), std::string::npos);
  RequestRecord b;
  StreamRecorder rb(&b, &clock);
  EXPECT_FALSE(rb.OnPayload("not json"));
  EXPECT_NE(b.error.find("malformed"), std::string::npos);
}

TEST(PrometheusTextTest, SumsSeriesPerNameAndDiffs) {
  const std::string before =
      "# HELP x\n# TYPE vllm:num_preemptions_total counter\n"
      "vllm:num_preemptions_total{model_name=\"m\",engine=\"0\"} 2\n"
      "vllm:time_to_first_token_seconds_sum{model_name=\"a}b\",engine=\"0\"} 1.5\n"
      "vllm:time_to_first_token_seconds_count{model_name=\"m\",engine=\"0\"} 3\n"
      "vllm:request_success_total{finished_reason=\"stop\"} 1\n"
      "vllm:request_success_total{finished_reason=\"length\"} 2\n"
      "garbage line\n";
  const MetricTotals b = ParsePrometheusText(before);
  EXPECT_EQ(b.at("vllm:num_preemptions_total"), 2);
  EXPECT_EQ(b.at("vllm:time_to_first_token_seconds_sum"), 1.5);
  EXPECT_EQ(b.at("vllm:request_success_total"), 3);
  EXPECT_EQ(b.count("garbage"), 0u);
  MetricTotals a = b;
  a["vllm:num_preemptions_total"] = 7;
  a["vllm:time_to_first_token_seconds_sum"] = 2.5;
  a["vllm:time_to_first_token_seconds_count"] = 7;
  const ServerView v = DiffMetrics(b, a);
  EXPECT_EQ(v.preemptions, 5);
  ASSERT_TRUE(v.mean_ttft_ms.has_value());
  EXPECT_EQ(*v.mean_ttft_ms, 250.0);  // 1 s over 4 samples
  EXPECT_EQ(v.ttft_count, 4);
  EXPECT_FALSE(v.mean_e2el_ms.has_value());  // no samples in the run
}

TEST(TargetTest, ParsesBaseUrlsAndRejectsOthers) {
  auto t = ParseTarget("http://example.com:8080/prefix/", "/v1/chat/completions");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "example.com");
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->path, "/prefix/v1/chat/completions");
  EXPECT_TRUE(t->is_chat);
  auto d = ParseTarget("http://localhost", "/v1/completions");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->port, 80);
  EXPECT_FALSE(ParseTarget("https://x", "/v1/completions").ok());
  EXPECT_FALSE(ParseTarget("http://x:abc", "/v1/completions").ok());
  EXPECT_FALSE(ParseTarget("http://x", "/v1/embeddings").ok());
  BenchPrompt ids;
  ids.token_ids = {5, 6};
  ids.output_len = 3;
  EXPECT_FALSE(BuildRequestBody(*t, "m", ids, false).ok());  // chat needs text
  auto body = BuildRequestBody(*d, "m", ids, true);
  ASSERT_TRUE(body.ok());
  // No temperature unless asked (vLLM bench no longer forces greedy decoding).
  EXPECT_EQ(*body, R"({"ignore_eos":true,"max_tokens":3,"model":"m","prompt":[5,6],"stream":true,)"
                   R"("stream_options":{"include_usage":true}})");
  SamplingOverrides sampling;
  sampling.temperature = 0.0;
  sampling.top_k = 5;
  sampling.repetition_penalty = 1.1;
  body = BuildRequestBody(*d, "m", ids, false, sampling);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body, R"({"max_tokens":3,"model":"m","prompt":[5,6],"repetition_penalty":1.1,)"
                   R"("stream":true,"stream_options":{"include_usage":true},"temperature":0.0,)"
                   R"("top_k":5})");
}

TEST(DatasetTest, RandomPromptsHaveSeededLengthsInRangeAndASharedPrefix) {
  RandomDatasetOptions o;
  o.num_prompts = 200;
  o.input_len = 20;
  o.output_len = 10;
  o.range_ratio = 0.5;
  o.prefix_len = 4;
  o.as_token_ids = true;
  o.vocab_size = 50;
  o.seed = 7;
  auto a = MakeRandomDataset(o);
  auto b = MakeRandomDataset(o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 200u);
  for (size_t i = 0; i < a->size(); ++i) {
    const BenchPrompt& p = (*a)[i];
    EXPECT_EQ(p.token_ids, (*b)[i].token_ids);
    EXPECT_EQ(p.prompt_len, static_cast<int>(p.token_ids.size()));
    EXPECT_GE(p.prompt_len, 4 + 10);
    EXPECT_LE(p.prompt_len, 4 + 30);
    EXPECT_GE(p.output_len, 5);
    EXPECT_LE(p.output_len, 15);
    EXPECT_TRUE(
        std::equal(p.token_ids.begin(), p.token_ids.begin() + 4, (*a)[0].token_ids.begin()));
    for (int32_t id : p.token_ids) {
      EXPECT_GE(id, kFirstRandomTokenId);
      EXPECT_LT(id, 50);
    }
  }
  o.as_token_ids = false;
  auto text = MakeRandomDataset(o);
  ASSERT_TRUE(text.ok());
  const BenchPrompt& p = (*text)[0];
  EXPECT_TRUE(p.token_ids.empty());
  EXPECT_EQ(std::count(p.text.begin(), p.text.end(), ' ') + 1, p.prompt_len);  // a word each
  o.vocab_size = 0;
  o.as_token_ids = true;
  EXPECT_FALSE(MakeRandomDataset(o).ok());
  o.as_token_ids = false;
  o.range_ratio = 1.0;
  EXPECT_FALSE(MakeRandomDataset(o).ok());
}

TEST(DatasetTest, JsonlConversationsAndErrors) {
  const std::string path = ::testing::TempDir() + "/bench_dataset_test.jsonl";
  {
    std::ofstream out(path);
    out << R"({"conversations":[{"from":"human","value":"Tell me a story"},)"
           R"({"from":"gpt","value":"one two three four five six seven eight nine ten"}]})"
        << "\n\n"
        << R"({"conversations":[{"from":"gpt","value":"no user turn"}]})"
        << "\n"
        << R"({"messages":[{"role":"user","content":"Hi"}]})"
        << "\n"
        << R"({"prompt":"Plain","output_len":9})"
        << "\n";
  }
  auto d = LoadJsonlDataset(path, 5, 0);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d->size(), 5u);
  EXPECT_EQ((*d)[0].text, "Tell me a story");
  EXPECT_EQ((*d)[0].output_len, 13);  // ceil(1.3 * 10 words)
  EXPECT_EQ((*d)[1].text, "Hi");
  EXPECT_EQ((*d)[1].output_len, 1);  // no reply: the minimum
  EXPECT_EQ((*d)[2].text, "Plain");
  EXPECT_EQ((*d)[2].output_len, 9);
  EXPECT_EQ((*d)[3].text, "Tell me a story");  // starts over
  auto fixed = LoadJsonlDataset(path, 2, 32);
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ((*fixed)[1].output_len, 32);
  {
    std::ofstream out(path, std::ios::app);
    out << "{broken\n";
  }
  auto bad = LoadJsonlDataset(path, 5, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":6"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(LoadJsonlDataset(path + ".missing", 5, 0).ok());
  std::filesystem::remove(path);
}

TEST(ArrivalsTest, InfiniteRateSendsAllAtOnce) {
  auto a = ArrivalOffsets(5, INFINITY, 1.0, 0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, std::vector<double>(5, 0.0));
  EXPECT_FALSE(ArrivalOffsets(5, 0.0, 1.0, 0).ok());
  EXPECT_FALSE(ArrivalOffsets(5, 2.0, 0.0, 0).ok());
}

// Gaps of a seeded schedule: deterministic for the seed, mean 1/rate and coefficient of variation
// 1/sqrt(burstiness) within 5% (20,000 gaps: the mean's relative standard error is 0.7% for
// Poisson, so 5% is > 7 standard errors; the CV's is about 1%).
TEST(ArrivalsTest, PoissonAndGammaHaveTheRightMeanRateAndSpread) {
  constexpr int kN = 20001;
  for (double burstiness : {1.0, 0.25, 4.0}) {
    auto a = ArrivalOffsets(kN, 5.0, burstiness, 42);
    auto b = ArrivalOffsets(kN, 5.0, burstiness, 42);
    auto c = ArrivalOffsets(kN, 5.0, burstiness, 43);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(*a, *b);
    EXPECT_NE(*a, *c);
    EXPECT_EQ((*a)[0], 0.0);
    std::vector<double> gaps;
    for (size_t i = 1; i < a->size(); ++i) gaps.push_back((*a)[i] - (*a)[i - 1]);
    const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
    double var = 0;
    for (double g : gaps) var += (g - mean) * (g - mean);
    const double cv = std::sqrt(var / gaps.size()) / mean;
    EXPECT_NEAR(1.0 / mean, 5.0, 5.0 * 0.05) << burstiness;
    EXPECT_NEAR(cv, 1.0 / std::sqrt(burstiness), 0.05 / std::sqrt(burstiness)) << burstiness;
  }
}

}  // namespace
}  // namespace tinyserve::bench
