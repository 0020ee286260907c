// EngineCore::RequestPrefixCacheReset (POST /reset_prefix_cache): done on the engine thread at the
// start of a step; refused while a request holds KV blocks unless the running requests are
// preempted first (vLLM's reset_running_requests); AllBlocksCleared goes to the KV-event sink.
#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"

namespace tinyserve {
namespace {

using testing::Drain;
using testing::FakeExecutor;
using testing::MakeEngineRequest;
using testing::Prompt;
using testing::RecordingObserver;

class RecordingSink final : public KvCacheEventSink {
 public:
  void OnKvCacheEvents(std::vector<KvCacheEvent> events) override {
    batches.push_back(std::move(events));
  }
  // The number of AllBlocksCleared events received.
  int NumCleared() const {
    int n = 0;
    for (const auto& batch : batches) {
      for (const KvCacheEvent& e : batch) n += e.type == KvCacheEvent::Type::kAllBlocksCleared;
    }
    return n;
  }
  std::vector<std::vector<KvCacheEvent>> batches;
};

struct PrefixCacheHarness {
  PrefixCacheHarness()
      : executor(16, 4, /*vocab=*/32, /*max_model_len=*/256, &clock, 1.0),
        core({}, &executor, &clock) {
    core.AddObserver(&recorder);
    core.SetKvCacheEventSink(&sink);
  }
  std::shared_ptr<RequestStream> Submit(EngineRequest r) {
    return testing::SubmitOk(core, std::move(r));
  }
  // Runs `r` to its finish and returns its output.
  RequestOutput Run(EngineRequest r) {
    auto stream = Submit(std::move(r));
    testing::RunUntilIdle(core);
    return Drain(*stream);
  }
  const BlockPool& pool() const { return core.scheduler().kv_cache().pool(); }

  FakeClock clock;
  FakeExecutor executor;
  RecordingObserver recorder;
  RecordingSink sink;
  EngineCore core;
};

bool IsReady(const std::future<bool>& f) {
  return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

TEST(PrefixCacheResetTest, ResetBetweenStepsDropsTheCachedPrompt) {
  PrefixCacheHarness h;
  const std::vector<int32_t> prompt = Prompt(9, 1);  // two full blocks of 4
  EXPECT_EQ(h.Run(MakeEngineRequest("a", prompt, 2)).counts.num_cached_prompt_tokens, 0);
  EXPECT_EQ(h.Run(MakeEngineRequest("b", prompt, 2)).counts.num_cached_prompt_tokens, 8);
  ASSERT_FALSE(h.pool().CachedHashesForTesting().empty());

  std::future<bool> reset = h.core.RequestPrefixCacheReset(false);
  EXPECT_FALSE(IsReady(reset));  // nothing happens outside a step
  EXPECT_TRUE(h.core.HasPendingWork());
  const size_t batches_before = h.sink.batches.size();
  EXPECT_TRUE(h.core.Step());
  ASSERT_TRUE(IsReady(reset));
  EXPECT_TRUE(reset.get());
  EXPECT_TRUE(h.pool().CachedHashesForTesting().empty());
  ASSERT_EQ(h.sink.batches.size(), batches_before + 1);
  ASSERT_EQ(h.sink.batches.back().size(), 1u);
  EXPECT_EQ(h.sink.batches.back()[0].type, KvCacheEvent::Type::kAllBlocksCleared);

  // The same prompt again: nothing cached.
  EXPECT_EQ(h.Run(MakeEngineRequest("c", prompt, 2)).counts.num_cached_prompt_tokens, 0);
  int64_t hits = 0;
  for (const SchedulerStats& s : h.recorder.steps) hits += s.prefix_cache_hits;
  EXPECT_EQ(hits, 8);  // b's only
}

TEST(PrefixCacheResetTest, RefusedWhileARequestRuns) {
  PrefixCacheHarness h;
  const RequestOutput alone = h.Run(MakeEngineRequest("solo", Prompt(6, 2), 6));
  PrefixCacheHarness g;
  auto a = g.Submit(MakeEngineRequest("a", Prompt(6, 2), 6));
  g.core.Step();
  g.core.Step();
  const std::vector<uint64_t> cached = g.pool().CachedHashesForTesting();
  std::future<bool> reset = g.core.RequestPrefixCacheReset(false);
  g.core.Step();
  ASSERT_TRUE(IsReady(reset));
  EXPECT_FALSE(reset.get());
  // Nothing was dropped (that step's decode may have cached one more block).
  const std::vector<uint64_t> after = g.pool().CachedHashesForTesting();
  ASSERT_FALSE(cached.empty());
  EXPECT_TRUE(std::includes(after.begin(), after.end(), cached.begin(), cached.end()));
  EXPECT_EQ(g.sink.NumCleared(), 0);
  testing::RunUntilIdle(g.core);
  const RequestOutput out = Drain(*a);
  EXPECT_EQ(out.token_ids, alone.token_ids);  // untouched
  EXPECT_EQ(g.recorder.num_preemptions.at("a"), 0);
}

TEST(PrefixCacheResetTest, ResetRunningRequestsPreemptsThemFirst) {
  PrefixCacheHarness h;
  const RequestOutput alone_a = h.Run(MakeEngineRequest("a", Prompt(6, 3), 6));
  const RequestOutput alone_b = h.Run(MakeEngineRequest("b", Prompt(5, 4), 6));
  PrefixCacheHarness g;
  auto a = g.Submit(MakeEngineRequest("a", Prompt(6, 3), 6));
  auto b = g.Submit(MakeEngineRequest("b", Prompt(5, 4), 6));
  g.core.Step();  // both prefilled: one output each
  g.core.Step();  // one decode each: two outputs, 7 and 6 positions computed
  std::future<bool> reset = g.core.RequestPrefixCacheReset(true);
  g.core.Step();
  ASSERT_TRUE(IsReady(reset));
  EXPECT_TRUE(reset.get());
  EXPECT_EQ(g.sink.NumCleared(), 1);
  // The clear comes first in that step's batch: the re-prefills store their blocks after it.
  bool found = false;
  for (const auto& batch : g.sink.batches) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].type != KvCacheEvent::Type::kAllBlocksCleared) continue;
      EXPECT_EQ(i, 0u);
      found = true;
    }
  }
  EXPECT_TRUE(found);
  testing::RunUntilIdle(g.core);
  const RequestOutput out_a = Drain(*a), out_b = Drain(*b);
  EXPECT_EQ(out_a.token_ids, alone_a.token_ids);
  EXPECT_EQ(out_b.token_ids, alone_b.token_ids);
  EXPECT_EQ(g.recorder.num_preemptions.at("a"), 1);
  EXPECT_EQ(g.recorder.num_preemptions.at("b"), 1);
  // Everything computed before the reset is computed again: prompt and first output.
  EXPECT_EQ(out_a.counts.num_recomputed_prompt_tokens, 6);
  EXPECT_EQ(out_a.counts.num_recomputed_output_tokens, 1);
  EXPECT_EQ(out_b.counts.num_recomputed_prompt_tokens, 5);
  EXPECT_EQ(out_b.counts.num_recomputed_output_tokens, 1);
  // Counted once each, in the step after the reset, under their own reason.
  int32_t total = 0, by_reset = 0;
  for (const SchedulerStats& s : g.recorder.steps) {
    total += s.num_preemptions;
    by_reset += s.num_preemptions_by_reason[static_cast<int>(PreemptionReason::kResetPrefixCache)];
  }
  EXPECT_EQ(total, 2);
  EXPECT_EQ(by_reset, 2);
  EXPECT_STREQ(PreemptionReasonName(PreemptionReason::kResetPrefixCache), "reset_prefix_cache");
}

TEST(PrefixCacheResetTest, AStoppedEngineAnswersFalse) {
  PrefixCacheHarness h;
  h.core.Stop();
  std::future<bool> reset = h.core.RequestPrefixCacheReset(true);
  ASSERT_TRUE(IsReady(reset));
  EXPECT_FALSE(reset.get());
}

TEST(PrefixCacheResetTest, ARequestPendingAtStopIsAnswered) {
  PrefixCacheHarness h;
  auto a = h.Submit(MakeEngineRequest("a", Prompt(6, 2), 50));
  h.core.Step();
  std::future<bool> reset = h.core.RequestPrefixCacheReset(false);
  h.core.Stop();
  ASSERT_TRUE(IsReady(reset));
  EXPECT_FALSE(reset.get());  // "a" still held its blocks when Stop() drained the inbox
}

}  // namespace
}  // namespace tinyserve
