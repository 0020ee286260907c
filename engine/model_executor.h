// ModelExecutor: the one interface the engine drives to run the model (DESIGN §2).
//
// Tokens, not logits, cross this seam: the executor samples (on its backend) and returns a few
// bytes per sampled row, following the sampling contract of ScheduledBatch (request keys,
// registrations, releases) and of engine/sampling_params.h.
//
// EngineCore calls Execute() once per step, from the engine thread only, with the batch the
// scheduler built. The executor owns the KV cache and the device; the scheduler owns which blocks
// belong to whom (it hands out block ids in [0, num_kv_blocks())). Implementations: the
// ModelRunner over a real model (models/), fake executors in tests.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/token_logprobs.h"
#include "engine/scheduled_batch.h"

namespace tinyserve {

struct ExecutorOutput {
  // One entry per sequence with sample[s] != 0, in sequence order: the sampled token, and its raw
  // logprob, rank and top-n when the request asked for logprobs.  [num_sampled]
  std::vector<TokenLogprobs> sampled;
  // One entry per prompt-logit row (ScheduledBatch::num_prompt_logits), sequence by sequence,
  // rows in order: the logprob and rank of the prompt token that row scores
  // (prompt_logit_targets) and its top-n.  [num_prompt_logit_rows]
  std::vector<TokenLogprobs> prompt_logprobs;
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;

  // Runs the forward pass for `batch`: writes each token's K/V into its slot, samples the sampled
  // rows and scores the prompt-logit rows. REQUIRES: every block id and slot of `batch` <
  // num_kv_blocks() * block_size(). Returns a non-OK status (and leaves no partial output) if the
  // batch is invalid or the device fails.
  virtual StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) = 0;

  // Structured outputs: true iff Execute() calls batch.AwaitBitmask() before it reads or copies
  // the words of batch.token_bitmask. The engine then computes those words on its mask worker
  // while Execute() runs (the forward pass overlaps the masks); otherwise (the default) they are
  // complete before Execute() is called.
  virtual bool AwaitsBitmaskFill() const { return false; }

  // Forgets the sampling state of these finished requests (keys it does not hold are ignored).
  // Called on the engine thread after each step in which requests finished, and at shutdown.
  virtual void Release(const std::vector<uint64_t>& keys) = 0;

  virtual int32_t num_kv_blocks() const = 0;
  virtual int32_t block_size() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t max_model_len() const = 0;
};

}  // namespace tinyserve
