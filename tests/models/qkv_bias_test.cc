// The Qwen2 q/k/v bias path: a one-layer model small enough to compute by hand, with and without
// the bias, against ModelRunner's logits.
#include <gtest/gtest.h>

#include <cmath>

#include "models/model_runner.h"

namespace tinyserve {
namespace {

// dim 2, one head of 2 (q, k, v all [2]), FFN that adds nothing (w13 = 0), wo = identity, norms
// of ones, lm_head = embedding = identity. Tokens 0 then 1, at positions 0 and 1.
std::shared_ptr<LlamaWeights> TinyModel(bool with_bias) {
  auto w = std::make_shared<LlamaWeights>();
  ModelConfig& c = w->config;
  c.dim = 2;
  c.hidden_dim = 1;
  c.num_layers = 1;
  c.num_heads = c.num_kv_heads = 1;
  c.head_dim = 2;
  c.vocab_size = 2;
  c.max_seq_len = 8;
  c.rope_style = RopeStyle::kNeox;
  c.attention_bias = with_bias;
  w->token_embedding = {1, 0, 0, 1};
  LlamaLayerWeights l;
  l.attn_norm = {1, 1};
  // q = 0.5 x, k = x, v = x (rows of wq, then wk, then wv).
  l.wqkv = {0.5f, 0, 0, 0.5f, 1, 0, 0, 1, 1, 0, 0, 1};
  if (with_bias) l.bqkv = {1.0f, -0.5f, 0.25f, 2.0f, 0.75f, -1.5f};
  l.wo = {1, 0, 0, 1};
  l.ffn_norm = {1, 1};
  l.w13 = {0, 0, 0, 0};
  l.w2 = {0, 0};
  w->layers.push_back(l);
  w->final_norm = {1, 1};
  return w;
}

// The logits at the second token, step by step in double.
std::vector<double> HandLogits(bool with_bias) {
  const double eps = 1e-5;
  const double s = 1.0 / std::sqrt(0.5 + eps);  // rmsnorm of a one-hot row of dim 2
  const double xb[2][2] = {{s, 0}, {0, s}};
  const double bq[2] = {with_bias ? 1.0 : 0, with_bias ? -0.5 : 0};
  const double bk[2] = {with_bias ? 0.25 : 0, with_bias ? 2.0 : 0};
  const double bv[2] = {with_bias ? 0.75 : 0, with_bias ? -1.5 : 0};
  double q[2][2], k[2][2], v[2][2];
  for (int t = 0; t < 2; ++t) {
    for (int j = 0; j < 2; ++j) {
      q[t][j] = 0.5 * xb[t][j] + bq[j];
      k[t][j] = xb[t][j] + bk[j];
      v[t][j] = xb[t][j] + bv[j];
    }
  }
  // RoPE with head_dim 2: one pair, inv_freq 1, angle = position. Position 0 is the identity.
  auto rot = [](double* h, double a) {
    const double x0 = h[0], x1 = h[1];
    h[0] = x0 * std::cos(a) - x1 * std::sin(a);
    h[1] = x0 * std::sin(a) + x1 * std::cos(a);
  };
  rot(q[1], 1.0);
  rot(k[1], 1.0);
  const double s0 = (q[1][0] * k[0][0] + q[1][1] * k[0][1]) / std::sqrt(2.0);
  const double s1 = (q[1][0] * k[1][0] + q[1][1] * k[1][1]) / std::sqrt(2.0);
  const double m = std::max(s0, s1);
  const double p0 = std::exp(s0 - m) / (std::exp(s0 - m) + std::exp(s1 - m));
  const double p1 = 1 - p0;
  // Residual: embedding of token 1 plus attention output (wo = identity); the FFN adds zero.
  const double x[2] = {0 + p0 * v[0][0] + p1 * v[1][0], 1 + p0 * v[0][1] + p1 * v[1][1]};
  const double r = 1.0 / std::sqrt((x[0] * x[0] + x[1] * x[1]) / 2 + eps);
  return {x[0] * r, x[1] * r};  // lm_head = identity
}

std::vector<float> RunnerLogits(bool with_bias) {
  ModelRunnerOptions o;
  o.block_size = 4;
  o.num_kv_blocks = 2;
  auto runner = ModelRunner::Create(TinyModel(with_bias), CreateCpuBackend(1), o);
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  ScheduledBatch batch;
  batch.max_blocks_per_seq = 2;
  batch.AddSequence({0, 1}, {0, 1}, {4, 5}, 2, {1, 0}, true);
  auto out = (*runner)->ComputeLogits(batch);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return {out->row(0)[0], out->row(0)[1]};
}

TEST(QkvBiasTest, BiasChangesLogitsExactlyAsTheHandComputationSays) {
  for (const bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    const std::vector<double> want = HandLogits(with_bias);
    const std::vector<float> got = RunnerLogits(with_bias);
    EXPECT_NEAR(got[0], want[0], 1e-5);
    EXPECT_NEAR(got[1], want[1], 1e-5);
  }
  // And the bias does matter here.
  EXPECT_GT(std::abs(HandLogits(true)[0] - HandLogits(false)[0]), 0.1);
}

TEST(QkvBiasTest, BiasOfTheWrongSizeIsRefused) {
  auto w = TinyModel(true);
  w->layers[0].bqkv.pop_back();
  ModelRunnerOptions o;
  o.block_size = 4;
  o.num_kv_blocks = 2;
  auto runner = ModelRunner::Create(w, CreateCpuBackend(1), o);
  ASSERT_FALSE(runner.ok());
  EXPECT_EQ(runner.status().message(), "layer 0: qkv bias has 5 values, want 6");
}

}  // namespace
}  // namespace tinyserve
