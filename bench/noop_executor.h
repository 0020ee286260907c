// NoopExecutor: a ModelExecutor that computes nothing, so a benchmark's step time is the engine's
// own (scheduler, block pool, outputs). Sampled row r gets token r % vocab (the sampling itself
// is the executor's, and this one has no model to sample from).
#pragma once

#include <cstdint>

#include "engine/model_executor.h"

namespace tinyserve {

class NoopExecutor final : public ModelExecutor {
 public:
  NoopExecutor(int32_t num_blocks, int32_t block_size, int32_t vocab, int32_t max_model_len)
      : num_blocks_(num_blocks), block_size_(block_size), vocab_(vocab), max_len_(max_model_len) {}

  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override {
    ExecutorOutput out;
    const int32_t num_sampled = batch.num_sampled();
    out.sampled.resize(num_sampled);
    for (int32_t r = 0; r < num_sampled; ++r) out.sampled[r].token_id = r % vocab_;
    out.prompt_logprobs.resize(batch.num_prompt_logit_rows());
    return out;
  }
  void Release(const std::vector<uint64_t>&) override {}  // keeps no sampling state
  int32_t num_kv_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return block_size_; }
  int32_t vocab_size() const override { return vocab_; }
  int32_t max_model_len() const override { return max_len_; }

 private:
  int32_t num_blocks_, block_size_, vocab_, max_len_;
};

}  // namespace tinyserve
