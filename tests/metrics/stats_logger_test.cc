// StatsLogger: the vLLM-style line, every interval of the injected clock, only while busy.
#include "metrics/stats_logger.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tinyserve {
namespace {

SchedulerStats Step(int32_t prompt, int32_t generated, int32_t running, int32_t waiting,
                    double usage, int32_t preemptions = 0, int64_t queries = 0, int64_t hits = 0) {
  SchedulerStats s;
  s.num_prompt_tokens = prompt;
  s.num_generation_tokens = generated;
  s.num_running = running;
  s.num_waiting = waiting;
  s.kv_cache_usage = usage;
  s.num_preemptions = preemptions;
  s.prefix_cache_queries = queries;
  s.prefix_cache_hits = hits;
  return s;
}

class StatsLoggerTest : public ::testing::Test {
 protected:
  FakeClock clock_{100.0};
  std::vector<std::string> lines_;
  StatsLogger logger_{&clock_, [this](const std::string& l) { lines_.push_back(l); }, 5.0};
};

TEST_F(StatsLoggerTest, LogsTheIntervalEveryFiveSecondsWhileBusy) {
  logger_.OnStep(Step(100, 10, 2, 1, 0.5, 1, 200, 50));
  clock_.Advance(4.0);
  logger_.OnStep(Step(0, 10, 2, 1, 0.25, 1, 200, 100));
  EXPECT_TRUE(lines_.empty());
  clock_.Advance(1.0);
  logger_.OnStep(Step(0, 5, 3, 0, 0.75));
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0],
            "Engine 000: Avg prompt throughput: 20.0 tokens/s, Avg generation throughput: 5.0 "
            "tokens/s, Running: 3 reqs, Waiting: 0 reqs, Preemptions: 2, KV cache usage: 75.0%, "
            "Prefix cache hit rate: 37.5%");
}

TEST_F(StatsLoggerTest, OneIdleLineAfterBusyThenSilence) {
  logger_.OnStep(Step(10, 10, 0, 0, 0.0));
  clock_.Advance(5.0);
  EXPECT_TRUE(logger_.MaybeLog());  // busy interval
  clock_.Advance(5.0);
  EXPECT_TRUE(logger_.MaybeLog());  // the idle transition
  EXPECT_EQ(lines_.back(),
            "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 "
            "tokens/s, Running: 0 reqs, Waiting: 0 reqs, Preemptions: 0, KV cache usage: 0.0%, "
            "Prefix cache hit rate: 0.0%");
  clock_.Advance(5.0);
  EXPECT_FALSE(logger_.MaybeLog());
  clock_.Advance(50.0);
  EXPECT_FALSE(logger_.MaybeLog());
  EXPECT_EQ(lines_.size(), 2u);
}

TEST_F(StatsLoggerTest, WaitingRequestsAloneAreBusy) {
  logger_.OnStep(Step(0, 0, 0, 4, 1.0));
  clock_.Advance(5.0);
  EXPECT_TRUE(logger_.MaybeLog());
  EXPECT_NE(lines_[0].find("Waiting: 4 reqs"), std::string::npos);
  EXPECT_NE(lines_[0].find("KV cache usage: 100.0%"), std::string::npos);
}

// Steps with grammar-masked rows add the mask time per such step to the line (steps without
// any do not count in the average).
TEST_F(StatsLoggerTest, StructuredOutputMaskTimeIsPerMaskedStep) {
  SchedulerStats a = Step(0, 4, 2, 0, 0.5);
  a.num_structured_seqs = 2;
  a.structured_mask_seconds = 0.001;
  a.structured_mask_awaited_seconds = 0.0005;
  SchedulerStats b = Step(0, 4, 2, 0, 0.5);
  b.num_structured_seqs = 3;
  b.structured_mask_seconds = 0.002;
  logger_.OnStep(a);
  logger_.OnStep(Step(0, 4, 2, 0, 0.5));  // no masks: not in the average
  clock_.Advance(5.0);
  logger_.OnStep(b);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(
      lines_[0],
      "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 2.4 "
      "tokens/s, Running: 2 reqs, Waiting: 0 reqs, Preemptions: 0, KV cache usage: 50.0%, "
      "Prefix cache hit rate: 0.0%, Structured output mask: 1.500 ms/step fill, 0.250 ms/step "
      "awaited (5 rows)");
}

}  // namespace
}  // namespace tinyserve
