// NoopExecutor: a ModelExecutor that computes nothing, so a benchmark's step time is the engine's
// own (scheduler, block pool, sampling, outputs). Sampled row r gets logits that make token
// r % vocab the argmax.
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
    out.vocab_size = vocab_;
    const int32_t num_sampled = batch.num_sampled();
    out.logits.assign(static_cast<size_t>(num_sampled) * vocab_, 0.0f);
    for (int32_t r = 0; r < num_sampled; ++r) {
      out.logits[static_cast<size_t>(r) * vocab_ + (r % vocab_)] = 1.0f;
    }
    out.prompt_logits.assign(static_cast<size_t>(batch.num_prompt_logit_rows()) * vocab_, 0.0f);
    return out;
  }
  int32_t num_kv_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return block_size_; }
  int32_t vocab_size() const override { return vocab_; }
  int32_t max_model_len() const override { return max_len_; }

 private:
  int32_t num_blocks_, block_size_, vocab_, max_len_;
};

}  // namespace tinyserve
