// Golden tests: the CPU forward pass over the paged KV cache reproduces llama2.c's run.c on the
// real stories260K model (../shared/golden), token for token, whatever the batching, prefill
// chunking, block size and block-table order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "models/llama2c.h"
#include "models/model_runner.h"
#include "models/static_batch_generator.h"
#include "models/tokenizer/llama2c_tokenizer.h"

namespace tinyserve {
namespace {

const std::string kShared = TINYSERVE_SHARED_DIR;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return nlohmann::json::parse(in);
}

struct GoldenCase {
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::string output_text;
  int32_t steps;
};

class GoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto w = LoadLlama2cCheckpoint(kShared + "/models/stories260K.bin");
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    weights_ = new std::shared_ptr<const LlamaWeights>(*w);
    const nlohmann::json g = ReadJson(kShared + "/golden/stories260K_greedy.json");
    cases_ = new std::vector<GoldenCase>();
    for (const auto& c : g["cases"]) {
      cases_->push_back({c["prompt"], c["prompt_token_ids"], c["output_token_ids"],
                         c["output_text"], c["steps"]});
    }
  }
  static void TearDownTestSuite() {
    delete weights_;
    delete cases_;
  }

  static std::unique_ptr<ModelRunner> MakeRunner(int32_t block_size, int32_t num_blocks,
                                                 int threads = 2) {
    ModelRunnerOptions o;
    o.block_size = block_size;
    o.num_kv_blocks = num_blocks;
    auto r = ModelRunner::Create(*weights_, CreateCpuBackend(threads), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }

  // run.c's `steps` counts forwarded positions including the prompt (BOS included), and the token
  // sampled at the last position is still printed: steps - prompt_len + 1 new tokens.
  static int32_t MaxTokens(const GoldenCase& c) {
    return c.steps - static_cast<int32_t>(c.prompt_ids.size()) + 1;
  }

  // Runs all golden cases (in one batch when `together`) and checks every output id.
  static void ExpectGolden(ModelRunner& runner, StaticBatchOptions opts, bool together) {
    opts.stop_token_ids = {1};
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int32_t> max_tokens;
    for (const auto& c : *cases_) {
      prompts.push_back(c.prompt_ids);
      max_tokens.push_back(MaxTokens(c));
    }
    std::vector<GeneratedSequence> results;
    if (together) {
      auto r = GenerateStaticBatch(runner, prompts, max_tokens, opts);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      results = *r;
    } else {
      for (size_t i = 0; i < prompts.size(); ++i) {
        auto r = GenerateStaticBatch(runner, {prompts[i]}, {max_tokens[i]}, opts);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        results.push_back((*r)[0]);
      }
    }
    for (size_t i = 0; i < cases_->size(); ++i) {
      EXPECT_EQ(results[i].output_ids, (*cases_)[i].output_ids) << "case " << i;
    }
  }

  static std::shared_ptr<const LlamaWeights>* weights_;
  static std::vector<GoldenCase>* cases_;
};

std::shared_ptr<const LlamaWeights>* GoldenTest::weights_ = nullptr;
std::vector<GoldenCase>* GoldenTest::cases_ = nullptr;

TEST_F(GoldenTest, LogitsMatchRunCAtEveryPosition) {
  const nlohmann::json g = ReadJson(kShared + "/golden/stories260K_logits_once_upon_a_time.json");
  const auto& steps = g["steps"];
  ASSERT_EQ(steps.size(), 24u);
  auto runner = MakeRunner(16, 4);
  // Feed the golden input tokens one position at a time (decode steps over a growing cache).
  const int32_t max_blocks = (runner->max_model_len() + 15) / 16;
  std::vector<int32_t> blocks = {2, 0, 3, 1};
  for (size_t i = 0; i < steps.size(); ++i) {
    const int32_t pos = steps[i]["pos"];
    ASSERT_EQ(pos, static_cast<int32_t>(i));
    ScheduledBatch batch;
    batch.max_blocks_per_seq = max_blocks;
    batch.AddSequence({steps[i]["input_token"].get<int32_t>()}, {pos},
                      {static_cast<int64_t>(blocks[pos / 16]) * 16 + pos % 16}, pos + 1, blocks,
                      true);
    auto out = runner->ComputeLogits(batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const std::vector<float> want = steps[i]["logits"];
    ASSERT_EQ(static_cast<int32_t>(want.size()), out->vocab_size);
    float max_err = 0.0f;
    for (size_t v = 0; v < want.size(); ++v) {
      max_err = std::max(max_err, std::abs(out->row(0)[v] - want[v]));
    }
    EXPECT_LE(max_err, 1e-4f) << "position " << pos;
    EXPECT_EQ(ArgMax(out->row(0), out->vocab_size), steps[i]["argmax"].get<int32_t>());
  }
}

TEST_F(GoldenTest, GreedyOutputsMatchRunCOneByOne) {
  auto runner = MakeRunner(16, 64);
  ExpectGolden(*runner, {}, /*together=*/false);
}

TEST_F(GoldenTest, GreedyOutputTextMatchesRunC) {
  auto tok = LoadLlama2cTokenizer(kShared + "/models/tok512.bin", 512);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  for (const auto& c : *cases_) {
    EXPECT_EQ((*tok)->Encode(c.prompt, true), c.prompt_ids) << c.prompt;
    std::vector<int32_t> all = c.prompt_ids;
    all.insert(all.end(), c.output_ids.begin(), c.output_ids.end());
    // run.c prints the prompt (without BOS), the generated text, then a newline.
    EXPECT_EQ((*tok)->Decode(all) + "\n", c.output_text) << c.prompt;
  }
}

TEST_F(GoldenTest, GreedyOutputsMatchRunCInOneBatch) {
  auto runner = MakeRunner(16, 64);
  ExpectGolden(*runner, {}, /*together=*/true);
}

class GoldenChunkTest : public GoldenTest, public ::testing::WithParamInterface<int32_t> {};

TEST_P(GoldenChunkTest, ChunkedPrefillGivesTheSameTokens) {
  auto runner = MakeRunner(16, 64);
  StaticBatchOptions opts;
  opts.prefill_chunk = GetParam();
  ExpectGolden(*runner, opts, /*together=*/true);
}

INSTANTIATE_TEST_SUITE_P(Chunks, GoldenChunkTest, ::testing::Values(1, 3, 7));

class GoldenBlockSizeTest : public GoldenTest, public ::testing::WithParamInterface<int32_t> {};

TEST_P(GoldenBlockSizeTest, BlockSizeDoesNotChangeTokens) {
  const int32_t bs = GetParam();
  const int32_t blocks_per_seq = (512 + bs - 1) / bs;
  auto runner = MakeRunner(bs, 3 * blocks_per_seq);
  StaticBatchOptions opts;
  opts.prefill_chunk = 3;
  ExpectGolden(*runner, opts, /*together=*/true);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, GoldenBlockSizeTest, ::testing::Values(1, 4, 16));

TEST_F(GoldenTest, ShuffledBlockTablesGiveTheSameTokens) {
  for (int32_t bs : {1, 4, 16}) {
    const int32_t total = 3 * ((512 + bs - 1) / bs) + 5;
    auto runner = MakeRunner(bs, total);
    StaticBatchOptions opts;
    opts.block_order.resize(total);
    std::iota(opts.block_order.begin(), opts.block_order.end(), 0);
    std::mt19937 rng(1234 + bs);
    std::shuffle(opts.block_order.begin(), opts.block_order.end(), rng);
    opts.prefill_chunk = 7;
    ExpectGolden(*runner, opts, /*together=*/true);
  }
}

TEST_F(GoldenTest, OneThreadAndTwoThreadsAgree) {
  auto one = MakeRunner(16, 64, 1);
  ExpectGolden(*one, {}, /*together=*/true);
}

}  // namespace
}  // namespace tinyserve
