#include "engine/engine_core.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"

namespace tinyserve {
namespace {

using testing::Drain;
using testing::FakeExecutor;
using testing::Finished;
using testing::MakeEngineRequest;
using testing::Preempted;
using testing::Prompt;
using testing::Queued;
using testing::RecordingObserver;
using testing::Scheduled;
using testing::Tokens;
using Events = std::vector<RequestEvent>;

// Each Execute() takes 1 s of fake time: a step scheduled at t outputs at t + 1.
struct Harness {
  Harness(int32_t num_blocks, int32_t block_size, EngineConfig config = {})
      : executor(num_blocks, block_size, /*vocab=*/32, /*max_model_len=*/256, &clock, 1.0),
        core(config, &executor, &clock) {
    core.AddObserver(&recorder);
  }
  std::shared_ptr<RequestStream> Submit(EngineRequest r) {
    return testing::SubmitOk(core, std::move(r));
  }
  void RunUntilIdle() { testing::RunUntilIdle(core); }
  const BlockPool& pool() const { return core.scheduler().kv_cache().pool(); }

  FakeClock clock;
  FakeExecutor executor;
  RecordingObserver recorder;  // before the core: its destructor still reports to the observers
  EngineCore core;
};

EngineConfig Budget(int32_t tokens, int32_t max_num_seqs = 64) {
  EngineConfig c;
  c.max_num_batched_tokens = tokens;
  c.max_num_seqs = max_num_seqs;
  return c;
}

TEST(EngineCoreTest, RequestPreemptedDuringPrefill) {
  Harness h(/*num_blocks=*/6, /*block_size=*/4, Budget(8));
  auto a = h.Submit(MakeEngineRequest("a", Prompt(7, 1), 4));
  auto b = h.Submit(MakeEngineRequest("b", Prompt(14, 2), 1));
  // t=0: a prefills 7 tokens, b the 1 left in the budget. t=1: a decodes, b 7 more (8 computed).
  // t=2: a takes a block; b needs 2 more, 1 is free; b is the last admitted: it preempts itself.
  // t=3: b could hit its 2 cached blocks, but they and 2 new ones exceed the 3 free: it waits.
  // t=4: a has finished; b is admitted again and prefills the rest.
  h.RunUntilIdle();
  EXPECT_EQ(h.recorder.events["b"], (Events{Queued(0), Scheduled(0), Preempted(2), Scheduled(4),
                                            Tokens(5), Finished(5, FinishReason::kLength)}));
  EXPECT_EQ(h.recorder.events["a"],
            (Events{Queued(0), Scheduled(0), Tokens(1), Tokens(2), Tokens(3), Tokens(4),
                    Finished(4, FinishReason::kLength)}));
  ASSERT_EQ(h.recorder.steps.size(), 5u);
  EXPECT_EQ(h.recorder.steps[0].prefix_cache_queries, 21);
  EXPECT_EQ(h.recorder.steps[0].num_computed_tokens, 8);
  EXPECT_EQ(h.recorder.steps[2].num_preemptions, 1);
  EXPECT_EQ(h.recorder.steps[2].num_preempted_waiting, 1);
  EXPECT_EQ(h.recorder.steps[3].num_preemptions, 0);  // b waits; nobody is preempted for it
  // Resumed: 8 tokens from its own cached blocks, not counted as prefix-cache hits.
  EXPECT_EQ(h.recorder.steps[4].num_computed_tokens, 6);
  EXPECT_EQ(h.recorder.steps[4].prefix_cache_queries, 0);
  EXPECT_EQ(h.recorder.steps[4].prefix_cache_hits, 0);
  EXPECT_EQ(h.recorder.steps[4].num_recomputed_tokens, 0);
  EXPECT_EQ(h.recorder.steps[4].num_prompt_tokens, 14);
  EXPECT_EQ(h.recorder.num_preemptions["b"], 1);

  RequestOutput out = Drain(*b);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out.token_ts, (std::vector<double>{5}));
  EXPECT_EQ(out.events, (Events{Queued(0), Scheduled(0), Preempted(2), Scheduled(4),
                                Finished(5, FinishReason::kLength)}));
  EXPECT_EQ(Drain(*a).token_ts, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(h.pool().num_free_blocks(), 6);
}

TEST(EngineCoreTest, RequestPreemptedTwiceDuringDecode) {
  Harness h(/*num_blocks=*/6, /*block_size=*/2, Budget(64));  // max_model_len: 12 tokens
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 100));
  h.Submit(MakeEngineRequest("c", Prompt(1, 2), 3));
  auto b = h.Submit(MakeEngineRequest("b", Prompt(3, 3), 8));
  // t=2: c needs a block: b (admitted last) is preempted. t=3: c has finished; b is back, hitting
  // its first cached block. t=4: a needs a block: b, again the latest, is preempted. t=9: a
  // reached the 12-token cap; b resumes and generates its remaining 5 tokens.
  h.RunUntilIdle();
  EXPECT_EQ(h.recorder.events["b"],
            (Events{Queued(0), Scheduled(0), Tokens(1), Tokens(2), Preempted(2), Scheduled(3),
                    Tokens(4), Preempted(4), Scheduled(9), Tokens(10), Tokens(11), Tokens(12),
                    Tokens(13), Tokens(14), Finished(14, FinishReason::kLength)}));
  EXPECT_EQ(h.recorder.events["c"].back(), Finished(3, FinishReason::kLength));
  EXPECT_EQ(h.recorder.events["a"].back(), Finished(9, FinishReason::kLength));
  EXPECT_EQ(h.recorder.num_preemptions["b"], 2);
  RequestOutput out = Drain(*b);
  EXPECT_EQ(out.token_ids.size(), 8u);
  EXPECT_EQ(out.token_ts, (std::vector<double>{1, 2, 4, 10, 11, 12, 13, 14}));
  // Resumed at t=3 with 5 tokens: 2 hit its own cached block, 3 recomputed (2 of them computed
  // before); at t=9 with 6 tokens: nothing left cached, 5 of the 6 computed before.
  EXPECT_EQ(h.recorder.steps[3].num_recomputed_tokens, 2);
  EXPECT_EQ(h.recorder.steps[3].prefix_cache_hits, 0);
  EXPECT_EQ(h.recorder.steps[9].num_recomputed_tokens, 5);
  EXPECT_EQ(h.pool().num_free_blocks(), 6);
}

// An observer that opts out of per-token events (as metrics and tracing do).
class FirstTokenRecorder final : public RecordingObserver {
 public:
  bool wants_every_token_event() const override { return false; }
};

TEST(EngineCoreTest, OptedOutObserversGetLifecycleEventsAndEveryStepsTokenOutputs) {
  Harness h(/*num_blocks=*/6, /*block_size=*/2, Budget(64));  // the scenario of the test above
  FirstTokenRecorder first_only;
  h.core.AddObserver(&first_only);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 100));
  h.Submit(MakeEngineRequest("c", Prompt(1, 2), 3));
  h.Submit(MakeEngineRequest("b", Prompt(3, 3), 8));
  h.RunUntilIdle();
  // No NEW_TOKENS one by one: the lifecycle events only.
  EXPECT_EQ(first_only.events["b"],
            (Events{Queued(0), Scheduled(0), Preempted(2), Scheduled(3), Preempted(4), Scheduled(9),
                    Finished(14, FinishReason::kLength)}));
  // The tokens come a step at a time, stamped with the step's output time, in batch order: the
  // same outputs the every-token recorder got one by one.
  EXPECT_EQ(first_only.token_outputs, h.recorder.token_outputs);
  ASSERT_GE(first_only.token_outputs.size(), 4u);
  using Outputs = std::pair<double, std::vector<std::string>>;
  EXPECT_EQ(first_only.token_outputs[0], (Outputs{1.0, {"a", "c", "b"}}));
  EXPECT_EQ(first_only.token_outputs[2], (Outputs{3.0, {"a", "c"}}));  // b preempted at 2
  EXPECT_EQ(first_only.token_outputs[3], (Outputs{4.0, {"a", "b"}}));  // c finished at 3
  std::map<std::string, std::vector<RequestEvent>> tokens;
  int64_t num_outputs = 0;
  for (const auto& [ts, ids] : first_only.token_outputs) {
    for (const std::string& id : ids) tokens[id].push_back(Tokens(ts));
    num_outputs += static_cast<int64_t>(ids.size());
  }
  for (const auto& [id, events] : h.recorder.events) {
    Events expected;
    for (const RequestEvent& e : events) {
      if (e.type == EventType::kNewTokens) expected.push_back(e);
    }
    EXPECT_EQ(tokens[id], expected) << id;
  }
  int64_t num_generated = 0;
  for (const SchedulerStats& st : h.recorder.steps) num_generated += st.num_generation_tokens;
  EXPECT_EQ(num_outputs, num_generated);
}

TEST(EngineCoreTest, RequestAbortedWhilePreempted) {
  Harness h(/*num_blocks=*/5, /*block_size=*/2, Budget(64));
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 6));
  auto b = h.Submit(MakeEngineRequest("b", Prompt(3, 2), 6));
  h.core.Step();  // t=0
  h.core.Step();  // t=1
  h.core.Step();  // t=2: b preempted
  EXPECT_EQ(h.recorder.events["b"].back(), Preempted(2));
  EXPECT_EQ(h.pool().num_used_blocks(), 3);  // a's only
  h.core.Abort("b");
  h.core.Step();  // t=3: the abort is applied when the inbox is drained
  EXPECT_EQ(h.recorder.events["b"], (Events{Queued(0), Scheduled(0), Tokens(1), Tokens(2),
                                            Preempted(2), Finished(3, FinishReason::kAbort)}));
  EXPECT_EQ(h.recorder.steps[2].num_preemptions, 1);  // counted when it happened
  EXPECT_EQ(h.recorder.num_preemptions["b"], 1);
  RequestOutput out = Drain(*b);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(out.token_ids.size(), 2u);
  EXPECT_EQ(out.events.back(), Finished(3, FinishReason::kAbort));
  EXPECT_EQ(h.recorder.steps.back().num_preempted_waiting, 0);
  h.RunUntilIdle();
  EXPECT_EQ(h.pool().num_free_blocks(), 5);
}

// Counts the steps the observers were told of; a waker notes that count each time its stream is
// woken, so a test sees whether a wake came before or after the step's OnStep.
class StepCounter final : public RecordingObserver {
 public:
  void OnStep(const SchedulerStats& stats) override {
    RecordingObserver::OnStep(stats);
    ++num_steps;
  }
  int num_steps = 0;
};

class StepNotingWaker final : public StreamWaker {
 public:
  explicit StepNotingWaker(const StepCounter* counter) : counter_(counter) {}
  void Wake() override { woken_at_step.push_back(counter_->num_steps); }
  std::vector<int> woken_at_step;

 private:
  const StepCounter* counter_;
};

TEST(EngineCoreTest, StreamsAreWokenOnceAStepAfterItsOnStep) {
  // Regression: an abort drained from the inbox woke its stream before the step's OnStep, so a
  // client that had seen its request finish could find it not yet counted in the metrics.
  Harness h(/*num_blocks=*/16, /*block_size=*/2, Budget(64));
  StepCounter counter;
  h.core.AddObserver(&counter);
  auto a = h.Submit(MakeEngineRequest("a", Prompt(3, 1), 50));
  auto b = h.Submit(MakeEngineRequest("b", Prompt(3, 2), 3));
  auto a_waker = std::make_shared<StepNotingWaker>(&counter);
  auto b_waker = std::make_shared<StepNotingWaker>(&counter);
  a->SetWaker(a_waker);
  b->SetWaker(b_waker);
  h.core.Step();  // t=0: both prefill (QUEUED and SCHEDULED, then a token each)
  h.core.Step();  // t=1
  h.core.Abort("a");
  h.core.Step();  // t=2: a aborted at the drain; b decodes its last token and finishes
  h.core.Step();  // t=3: an inbox-only step (nothing left): no wake
  // Each step wakes each of its streams once, after that step's OnStep.
  EXPECT_EQ(a_waker->woken_at_step, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(b_waker->woken_at_step, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(Drain(*a).finish_reason, FinishReason::kAbort);
  EXPECT_EQ(Drain(*b).finish_reason, FinishReason::kLength);
}

TEST(EngineCoreTest, StatsOfAnInboxOnlyStepAreFresh) {
  // Regression: a step that only drained an abort reported the previous step's counters again.
  Harness h(/*num_blocks=*/5, /*block_size=*/2, Budget(64));
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 50));
  h.Submit(MakeEngineRequest("b", Prompt(3, 2), 50));
  for (int i = 0; i < 3; ++i) h.core.Step();  // t=2: b preempted
  ASSERT_EQ(h.recorder.steps.back().num_preemptions, 1);
  h.core.Abort("a");
  h.core.Abort("b");
  h.core.Step();  // nothing left to schedule
  ASSERT_EQ(h.recorder.steps.size(), 4u);
  const SchedulerStats& last = h.recorder.steps.back();
  EXPECT_EQ(last.ts, 3.0);
  EXPECT_EQ(last.num_preemptions, 0);
  EXPECT_EQ(last.num_computed_tokens, 0);
  EXPECT_EQ(last.num_generation_tokens, 0);
  EXPECT_EQ(last.num_running, 0);
  EXPECT_EQ(last.num_waiting, 0);
  EXPECT_EQ(last.num_used_blocks, 0);
}

TEST(EngineCoreTest, RequestAbortedWhileWaiting) {
  Harness h(/*num_blocks=*/16, /*block_size=*/4, Budget(64, /*max_num_seqs=*/1));
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 3));
  auto b = h.Submit(MakeEngineRequest("b", Prompt(3, 2), 3));
  h.core.Step();  // t=0: a runs, b waits (max_num_seqs 1)
  h.clock.Advance(0.5);
  h.core.Abort("b");
  h.core.Step();  // t=1.5
  EXPECT_EQ(h.recorder.events["b"], (Events{Queued(0), Finished(1.5, FinishReason::kAbort)}));
  RequestOutput out = Drain(*b);
  EXPECT_TRUE(out.finished);
  EXPECT_TRUE(out.token_ids.empty());
  EXPECT_EQ(out.events, (Events{Queued(0), Finished(1.5, FinishReason::kAbort)}));
  h.core.Abort("b");  // already finished: no-op
  h.core.Abort("nobody");
  h.RunUntilIdle();
  EXPECT_EQ(h.recorder.events["a"].back(), Finished(3.5, FinishReason::kLength));
  EXPECT_EQ(h.pool().num_free_blocks(), 16);
}

TEST(EngineCoreTest, AbortOfARunningRequestFreesItsBlocksAtOnce) {
  Harness h(16, 4, Budget(64));
  auto a = h.Submit(MakeEngineRequest("a", Prompt(9, 1), 50));
  h.core.Step();
  EXPECT_EQ(h.pool().num_used_blocks(), 3);
  h.core.Abort("a");
  h.core.Step();
  EXPECT_EQ(h.pool().num_used_blocks(), 0);
  EXPECT_FALSE(h.core.HasPendingWork());
  EXPECT_EQ(Drain(*a).finish_reason, FinishReason::kAbort);
}

TEST(EngineCoreTest, FrontendStopFinishesWithReasonStop) {
  Harness h(16, 4, Budget(64));
  auto a = h.Submit(MakeEngineRequest("a", Prompt(4, 1), 50));
  h.core.Step();
  h.core.Abort("a", FinishReason::kStop);  // a stop string found by the frontend
  h.core.Step();
  RequestOutput out = Drain(*a);
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.token_ids.size(), 1u);
}

TEST(EngineCoreTest, ExecutorErrorFailsExactlyThatBatch) {
  Harness h(16, 4, Budget(64, /*max_num_seqs=*/2));
  auto a = h.Submit(MakeEngineRequest("a", Prompt(4, 1), 5));
  auto b = h.Submit(MakeEngineRequest("b", Prompt(4, 2), 5));
  auto c = h.Submit(MakeEngineRequest("c", Prompt(4, 3), 5));  // waits: max_num_seqs 2
  h.executor.FailOnCall(2);
  h.core.Step();
  h.core.Step();  // fails: a and b
  RequestOutput out_a = Drain(*a);
  EXPECT_EQ(out_a.finish_reason, FinishReason::kError);
  EXPECT_NE(out_a.error_message.find("injected device failure"), std::string::npos);
  EXPECT_EQ(out_a.token_ids.size(), 1u);
  EXPECT_EQ(Drain(*b).finish_reason, FinishReason::kError);
  EXPECT_EQ(h.pool().num_used_blocks(), 0);
  EXPECT_EQ(h.recorder.events["a"].back(), Finished(2, FinishReason::kError));
  h.RunUntilIdle();  // the engine keeps serving
  RequestOutput out_c = Drain(*c);
  EXPECT_EQ(out_c.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out_c.token_ids.size(), 5u);
  EXPECT_EQ(h.pool().num_free_blocks(), 16);
}

TEST(EngineCoreTest, SubmitValidatesRequests) {
  Harness h(4, 4, Budget(64));  // max_model_len: 16 (the cache)
  EXPECT_EQ(h.core.max_model_len(), 16);
  EXPECT_EQ(h.core.Submit(MakeEngineRequest("", Prompt(3, 1), 1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(h.core.Submit(MakeEngineRequest("x", {}, 1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(h.core.Submit(MakeEngineRequest("x", Prompt(16, 1), 1)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(h.core.Submit(MakeEngineRequest("x", {1, 32}, 1)).status().code(),
            StatusCode::kInvalidArgument);
  EngineRequest bad = MakeEngineRequest("x", {1}, 1);
  bad.sampling.top_p = 2.0f;
  EXPECT_EQ(h.core.Submit(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(h.core.Submit(MakeEngineRequest("x", Prompt(15, 1), 1)).ok());
  auto dup = h.Submit(MakeEngineRequest("x", Prompt(2, 1), 1));
  h.core.Step();
  RequestOutput out = Drain(*dup);
  EXPECT_EQ(out.finish_reason, FinishReason::kError);
  h.core.Stop();
  EXPECT_EQ(h.core.Submit(MakeEngineRequest("y", {1}, 1)).status().code(),
            StatusCode::kUnavailable);
}

TEST(EngineCoreTest, EosStopsUnlessIgnoredAndLogprobsReachTheStream) {
  // Find the token the fake model emits first for this prompt, and make it the EOS.
  std::vector<float> row(32);
  const std::vector<int32_t> prompt = Prompt(5, 4);
  FakeExecutor::Logits(prompt, 32, row.data());
  const int32_t first =
      static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  EngineConfig config = Budget(64);
  config.eos_token_id = first;
  Harness h(16, 4, config);
  EngineRequest stops = MakeEngineRequest("stops", prompt, 10);
  stops.sampling.ignore_eos = false;
  stops.sampling.logprobs = 3;
  auto s = h.Submit(stops);
  auto ignores = h.Submit(MakeEngineRequest("ignores", prompt, 3));
  h.RunUntilIdle();
  RequestOutput out = Drain(*s);
  EXPECT_EQ(out.finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.token_ids, (std::vector<int32_t>{first}));
  ASSERT_EQ(out.logprobs.size(), 1u);
  EXPECT_EQ(out.logprobs[0].token_id, first);
  EXPECT_EQ(out.logprobs[0].rank, 1);
  EXPECT_EQ(out.logprobs[0].top.size(), 3u);
  RequestOutput out2 = Drain(*ignores);
  EXPECT_EQ(out2.finish_reason, FinishReason::kLength);
  EXPECT_EQ(out2.token_ids.size(), 3u);
  EXPECT_TRUE(out2.logprobs.empty());
}

TEST(EngineCoreTest, StopAbortsPendingRequests) {
  Harness h(16, 4, Budget(64, 1));
  auto a = h.Submit(MakeEngineRequest("a", Prompt(4, 1), 50));
  auto b = h.Submit(MakeEngineRequest("b", Prompt(4, 2), 50));
  h.core.Step();
  auto c = h.Submit(MakeEngineRequest("c", Prompt(4, 3), 50));  // still in the inbox
  h.core.Stop();
  for (auto* s : {a.get(), b.get(), c.get()}) {
    RequestOutput out = Drain(*s);
    EXPECT_TRUE(out.finished);
    EXPECT_EQ(out.finish_reason, FinishReason::kAbort);
  }
  EXPECT_EQ(h.pool().num_free_blocks(), 16);
  EXPECT_FALSE(h.core.HasPendingWork());
}

}  // namespace
}  // namespace tinyserve
