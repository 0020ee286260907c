// ModelExecutor: the one interface the engine drives to run the model (DESIGN §2).
//
// EngineCore calls Execute() once per step, from the engine thread only, with the batch the
// scheduler built. The executor owns the KV cache and the device; the scheduler owns which blocks
// belong to whom (it hands out block ids in [0, num_kv_blocks())). Implementations: the
// ModelRunner over a real model (models/), fake executors in tests.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduled_batch.h"
#include "engine/status.h"

namespace tinyserve {

struct ExecutorOutput {
  // Logits for each sequence with sample[s] != 0, in sequence order: [num_sampled, vocab_size]
  // fp32.
  std::vector<float> logits;
  // Logits of the prompt-logit rows (ScheduledBatch::num_prompt_logits), sequence by sequence,
  // rows in order: [num_prompt_logit_rows, vocab_size] fp32. Empty when the batch asks for none.
  std::vector<float> prompt_logits;
  int32_t vocab_size = 0;

  const float* row(int32_t i) const { return logits.data() + static_cast<size_t>(i) * vocab_size; }
  const float* prompt_row(int32_t i) const {
    return prompt_logits.data() + static_cast<size_t>(i) * vocab_size;
  }
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;

  // Runs the forward pass for `batch`: writes each token's K/V into its slot and returns logits
  // for the sampled rows and the prompt-logit rows. REQUIRES: every block id and slot of `batch` <
  // num_kv_blocks() * block_size(). Returns a non-OK status (and leaves no partial output) if the
  // batch is invalid or the device fails.
  virtual StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) = 0;

  virtual int32_t num_kv_blocks() const = 0;
  virtual int32_t block_size() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t max_model_len() const = 0;
};

}  // namespace tinyserve
