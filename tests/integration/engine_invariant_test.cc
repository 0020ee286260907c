// The engine's invariant on the real stories260K model (DESIGN §3): every request's output is the
// same whether it ran alone or in a crowded batch whose KV cache is so small that requests are
// preempted (and recomputed) again and again; afterwards every block is free.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "models/llama2c.h"
#include "models/model_runner.h"
#include "models/static_batch_generator.h"

namespace tinyserve {
namespace {

const std::string kInvariantShared = TINYSERVE_SHARED_DIR;

class CountingObserver final : public EngineObserver {
 public:
  void OnRequestEvent(const RequestRecord&, const RequestEvent&) override {}
  void OnStep(const SchedulerStats& stats) override {
    preemptions += stats.num_preemptions;
    last = stats;
  }
  int64_t preemptions = 0;
  SchedulerStats last;
};

struct Case {
  std::vector<int32_t> prompt;
  int32_t max_tokens;
};

std::vector<Case> MakeCases(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> len(1, 48), tok(3, 511), out(1, 200);
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) {
    Case c;
    c.prompt.push_back(1);  // BOS
    const int32_t l = len(rng);
    for (int32_t j = 1; j < l; ++j) c.prompt.push_back(tok(rng));
    c.max_tokens = out(rng);
    cases.push_back(c);
  }
  // A few share a long prefix, so prefix caching has something to hit.
  for (int i = 0; i < n / 4; ++i) {
    cases[i].prompt.resize(std::min<size_t>(cases[i].prompt.size(), 8));
    cases[i].prompt.insert(cases[i].prompt.begin() + 1, cases[n - 1].prompt.begin() + 1,
                           cases[n - 1].prompt.end());
  }
  return cases;
}

class EngineInvariantTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto w = LoadLlama2cCheckpoint(kInvariantShared + "/models/stories260K.bin");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    weights_ = new std::shared_ptr<const LlamaWeights>(*w);
  }
  static void TearDownTestSuite() { delete weights_; }

  static std::unique_ptr<ModelRunner> MakeRunner(int32_t block_size, int32_t num_blocks) {
    ModelRunnerOptions o;
    o.block_size = block_size;
    o.num_kv_blocks = num_blocks;
    auto r = ModelRunner::Create(*weights_, CreateCpuBackend(2), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }

  // Runs every case through one engine (synchronous steps) and returns the outputs by index.
  static std::vector<std::vector<int32_t>> RunEngine(const std::vector<Case>& cases,
                                                     ModelRunner& runner, EngineConfig config,
                                                     const SamplingParams& base,
                                                     CountingObserver* observer) {
    FakeClock clock;
    config.eos_token_id = 1;  // llama2.c models stop on BOS
    EngineCore engine(config, &runner, &clock);
    if (observer != nullptr) engine.AddObserver(observer);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < cases.size(); ++i) {
      EngineRequest req;
      req.request_id = "r" + std::to_string(i);
      req.prompt_token_ids = cases[i].prompt;
      req.sampling = base;
      req.sampling.max_tokens = cases[i].max_tokens;
      if (base.seed) req.sampling.seed = *base.seed + i;
      auto s = engine.Submit(req);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    int steps = 0;
    while (engine.HasPendingWork() && steps < 100000) {
      engine.Step();
      clock.Advance(0.001);
      ++steps;
    }
    std::vector<std::vector<int32_t>> outputs;
    for (auto& s : streams) {
      RequestOutput out;
      EXPECT_TRUE(s->WaitForFinish(&out, 0.0));
      EXPECT_NE(out.finish_reason, FinishReason::kAbort);
      EXPECT_NE(out.finish_reason, FinishReason::kError) << out.error_message;
      outputs.push_back(out.token_ids);
    }
    return outputs;
  }

  // Each seeded case alone, in an engine of its own with room to spare (RunEngine seeds request k
  // with base seed + k; alone, k is 0, so case i gets base + i here too). The first `n` cases, or
  // all.
  static std::vector<std::vector<int32_t>> SeededAlone(const std::vector<Case>& cases,
                                                       const SamplingParams& base,
                                                       size_t n = SIZE_MAX) {
    auto runner = MakeRunner(16, 64);
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < std::min(n, cases.size()); ++i) {
      SamplingParams p = base;
      p.seed = *base.seed + i;
      p.max_tokens = cases[i].max_tokens;
      alone.push_back(RunEngine({cases[i]}, *runner, EngineConfig{}, p, nullptr)[0]);
    }
    EXPECT_EQ(runner->num_sampling_states(), 0u);
    return alone;
  }

  static std::shared_ptr<const LlamaWeights>* weights_;
};

std::shared_ptr<const LlamaWeights>* EngineInvariantTest::weights_ = nullptr;

void ExpectSameAsAlone(const std::vector<std::vector<int32_t>>& crowded,
                       const std::vector<std::vector<int32_t>>& alone) {
  ASSERT_EQ(crowded.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_EQ(crowded[i], alone[i]) << "request " << i;
}

TEST_F(EngineInvariantTest, GreedyOutputsSurvivePreemptionStorms) {
  const std::vector<Case> cases = MakeCases(64, 7);
  // Alone: the scheduler-free oracle, one request at a time.
  std::vector<std::vector<int32_t>> alone;
  {
    auto runner = MakeRunner(16, 64);
    StaticBatchOptions opts;
    opts.stop_token_ids = {1};
    for (const Case& c : cases) {
      auto r = GenerateStaticBatch(*runner, {c.prompt}, {c.max_tokens}, opts);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      alone.push_back((*r)[0].output_ids);
    }
  }
  for (bool prefix_caching : {true, false}) {
    SCOPED_TRACE(prefix_caching ? "prefix caching on" : "prefix caching off");
    auto runner = MakeRunner(16, 24);  // 384 slots for 64 requests of up to ~250 tokens
    EngineConfig config;
    config.max_num_seqs = 64;
    config.max_num_batched_tokens = 256;
    config.enable_prefix_caching = prefix_caching;
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    CountingObserver obs;
    ExpectSameAsAlone(RunEngine(cases, *runner, config, greedy, &obs), alone);
    EXPECT_GE(obs.preemptions, 20);
    EXPECT_EQ(obs.last.num_used_blocks, 0);
    EXPECT_EQ(obs.last.num_running, 0);
    EXPECT_EQ(obs.last.num_waiting, 0);
  }
}

TEST_F(EngineInvariantTest, SeededSamplingSurvivesPreemptionStorms) {
  const std::vector<Case> cases = MakeCases(64, 11);
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.seed = 1000;
  const std::vector<std::vector<int32_t>> alone = SeededAlone(cases, sampled);
  for (bool prefix_caching : {true, false}) {
    SCOPED_TRACE(prefix_caching ? "prefix caching on" : "prefix caching off");
    auto runner = MakeRunner(16, 24);
    EngineConfig config;
    config.max_num_seqs = 64;
    config.max_num_batched_tokens = 256;
    config.enable_prefix_caching = prefix_caching;
    CountingObserver obs;
    ExpectSameAsAlone(RunEngine(cases, *runner, config, sampled, &obs), alone);
    EXPECT_GE(obs.preemptions, 20);
    EXPECT_EQ(obs.last.num_used_blocks, 0);
  }
}

// The penalties read each request's token history, which the executor keeps and extends step by
// step (models/sampling_state_table.h) and must carry through every preemption and recompute.
TEST_F(EngineInvariantTest, PenalizedSeededSamplingSurvivesPreemptionStorms) {
  const std::vector<Case> cases = MakeCases(32, 13);
  SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.seed = 500;
  sampled.repetition_penalty = 1.4f;
  sampled.frequency_penalty = 0.6f;
  sampled.presence_penalty = 0.3f;
  const std::vector<std::vector<int32_t>> alone = SeededAlone(cases, sampled);
  auto runner = MakeRunner(16, 16);
  EngineConfig config;
  config.max_num_seqs = 32;
  config.max_num_batched_tokens = 128;
  CountingObserver obs;
  ExpectSameAsAlone(RunEngine(cases, *runner, config, sampled, &obs), alone);
  EXPECT_GE(obs.preemptions, 10);
  EXPECT_EQ(runner->num_sampling_states(), 0u);
  // The penalties change what is sampled (so the comparison above is not vacuous).
  SamplingParams plain = sampled;
  plain.repetition_penalty = 1.0f;
  plain.frequency_penalty = 0.0f;
  plain.presence_penalty = 0.0f;
  const std::vector<std::vector<int32_t>> unpenalized = SeededAlone(cases, plain, 8);
  int differing = 0;
  for (size_t i = 0; i < unpenalized.size(); ++i) differing += unpenalized[i] != alone[i];
  EXPECT_GT(differing, 0);
}

}  // namespace
}  // namespace tinyserve
