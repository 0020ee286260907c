// The sampling seam (engine/scheduled_batch.h, engine/model_executor.h): the engine sends each
// request's sampling state once, names every sequence's request and output index, and releases
// the state when the request finishes, whatever way it finishes (length, abort while waiting or
// running, an executor failure, shutdown); preemptions do not re-send it.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"

namespace tinyserve {
namespace {

using testing::FakeExecutor;
using testing::MakeEngineRequest;
using testing::RecordingObserver;

std::vector<int32_t> PromptOf(int32_t n, int32_t first) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back((first + 3 * i) % 30 + 1);
  return p;
}

TEST(SamplingSeamTest, StateIsSentOnceNamedEveryStepAndReleasedHoweverARequestEnds) {
  FakeClock clock;
  // 6 blocks of 4 slots for requests of up to 20 tokens: preemptions.
  FakeExecutor executor(6, 4, /*vocab=*/32, /*max_model_len=*/64, &clock, 1.0);
  RecordingObserver recorder;
  EngineConfig config;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 16;
  EngineCore core(config, &executor, &clock);
  core.AddObserver(&recorder);
  for (int i = 0; i < 6; ++i) {
    EngineRequest r = MakeEngineRequest("r" + std::to_string(i), PromptOf(6 + i, i), 8);
    if (i % 2 == 1) {  // some with penalties and seeded sampling: state that must follow them
      r.sampling.temperature = 0.7f;
      r.sampling.seed = 40 + i;
      r.sampling.repetition_penalty = 1.3f;
      r.sampling.frequency_penalty = 0.4f;
      r.sampling.logprobs = 2;
    }
    testing::SubmitOk(core, std::move(r));
  }
  // Two steps in, abort one that runs and one that may still wait.
  core.Step();
  core.Step();
  core.Abort("r0");
  core.Abort("r5");
  testing::RunUntilIdle(core);

  std::map<uint64_t, int> registrations;
  std::map<uint64_t, int32_t> sampled_so_far;
  for (const ScheduledBatch& b : executor.batches()) {
    for (const SamplingRegistration& r : b.new_requests) ++registrations[r.key];
    ASSERT_EQ(b.request_keys.size(), static_cast<size_t>(b.num_seqs()));
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      const uint64_t key = b.request_keys[s];
      EXPECT_EQ(b.output_index[s], sampled_so_far[key]) << "key " << key;
      if (b.sample[s]) ++sampled_so_far[key];
    }
  }
  int64_t preemptions = 0;
  for (const SchedulerStats& st : recorder.steps) preemptions += st.num_preemptions;
  EXPECT_GT(preemptions, 0);
  for (const auto& [key, count] : registrations) EXPECT_EQ(count, 1) << "key " << key;
  EXPECT_GE(registrations.size(), 5u);
  EXPECT_EQ(executor.num_sampling_states(), 0u);
}

TEST(SamplingSeamTest, AFailedStepReleasesItsRequestsState) {
  FakeClock clock;
  FakeExecutor executor(64, 4, 32, 64, &clock, 1.0);
  executor.FailOnCall(2);
  EngineCore core(EngineConfig{}, &executor, &clock);
  for (int i = 0; i < 3; ++i) {
    testing::SubmitOk(core, MakeEngineRequest("r" + std::to_string(i), PromptOf(5, i), 6));
  }
  testing::RunUntilIdle(core);
  EXPECT_EQ(executor.num_calls(), 2);  // the second step failed all three
  EXPECT_EQ(executor.num_sampling_states(), 0u);
}

TEST(SamplingSeamTest, ShutdownReleasesLiveRequestsState) {
  FakeClock clock;
  FakeExecutor executor(64, 4, 32, 64, &clock, 1.0);
  {
    EngineCore core(EngineConfig{}, &executor, &clock);
    testing::SubmitOk(core, MakeEngineRequest("a", PromptOf(5, 1), 50));
    core.Step();
    core.Step();
    EXPECT_EQ(executor.num_sampling_states(), 1u);
  }  // ~EngineCore: Stop() aborts it
  EXPECT_EQ(executor.num_sampling_states(), 0u);
}

}  // namespace
}  // namespace tinyserve
