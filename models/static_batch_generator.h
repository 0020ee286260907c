// StaticBatchGenerator: runs a fixed set of prompts to completion on a ModelRunner with greedy
// decoding on its logits (ComputeLogits), without a scheduler: every step holds every unfinished
// sequence, prefills are split into chunks of at most `prefill_chunk` tokens, and each sequence
// gets its KV blocks from a caller-chosen list (so tests can use shuffled, non-contiguous block
// tables).
//
// It is the scheduler-free oracle the engine is checked against, and what `generate` uses for
// greedy runs of a handful of prompts. Greedy: argmax over fp32 logits, lowest id wins ties.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "models/model_runner.h"

namespace tinyserve {

struct StaticBatchOptions {
  int32_t prefill_chunk = 1 << 30;  // max prompt tokens per sequence per step
  // Block ids handed out in this order (empty: 0, 1, 2, ...). Must hold enough blocks for every
  // sequence's full length.
  std::vector<int32_t> block_order;
  std::vector<int32_t> stop_token_ids;  // sampling one of these ends the sequence (it is kept)
};

struct GeneratedSequence {
  std::vector<int32_t> output_ids;  // generated ids, the stop token included if one was sampled
  bool stopped = false;             // true iff it ended on a stop token
  // Logits that produced each output token, [num_outputs][vocab], when `keep_logits`.
  std::vector<std::vector<float>> logits;
};

// Greedy argmax; the lowest index wins ties. REQUIRES: n > 0.
int32_t ArgMax(const float* logits, int32_t n);

// Runs `prompts` (token ids, BOS included if wanted) for up to max_tokens[i] new tokens each
// (also stopping at the executor's max_model_len). Returns an error if the executor fails or there
// are not enough blocks.
StatusOr<std::vector<GeneratedSequence>> GenerateStaticBatch(
    ModelRunner& executor, const std::vector<std::vector<int32_t>>& prompts,
    const std::vector<int32_t>& max_tokens, const StaticBatchOptions& options,
    bool keep_logits = false);

}  // namespace tinyserve
