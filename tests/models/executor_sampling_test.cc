// ModelRunner::Execute samples on the backend and brings back only tokens and logprobs: on a
// 32000-token vocabulary (a random stories15M-shaped model), a prefill that asks for prompt
// logprobs returns exactly one entry per requested row with the requested top-n, the same bits as
// scoring ComputeLogits' rows on the host; the sampled token is the greedy argmax of its row.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cpu/cpu_sampler.h"
#include "models/llama2c.h"
#include "models/model_runner.h"
#include "models/presets.h"
#include "models/static_batch_generator.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

TEST(ExecutorSamplingTest, PromptLogprobsOver32kVocabularyComeBackAsRequestedRowsOnly) {
  testing_util::ScratchDir dir("executor_sampling");
  Llama2cHeader h = FindModelPreset("stories15M")->header;
  h.n_layers = 2;
  h.seq_len = 64;
  const std::string path = dir / "m.bin";
  ASSERT_TRUE(WriteRandomLlama2cCheckpoint(path, h, 3).ok());
  auto w = LoadLlama2cCheckpoint(path);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ModelRunnerOptions o;
  o.num_kv_blocks = 8;
  auto runner = ModelRunner::Create(*w, CreateCpuBackend(2), o);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  ModelRunner& r = **runner;
  ASSERT_EQ(r.vocab_size(), 32000);

  const std::vector<int32_t> prompt = {1, 450, 9999, 31999, 7, 123, 2048};
  ScheduledBatch b;
  b.max_blocks_per_seq = 1;
  std::vector<int32_t> pos;
  std::vector<int64_t> slots;
  for (int32_t p = 0; p < 7; ++p) {
    pos.push_back(p);
    slots.push_back(p);
  }
  // Rows 1..5 score prompt tokens 2..6.
  b.AddSequence(prompt, pos, slots, 7, {0}, /*wants_logits=*/true, 1, 5);
  b.request_keys = {11};
  b.output_index = {0};
  SamplingRegistration reg;
  reg.key = 11;
  reg.params.temperature = 0.0f;
  reg.params.logprobs = 4;
  reg.token_ids = prompt;
  reg.num_prompt_tokens = 7;
  b.new_requests = {reg};
  for (int32_t p = 2; p <= 6; ++p) {
    b.prompt_logit_targets.push_back(prompt[p]);
    b.prompt_logit_num_top.push_back(3);
  }
  auto out = r.Execute(b);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->sampled.size(), 1u);
  ASSERT_EQ(out->prompt_logprobs.size(), 5u);
  EXPECT_EQ(out->sampled[0].top.size(), 4u);

  // The same pass for its logits (the K/V is rewritten with the same values).
  ScheduledBatch logits_only = b;
  logits_only.request_keys.clear();
  logits_only.output_index.clear();
  logits_only.new_requests.clear();
  auto logits = r.ComputeLogits(logits_only);
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  CpuSampler host(32000);
  for (int32_t i = 0; i < 5; ++i) {
    SCOPED_TRACE("prompt row " + std::to_string(i));
    TokenLogprobs want;
    host.FillLogprobs(logits->prompt_row(i), prompt[i + 2], 3, &want);
    const TokenLogprobs& got = out->prompt_logprobs[i];
    EXPECT_EQ(got.token_id, prompt[i + 2]);
    EXPECT_EQ(std::memcmp(&got.logprob, &want.logprob, sizeof(float)), 0);
    EXPECT_EQ(got.rank, want.rank);
    EXPECT_EQ(got.top, want.top);
  }
  EXPECT_EQ(out->sampled[0].token_id, ArgMax(logits->row(0), 32000));
  r.Release({11});
  EXPECT_EQ(r.num_sampling_states(), 0u);
}

TEST(ExecutorSamplingTest, ASampledRequestThatWasNeverRegisteredIsAnError) {
  auto w = LoadLlama2cCheckpoint(std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin");
  ASSERT_TRUE(w.ok());
  ModelRunnerOptions o;
  o.num_kv_blocks = 4;
  auto runner = ModelRunner::Create(*w, CreateCpuBackend(1), o);
  ASSERT_TRUE(runner.ok());
  ScheduledBatch b;
  b.max_blocks_per_seq = 1;
  b.AddSequence({1, 2}, {0, 1}, {0, 1}, 2, {0}, true);
  b.request_keys = {5};
  b.output_index = {0};
  auto out = (*runner)->Execute(b);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("never registered"), std::string::npos);
}

}  // namespace
}  // namespace tinyserve
