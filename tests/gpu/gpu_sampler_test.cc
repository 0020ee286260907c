// GpuSampler against the CPU sampler (kernels/cpu/cpu_sampler.h) on random logits rows: the same
// tokens for greedy, temperature, min_p, top_k (with ties at the k-th value) and top_p, the same
// Philox draw per (seed, output index), and the same raw logprobs, ranks and top-n. Skips without a
// CUDA device.
#include <random>

#include "engine/request.h"
#include "kernels/cpu/cpu_sampler.h"
#include "kernels/gpu_sampler.h"
#include "models/sampling_state_table.h"
#include "tests/gpu/gpu_test_util.h"

namespace tinyserve {
namespace {

struct Params {
  float temperature, top_p, min_p;
  int32_t top_k;
  int32_t logprobs;  // -1: none
};

TEST(GpuSamplerTest, MatchesTheCpuSamplerRowForRow) {
  TS_SKIP_WITHOUT_CUDA();
  std::unique_ptr<Backend> gpu = MakeCudaBackend(DType::kFloat32);
  ASSERT_NE(gpu, nullptr);
  const std::vector<Params> params = {
      {0.0f, 1.0f, 0.0f, 0, 5},      {1.0f, 1.0f, 0.0f, 0, -1},   {0.7f, 0.9f, 0.0f, 0, 3},
      {1.3f, 1.0f, 0.0f, 40, -1},    {0.8f, 0.5f, 0.05f, 17, 20}, {1.0f, 1.0f, 0.2f, 0, 0},
      {2.0f, 0.95f, 0.0f, 1000, -1}, {0.5f, 0.1f, 0.0f, 2, 1},
  };
  std::mt19937 rng(11);
  for (int32_t vocab : {97, 512, 32000, 128256}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int32_t rows = 2 * static_cast<int32_t>(params.size());
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (float& x : logits) x = d(rng);
    // Ties: row 1 repeats a value many times, around its top-k boundary too.
    for (int32_t i = 0; i < vocab; i += 3) logits[vocab + i] = 2.5f;
    DeviceBuffer d_logits(gpu.get(), logits.size() * 4);
    gpu->CopyToDevice(d_logits.as<void>(), logits.data(), logits.size() * 4);
    ASSERT_TRUE(gpu->Synchronize().ok());

    auto sampler = GpuSampler::Create(vocab, rows);
    ASSERT_TRUE(sampler.ok()) << sampler.status().ToString();
    std::vector<GpuSamplingRow> gpu_rows(rows);
    std::vector<Request> reqs(rows);
    for (int32_t r = 0; r < rows; ++r) {
      const Params& p = params[r % params.size()];
      Request& req = reqs[r];
      req.sampling.temperature = p.temperature;
      req.sampling.top_p = p.top_p;
      req.sampling.min_p = p.min_p;
      req.sampling.top_k = p.top_k;
      if (p.logprobs >= 0) req.sampling.logprobs = p.logprobs;
      req.seed = 1000 + r;
      req.token_ids = {1, 2, 3};
      req.num_prompt_tokens = 1;  // two outputs so far: output index 2
      GpuSamplingRow& g = gpu_rows[r];
      g.seed = req.seed;
      g.output_index = 2;
      g.temperature = p.temperature;
      g.top_p = p.top_p;
      g.min_p = p.min_p;
      g.top_k = p.top_k;
      g.num_logprobs = p.logprobs;
    }
    std::vector<GpuSampleResult> got;
    ASSERT_TRUE((*sampler)->Sample(d_logits.as<float>(), gpu_rows, &got).ok());
    CpuSampler cpu(vocab);
    for (int32_t r = 0; r < rows; ++r) {
      SCOPED_TRACE("row " + std::to_string(r));
      TokenLogprobs lp;
      const SamplingSpec spec =
          SamplingStateTable::MakeSpec(reqs[r].sampling, reqs[r].seed, reqs[r].eos_token_id, vocab);
      const SampleRow row{&spec, nullptr, static_cast<uint64_t>(reqs[r].num_output_tokens())};
      const int32_t want = cpu.Sample(row, &logits[static_cast<size_t>(r) * vocab], &lp);
      EXPECT_EQ(got[r].token, want);
      if (gpu_rows[r].num_logprobs >= 0) {
        EXPECT_NEAR(got[r].logprob, lp.logprob, 1e-5);
        EXPECT_EQ(got[r].rank, lp.rank);
        ASSERT_EQ(got[r].top.size(), lp.top.size());
        for (size_t j = 0; j < lp.top.size(); ++j) {
          EXPECT_EQ(got[r].top[j].first, lp.top[j].first);
          EXPECT_NEAR(got[r].top[j].second, lp.top[j].second, 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tinyserve
