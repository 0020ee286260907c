// Prompt logprobs through the EngineCore on the real stories260K model (CPU ModelRunner) equal
// the log-softmax of llama2.c's logits at every prompt position
// (../shared/golden/stories260K_logits_once_upon_a_time.json), in one prefill, chunk by chunk,
// and batched with other requests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "models/llama2c.h"
#include "models/model_runner.h"

namespace tinyserve {
namespace {

const std::string kLogprobsShared = TINYSERVE_SHARED_DIR;

struct Expected {
  std::vector<int32_t> prompt;
  std::vector<std::vector<float>> logits;  // [prompt positions][vocab]
};

Expected LoadGolden() {
  std::ifstream in(kLogprobsShared + "/golden/stories260K_logits_once_upon_a_time.json");
  EXPECT_TRUE(in);
  const nlohmann::json g = nlohmann::json::parse(in);
  Expected e;
  e.prompt = g["prompt_token_ids"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < e.prompt.size(); ++i) {
    EXPECT_EQ(g["steps"][i]["input_token"].get<int32_t>(), e.prompt[i]);
    e.logits.push_back(g["steps"][i]["logits"].get<std::vector<float>>());
  }
  return e;
}

class PromptLogprobsGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = LoadLlama2cCheckpoint(kLogprobsShared + "/models/stories260K.bin");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ModelRunnerOptions o;
    o.block_size = 4;
    o.num_kv_blocks = 64;
    auto r = ModelRunner::Create(*w, CreateCpuBackend(2), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    runner_ = std::move(r).value();
    golden_ = LoadGolden();
  }

  // Runs `requests` to the end on a fresh engine with this token budget; returns their outputs.
  std::vector<RequestOutput> Run(std::vector<EngineRequest> requests, int32_t budget) {
    EngineConfig config;
    config.max_num_batched_tokens = budget;
    EngineCore core(config, runner_.get(), &clock_);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (EngineRequest& r : requests) {
      auto s = core.Submit(std::move(r));
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) streams.push_back(*s);
    }
    for (int i = 0; i < 1000 && core.HasPendingWork(); ++i) core.Step();
    std::vector<RequestOutput> outs;
    for (auto& s : streams) {
      RequestOutput all, delta;
      while (s->TryNext(&delta)) all.Append(delta);
      EXPECT_TRUE(all.finished);
      outs.push_back(std::move(all));
    }
    return outs;
  }

  static EngineRequest Scored(const std::string& id, const std::vector<int32_t>& prompt,
                              int32_t top_n) {
    EngineRequest r;
    r.request_id = id;
    r.prompt_token_ids = prompt;
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = 1;
    r.sampling.prompt_logprobs = top_n;
    return r;
  }

  // Each entry against the golden logits at the previous position, in fp64.
  void ExpectGolden(const std::vector<TokenLogprobs>& got, int32_t top_n) {
    const std::vector<int32_t>& prompt = golden_.prompt;
    ASSERT_EQ(got.size(), prompt.size() - 1);
    for (size_t i = 1; i < prompt.size(); ++i) {
      const std::vector<float>& row = golden_.logits[i - 1];
      const double max = *std::max_element(row.begin(), row.end());
      double sum = 0.0;
      for (float x : row) sum += std::exp(x - max);
      const double lse = max + std::log(sum);
      const TokenLogprobs& t = got[i - 1];
      EXPECT_EQ(t.token_id, prompt[i]);
      EXPECT_NEAR(t.logprob, row[prompt[i]] - lse, 1e-4) << "position " << i;
      std::vector<int32_t> order(row.size());
      for (size_t v = 0; v < row.size(); ++v) order[v] = static_cast<int32_t>(v);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      ASSERT_EQ(t.top.size(), static_cast<size_t>(top_n));
      for (int32_t k = 0; k < top_n; ++k) {
        EXPECT_EQ(t.top[k].first, order[k]) << "position " << i << " rank " << k;
        EXPECT_NEAR(t.top[k].second, row[order[k]] - lse, 1e-4);
      }
    }
  }

  FakeClock clock_;
  std::unique_ptr<ModelRunner> runner_;
  Expected golden_;
};

TEST_F(PromptLogprobsGoldenTest, OnePrefillMatchesTheReferenceLogits) {
  const std::vector<RequestOutput> outs = Run({Scored("a", golden_.prompt, 5)}, 2048);
  ExpectGolden(outs[0].prompt_logprobs, 5);
  EXPECT_EQ(outs[0].token_ids, (std::vector<int32_t>{432}));  // the golden argmax at position 4
}

TEST_F(PromptLogprobsGoldenTest, ChunkedPrefillAndBatchingGiveTheSameValues) {
  // Budget 2: the prompt arrives in chunks of at most 2 positions, batched with another request.
  EngineRequest other = Scored("other", {1, 403, 407}, 0);
  other.sampling.prompt_logprobs.reset();
  other.sampling.max_tokens = 4;
  const std::vector<RequestOutput> outs =
      Run({Scored("a", golden_.prompt, 3), std::move(other), Scored("b", golden_.prompt, 20)}, 2);
  ExpectGolden(outs[0].prompt_logprobs, 3);
  EXPECT_TRUE(outs[1].prompt_logprobs.empty());
  ExpectGolden(outs[2].prompt_logprobs, 20);
}

}  // namespace
}  // namespace tinyserve
