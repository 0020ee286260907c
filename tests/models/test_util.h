// Helpers shared by the model-file tests: a scratch directory, and the stories260K golden check.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <cstdint>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "models/llama_weights.h"
#include "models/model_runner.h"
#include "models/static_batch_generator.h"

namespace tinyserve::testing_util {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_((std::filesystem::temp_directory_path() /
               ("tinyserve_" + name + "_" + std::to_string(getpid())))
                  .string()) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Weights of `config`'s shape drawn uniformly from [-0.5, 0.5] (norms too), seeded; a q/k/v bias
// when config.attention_bias.
inline std::shared_ptr<LlamaWeights> RandomWeights(const ModelConfig& config, uint32_t seed) {
  auto w = std::make_shared<LlamaWeights>();
  w->config = config;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto fill = [&](std::vector<float>& v, int64_t n) {
    v.resize(n);
    for (float& x : v) x = u(rng);
  };
  const int64_t d = config.dim, q = config.q_dim(), kv = config.kv_dim(), h = config.hidden_dim;
  fill(w->token_embedding, config.vocab_size * d);
  w->layers.resize(config.num_layers);
  for (auto& l : w->layers) {
    fill(l.attn_norm, d);
    fill(l.wqkv, (q + 2 * kv) * d);
    if (config.attention_bias) fill(l.bqkv, q + 2 * kv);
    fill(l.wo, d * q);
    fill(l.ffn_norm, d);
    fill(l.w13, 2 * h * d);
    fill(l.w2, d * h);
  }
  fill(w->final_norm, d);
  if (!config.shared_classifier) fill(w->classifier, config.vocab_size * d);
  return w;
}

// A small Llama config: dim 16, 2 layers, 4 heads (2 kv), hidden 24, vocab 40, ctx 64, HF layout.
inline ModelConfig TinyConfig() {
  ModelConfig c;
  c.dim = 16;
  c.hidden_dim = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 40;
  c.max_seq_len = 64;
  c.rope_style = RopeStyle::kNeox;
  c.shared_classifier = false;
  c.bos_token_id = 1;
  c.stop_token_ids = {2};
  return c;
}

// A config for quantized GGUF files: dim and hidden multiples of 256 (the K-quant super-block),
// GQA 4:2, head_dim 64, vocab 512 (../shared/models/tok512.bin), llama2.c's interleaved rope rows;
// 8 layers by default, so that Q4_K_M's use_more_bits picks layers 0, 3, 6 and 7.
inline ModelConfig QuantBlockConfig(bool tied, int32_t num_layers = 8) {
  ModelConfig c;
  c.dim = 256;
  c.hidden_dim = 512;
  c.num_layers = num_layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 512;
  c.max_seq_len = 64;
  c.rope_style = RopeStyle::kInterleaved;
  c.shared_classifier = tied;
  c.bos_token_id = 1;
  c.stop_token_ids = {2};
  return c;
}

// Runs every golden case of ../shared/golden/stories260K_greedy.json in one batch on `weights`
// (stopping on BOS, as run.c) and expects run.c's output ids exactly.
inline void ExpectGoldenGreedy(std::shared_ptr<const LlamaWeights> weights) {
  std::ifstream in(std::string(TINYSERVE_SHARED_DIR) + "/golden/stories260K_greedy.json");
  ASSERT_TRUE(in);
  const nlohmann::json g = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> prompts, want;
  std::vector<int32_t> max_tokens;
  for (const auto& c : g["cases"]) {
    prompts.push_back(c["prompt_token_ids"].get<std::vector<int32_t>>());
    want.push_back(c["output_token_ids"].get<std::vector<int32_t>>());
    // run.c's steps count the prompt, and the token sampled at the last step is printed.
    max_tokens.push_back(c["steps"].get<int32_t>() - static_cast<int32_t>(prompts.back().size()) +
                         1);
  }
  ModelRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 64;
  auto runner = ModelRunner::Create(std::move(weights), CreateCpuBackend(2), o);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  StaticBatchOptions opts;
  opts.stop_token_ids = {1};
  auto results = GenerateStaticBatch(**runner, prompts, max_tokens, opts);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  ASSERT_EQ(results->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*results)[i].output_ids, want[i]) << "golden case " << i;
  }
}

}  // namespace tinyserve::testing_util
