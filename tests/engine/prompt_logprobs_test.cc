// Prompt logprobs (SamplingParams::prompt_logprobs) through the EngineCore on the FakeExecutor:
// every prompt position after the first exactly once, in order, with the raw log-softmax of the
// logits at the previous position; whatever the prefill chunking, preemption or prefix cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"

namespace tinyserve {
namespace {

using testing::Drain;
using testing::FakeExecutor;
using testing::MakeEngineRequest;
using testing::Prompt;
using testing::RecordingObserver;

constexpr int32_t kLogprobsVocab = 32;

struct LogprobsHarness {
  LogprobsHarness(int32_t num_blocks, int32_t block_size, int32_t budget,
                  bool prefix_caching = true)
      : executor(num_blocks, block_size, kLogprobsVocab, /*max_model_len=*/256, &clock, 1.0),
        core(Config(budget, prefix_caching), &executor, &clock) {
    core.AddObserver(&recorder);
  }
  static EngineConfig Config(int32_t budget, bool prefix_caching) {
    EngineConfig c;
    c.max_num_batched_tokens = budget;
    c.enable_prefix_caching = prefix_caching;
    return c;
  }
  std::shared_ptr<RequestStream> Submit(EngineRequest r) {
    return testing::SubmitOk(core, std::move(r));
  }
  void RunUntilIdle() { testing::RunUntilIdle(core); }
  // The prompt-logit rows of every sequence that asked for some, batch by batch (the tests have
  // one scored request at a time).
  std::vector<int32_t> RowsPerStep() const {
    std::vector<int32_t> rows;
    for (const ScheduledBatch& b : executor.batches()) {
      for (int32_t n : b.num_prompt_logits) {
        if (n > 0) rows.push_back(n);
      }
    }
    return rows;
  }

  FakeClock clock;
  FakeExecutor executor;
  RecordingObserver recorder;  // before the core: its destructor still reports to the observers
  EngineCore core;
};

EngineRequest Scored(const std::string& id, const std::vector<int32_t>& prompt, int32_t top_n,
                     int32_t max_tokens = 2) {
  EngineRequest r = MakeEngineRequest(id, prompt, max_tokens);
  r.sampling.prompt_logprobs = top_n;
  return r;
}

// The expected prompt logprobs, computed here from the fake model's logits in fp64.
void ExpectPromptLogprobs(const std::vector<int32_t>& prompt, int32_t top_n,
                          const std::vector<TokenLogprobs>& got) {
  ASSERT_EQ(got.size(), prompt.size() - 1);
  std::vector<float> row(kLogprobsVocab);
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::vector<int32_t> context(prompt.begin(), prompt.begin() + static_cast<long>(i));
    FakeExecutor::Logits(context, kLogprobsVocab, row.data());
    const float max = *std::max_element(row.begin(), row.end());
    double sum = 0.0;
    for (float x : row) sum += std::exp(static_cast<double>(x) - max);
    const double lse = max + std::log(sum);
    const TokenLogprobs& t = got[i - 1];
    EXPECT_EQ(t.token_id, prompt[i]) << "position " << i;
    EXPECT_NEAR(t.logprob, row[prompt[i]] - lse, 1e-5) << "position " << i;
    std::vector<int32_t> order(kLogprobsVocab);
    for (int32_t v = 0; v < kLogprobsVocab; ++v) order[v] = v;
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    ASSERT_EQ(t.top.size(), static_cast<size_t>(top_n)) << "position " << i;
    for (int32_t k = 0; k < top_n; ++k) {
      EXPECT_EQ(t.top[k].first, order[k]) << "position " << i << " rank " << k;
      EXPECT_NEAR(t.top[k].second, row[order[k]] - lse, 1e-5);
    }
  }
}

void ExpectSameLogprobs(const std::vector<TokenLogprobs>& a, const std::vector<TokenLogprobs>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token_id, b[i].token_id);
    EXPECT_EQ(a[i].logprob, b[i].logprob);
    EXPECT_EQ(a[i].rank, b[i].rank);
    EXPECT_EQ(a[i].top, b[i].top);
  }
}

TEST(PromptLogprobsTest, EveryPositionAfterTheFirstArrivesWithTheFirstToken) {
  LogprobsHarness h(16, 4, /*budget=*/64);
  const std::vector<int32_t> prompt = Prompt(10, 1);
  auto s = h.Submit(Scored("a", prompt, 3));
  h.core.Step();  // the whole prompt in one step: its logprobs and the first token
  RequestOutput first;
  ASSERT_TRUE(s->TryNext(&first));
  EXPECT_EQ(first.token_ids.size(), 1u);
  ExpectPromptLogprobs(prompt, 3, first.prompt_logprobs);
  h.RunUntilIdle();
  RequestOutput rest = Drain(*s);
  EXPECT_TRUE(rest.finished);
  EXPECT_EQ(rest.token_ids.size(), 1u);
  EXPECT_TRUE(rest.prompt_logprobs.empty());
  // Only the prefill step asked for prompt rows: positions 0..8 score tokens 1..9.
  ASSERT_EQ(h.executor.batches().size(), 2u);
  EXPECT_EQ(h.executor.batches()[0].num_prompt_logits, (std::vector<int32_t>{9}));
  EXPECT_EQ(h.executor.batches()[0].prompt_logits_start, (std::vector<int32_t>{0}));
  EXPECT_EQ(h.executor.batches()[1].num_prompt_logits, (std::vector<int32_t>{0}));
}

TEST(PromptLogprobsTest, TopZeroGivesTheTokenAloneAndOtherRequestsAskForNoRows) {
  LogprobsHarness h(16, 4, /*budget=*/64);
  const std::vector<int32_t> prompt = Prompt(6, 2);
  auto scored = h.Submit(Scored("scored", prompt, 0));
  auto plain = h.Submit(MakeEngineRequest("plain", Prompt(6, 3), 2));
  h.RunUntilIdle();
  ExpectPromptLogprobs(prompt, 0, Drain(*scored).prompt_logprobs);
  EXPECT_TRUE(Drain(*plain).prompt_logprobs.empty());
  EXPECT_EQ(h.executor.batches()[0].num_prompt_logits, (std::vector<int32_t>{5, 0}));
}

TEST(PromptLogprobsTest, ChunkedPrefillGivesTheSameValuesChunkByChunk) {
  const std::vector<int32_t> prompt = Prompt(10, 4);
  LogprobsHarness whole(16, 4, /*budget=*/64);
  auto a = whole.Submit(Scored("a", prompt, 5));
  whole.RunUntilIdle();
  const RequestOutput one = Drain(*a);

  LogprobsHarness chunked(16, 4, /*budget=*/3);
  auto b = chunked.Submit(Scored("b", prompt, 5));
  chunked.core.Step();  // positions 0..2: logprobs of tokens 1..3, no token yet
  RequestOutput early;
  ASSERT_TRUE(b->TryNext(&early));
  EXPECT_TRUE(early.token_ids.empty());
  ASSERT_EQ(early.prompt_logprobs.size(), 3u);
  chunked.RunUntilIdle();
  RequestOutput later = Drain(*b);
  later.prompt_logprobs.insert(later.prompt_logprobs.begin(), early.prompt_logprobs.begin(),
                               early.prompt_logprobs.end());
  // Chunks [0,3) [3,6) [6,9) [9,10): the last position has no next prompt token.
  EXPECT_EQ(chunked.RowsPerStep(), (std::vector<int32_t>{3, 3, 3}));
  ExpectPromptLogprobs(prompt, 5, later.prompt_logprobs);
  ExpectSameLogprobs(one.prompt_logprobs, later.prompt_logprobs);
  EXPECT_EQ(one.token_ids, later.token_ids);
}

TEST(PromptLogprobsTest, PreemptedDuringPrefillDeliversEachPositionOnce) {
  // EngineCoreTest.RequestPreemptedDuringPrefill's schedule: b computes 1 then 7 positions, is
  // preempted, and resumes over its own 2 cached blocks (8 delivered positions) for the rest.
  LogprobsHarness h(/*num_blocks=*/6, /*block_size=*/4, /*budget=*/8);
  h.Submit(MakeEngineRequest("a", Prompt(7, 1), 4));
  const std::vector<int32_t> prompt = Prompt(14, 2);
  auto b = h.Submit(Scored("b", prompt, 2, 1));
  h.RunUntilIdle();
  EXPECT_EQ(h.recorder.num_preemptions["b"], 1);
  EXPECT_EQ(h.RowsPerStep(), (std::vector<int32_t>{1, 7, 5}));
  const RequestOutput out = Drain(*b);
  EXPECT_TRUE(out.finished);
  ExpectPromptLogprobs(prompt, 2, out.prompt_logprobs);
}

TEST(PromptLogprobsTest, PreemptedWithoutItsCachedBlocksRecomputesWithoutRedelivering) {
  // No prefix cache: b is preempted mid-prefill and recomputes from position 0; the positions
  // it delivered before are computed again but not delivered again.
  LogprobsHarness h(/*num_blocks=*/6, /*block_size=*/4, /*budget=*/8, /*prefix_caching=*/false);
  h.Submit(MakeEngineRequest("a", Prompt(7, 1), 4));
  const std::vector<int32_t> prompt = Prompt(14, 2);
  auto b = h.Submit(Scored("b", prompt, 2, 1));
  h.RunUntilIdle();
  EXPECT_EQ(h.recorder.num_preemptions["b"], 1);
  EXPECT_EQ(h.RowsPerStep(), (std::vector<int32_t>{1, 7, 5}));
  // Its 8 positions computed before the preemption were computed again (a is never preempted).
  int32_t recomputed = 0;
  for (const SchedulerStats& st : h.recorder.steps) recomputed += st.num_recomputed_tokens;
  EXPECT_EQ(recomputed, 8);
  const RequestOutput out = Drain(*b);
  ExpectPromptLogprobs(prompt, 2, out.prompt_logprobs);
}

TEST(PromptLogprobsTest, PreemptedDuringDecodeDeliversNothingAgain) {
  // EngineCoreTest.RequestPreemptedTwiceDuringDecode's schedule: b is preempted twice after its
  // prefill and recomputes its prompt twice.
  LogprobsHarness h(/*num_blocks=*/6, /*block_size=*/2, /*budget=*/64);
  h.Submit(MakeEngineRequest("a", Prompt(3, 1), 100));
  h.Submit(MakeEngineRequest("c", Prompt(1, 2), 3));
  const std::vector<int32_t> prompt = Prompt(3, 3);
  auto b = h.Submit(Scored("b", prompt, 1, 8));
  h.RunUntilIdle();
  EXPECT_EQ(h.recorder.num_preemptions["b"], 2);
  EXPECT_EQ(h.RowsPerStep(), (std::vector<int32_t>{2}));
  const RequestOutput out = Drain(*b);
  EXPECT_EQ(out.token_ids.size(), 8u);
  ExpectPromptLogprobs(prompt, 1, out.prompt_logprobs);
}

TEST(PromptLogprobsTest, CachedPrefixIsComputedAgainForItsLogprobs) {
  LogprobsHarness h(/*num_blocks=*/16, /*block_size=*/4, /*budget=*/64);
  const std::vector<int32_t> prompt = Prompt(13, 5);
  auto warm = h.Submit(MakeEngineRequest("warm", prompt, 1));
  h.RunUntilIdle();
  Drain(*warm);
  // The same prompt again: 12 tokens are cached, but the scored request computes all 13.
  const size_t before = h.executor.batches().size();
  auto scored = h.Submit(Scored("scored", prompt, 4));
  h.RunUntilIdle();
  const ScheduledBatch& prefill = h.executor.batches()[before];
  EXPECT_EQ(prefill.num_tokens(), 13);
  EXPECT_EQ(prefill.num_prompt_logits, (std::vector<int32_t>{12}));
  ExpectPromptLogprobs(prompt, 4, Drain(*scored).prompt_logprobs);
  // A request without prompt logprobs still reuses the cached blocks.
  const size_t before_plain = h.executor.batches().size();
  auto plain = h.Submit(MakeEngineRequest("plain", prompt, 1));
  h.RunUntilIdle();
  EXPECT_EQ(h.executor.batches()[before_plain].num_tokens(), 1);
  EXPECT_TRUE(Drain(*plain).prompt_logprobs.empty());
}

TEST(PromptLogprobsTest, SubmitRejectsOutOfRangeTopN) {
  LogprobsHarness h(16, 4, 64);
  EXPECT_FALSE(h.core.Submit(Scored("x", Prompt(4, 1), 21)).ok());
  EXPECT_FALSE(h.core.Submit(Scored("y", Prompt(4, 1), -1)).ok());
  EXPECT_TRUE(h.core.Submit(Scored("z", Prompt(4, 1), 20)).ok());
}

TEST(PromptLogprobsTest, OneTokenPromptHasNoPromptLogprobs) {
  LogprobsHarness h(16, 4, 64);
  auto s = h.Submit(Scored("one", {7}, 3));
  h.RunUntilIdle();
  const RequestOutput out = Drain(*s);
  EXPECT_TRUE(out.finished);
  EXPECT_TRUE(out.prompt_logprobs.empty());
  EXPECT_EQ(h.executor.batches()[0].num_prompt_logits, (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace tinyserve
