// TraceWriter: the file parses as JSON, has one track per request, and its spans agree with the
// phase histograms (same engine run, both observers attached).
#include "metrics/trace_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "engine/engine_core.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"
#include "tests/metrics/metrics_test_util.h"

namespace tinyserve::testing {
namespace {

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());  // throws (fails the test) if invalid
}

// A trace file in gtest's temporary folder, removed when the test ends (nothing left in /tmp).
struct ScopedTracePath {
  explicit ScopedTracePath(const std::string& name)
      : path(::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name) {}
  ~ScopedTracePath() { std::remove(path.c_str()); }
  ScopedTracePath(const ScopedTracePath&) = delete;
  ScopedTracePath& operator=(const ScopedTracePath&) = delete;
  const std::string path;
};

TEST(TraceWriterTest, SpansAgreeWithHistogramSums) {
  const ScopedTracePath trace_file("tinyserve_trace_test.json");
  const std::string& path = trace_file.path;
  FakeClock clock;
  FakeExecutor executor(/*num_blocks=*/6, /*block_size=*/2, /*vocab=*/32, /*max_model_len=*/256,
                        &clock, 1.0);
  EngineConfig config;
  config.max_num_batched_tokens = 64;
  PrometheusMetrics metrics(TestMetricsConfig());
  MetricsObserver observer(&metrics);
  auto writer = TraceWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EngineCore core(config, &executor, &clock);  // after its observers: it reports to them to its end
  core.AddObserver(&observer);
  core.AddObserver(writer->get());
  // The EngineCoreTest.RequestPreemptedTwiceDuringDecode scenario, plus a request aborted while
  // waiting and one whose id needs escaping.
  ASSERT_TRUE(core.Submit(MakeEngineRequest("a", Prompt(3, 1), 100)).ok());
  ASSERT_TRUE(core.Submit(MakeEngineRequest("c", Prompt(1, 2), 3)).ok());
  ASSERT_TRUE(core.Submit(MakeEngineRequest("b", Prompt(3, 3), 8)).ok());
  ASSERT_TRUE(core.Submit(MakeEngineRequest("quote\"d", Prompt(9, 4), 2)).ok());
  core.Step();
  core.Step();
  core.Abort("quote\"d");
  for (int i = 0; i < 1000 && core.HasPendingWork(); ++i) core.Step();
  ASSERT_TRUE((*writer)->Close().ok());
  ASSERT_TRUE((*writer)->Close().ok());  // idempotent

  const nlohmann::json trace = ReadJson(path);
  ASSERT_TRUE(trace.is_array());
  std::map<std::string, double> span_sum;  // seconds
  std::map<std::string, int> span_count;
  std::map<int64_t, std::string> track_names;
  std::set<int64_t> tracks_with_spans;
  int num_finished = 0, num_counters = 0;
  for (const auto& e : trace) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "thread_name") {
      track_names[e.at("tid").get<int64_t>()] = e.at("args").at("name");
    } else if (ph == "X") {
      span_sum[e.at("name")] += e.at("dur").get<double>() / 1e6;
      ++span_count[e.at("name")];
      tracks_with_spans.insert(e.at("tid").get<int64_t>());
    } else if (ph == "i") {
      ++num_finished;
    } else if (ph == "C") {
      ++num_counters;
    }
  }
  EXPECT_EQ(track_names.size(), 4u);
  std::set<std::string> names;
  for (const auto& [tid, name] : track_names) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"a", "b", "c", "quote\"d"}));
  EXPECT_EQ(tracks_with_spans.size(), 4u);
  EXPECT_EQ(num_finished, 4);
  EXPECT_GT(num_counters, 0);

  EXPECT_EQ(span_sum["queued"], Read(metrics.queue_time).sum);
  EXPECT_EQ(span_count["queued"], static_cast<int>(Read(metrics.queue_time).count));
  EXPECT_EQ(span_sum["prefill"], Read(metrics.prefill_time).sum);
  EXPECT_EQ(span_count["prefill"], static_cast<int>(Read(metrics.prefill_time).count));
  EXPECT_EQ(span_sum["decode"], Read(metrics.decode_time).sum);
  EXPECT_EQ(span_count["decode"], static_cast<int>(Read(metrics.decode_time).count));
  EXPECT_EQ(span_count["preempted"], 2);
  EXPECT_EQ(metrics.num_preemptions.Value(), 2.0);
  // b was preempted at 2 (back at 3) and at 4 (back at 9): 1 s + 5 s.
  EXPECT_EQ(span_sum["preempted"], 6.0);
  EXPECT_EQ(span_count["queued (unfinished)"] + span_count["prefill (unfinished)"], 1);
}

TEST(TraceWriterTest, ValidJsonWithNoRequests) {
  const ScopedTracePath trace_file("tinyserve_trace_empty.json");
  const std::string& path = trace_file.path;
  {
    auto writer = TraceWriter::Open(path);
    ASSERT_TRUE(writer.ok());
  }  // the destructor closes
  const nlohmann::json trace = ReadJson(path);
  ASSERT_TRUE(trace.is_array());
  EXPECT_EQ(trace.size(), 2u);  // the two process names
}

TEST(TraceWriterTest, OpenFailsOnABadPath) {
  EXPECT_FALSE(TraceWriter::Open("/nonexistent-dir/trace.json").ok());
}

// Aborted while preempted: the preempted span ends at the finish.
TEST(TraceWriterTest, PreemptedSpanEndsAtTheFinish) {
  const ScopedTracePath trace_file("tinyserve_trace_abort.json");
  const std::string& path = trace_file.path;
  auto writer = TraceWriter::Open(path);
  ASSERT_TRUE(writer.ok());
  SyntheticEngine engine(writer->get());
  SyntheticRequest* r = engine.NewRequest("r", 0.0);
  engine.Queued(r, 0.0);
  engine.Scheduled(r, 1.0);
  engine.Preempted(r, 2.0);
  engine.Step(2.0, 0, 1);
  engine.Finished(r, 3.5, FinishReason::kAbort);
  ASSERT_TRUE((*writer)->Close().ok());
  std::map<std::string, double> spans;
  for (const auto& e : ReadJson(path)) {
    if (e.at("ph") == "X") spans[e.at("name")] = e.at("dur").get<double>();
    if (e.at("ph") == "i") {
      EXPECT_EQ(e.at("args").at("reason"), "abort");
    }
  }
  EXPECT_EQ(spans, (std::map<std::string, double>{
                       {"queued", 1e6}, {"preempted", 1.5e6}, {"prefill (unfinished)", 2.5e6}}));
}

}  // namespace
}  // namespace tinyserve::testing
