// ModelRunner: the ModelExecutor over a Llama-family model on one Backend (DESIGN §2, §7).
//
// It owns the backend, its own copy of the weights in backend memory, the paged KV cache
// (per layer K and V [num_kv_blocks, block_size, num_kv_heads, head_dim] fp32) and the activation
// workspace, and runs one ScheduledBatch per Execute(): every sequence of the batch is a prefill
// chunk over its cached prefix or one decode token; logits come back for the sequences that
// sample. Not thread-safe: the engine thread alone calls Execute().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model_executor.h"
#include "kernels/backend.h"
#include "models/llama_weights.h"

namespace tinyserve {

struct ModelRunnerOptions {
  int32_t block_size = 16;
  int32_t num_kv_blocks = 0;  // REQUIRES: > 0
  int32_t max_model_len = 0;  // 0: the model's context length
};

class ModelRunner final : public ModelExecutor {
 public:
  // Uploads `weights` to `backend` and allocates the KV cache. Returns an error if the options are
  // invalid or memory cannot be had.
  static StatusOr<std::unique_ptr<ModelRunner>> Create(std::shared_ptr<const LlamaWeights> weights,
                                                       std::unique_ptr<Backend> backend,
                                                       const ModelRunnerOptions& options);
  ~ModelRunner() override;

  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override;

  int32_t num_kv_blocks() const override { return options_.num_kv_blocks; }
  int32_t block_size() const override { return options_.block_size; }
  int32_t vocab_size() const override { return config_.vocab_size; }
  int32_t max_model_len() const override { return options_.max_model_len; }

  const ModelConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }

  // Bytes of KV cache one token occupies (all layers, K and V, fp32).
  static int64_t KvBytesPerToken(const ModelConfig& config);

 private:
  struct LayerPtrs {
    const float* attn_norm;
    const float* wqkv;
    const float* bqkv;  // nullptr: no bias
    const float* wo;
    const float* ffn_norm;
    const float* w13;
    const float* w2;
    float* k_cache;
    float* v_cache;
  };

  ModelRunner(std::shared_ptr<const LlamaWeights> weights, std::unique_ptr<Backend> backend,
              const ModelRunnerOptions& options);
  Status Init();
  const float* Upload(const std::vector<float>& host);
  Status EnsureWorkspace(int32_t num_tokens, int32_t num_seqs, int32_t num_sampled,
                         int32_t max_blocks_per_seq);

  const ModelConfig config_;
  // Held only until Init() has copied the weights into the backend's memory (which, on the CPU,
  // is 2 MiB-aligned and backed by huge pages); dropped after, so the runner keeps one copy.
  std::shared_ptr<const LlamaWeights> weights_;
  std::unique_ptr<Backend> backend_;
  ModelRunnerOptions options_;

  std::vector<DeviceBuffer> weight_buffers_;  // empty when the backend reads host memory
  const float* embedding_ = nullptr;
  const float* final_norm_ = nullptr;
  const float* lm_head_ = nullptr;
  const float* rope_inv_freq_ = nullptr;  // [head_dim / 2]
  std::vector<LayerPtrs> layers_;
  DeviceBuffer kv_cache_;

  // Workspace, grown on demand: capacity in tokens / sequences / sampled rows / table entries.
  int32_t cap_tokens_ = 0, cap_seqs_ = 0, cap_sampled_ = 0, cap_table_ = 0;
  DeviceBuffer x_, xb_, qkv_, att_, delta_, gate_up_, hidden_, sampled_x_, logits_;
  DeviceBuffer d_tokens_, d_positions_, d_slots_, d_query_start_, d_block_tables_, d_sample_rows_;
};

}  // namespace tinyserve
