// ScheduledBatch: everything the model needs to run one engine step, and nothing hidden elsewhere.
//
// The scheduler builds one per step; a ModelExecutor consumes it. A batch holds `num_seqs`
// sequences. Each sequence contributes a contiguous run of query tokens: a prefill chunk (any
// length, continuing after `context_len - num_query_tokens` tokens already in the KV cache) or a
// single decode token. Tokens of sequence s occupy rows [query_start[s], query_start[s+1]).
//
// KV cache addressing (DESIGN §3): slot = block_id * block_size + offset; slot -1 marks a padding
// row whose K/V is not written. Attention for a query token at position p reads positions
// [0, p] of its sequence through that sequence's block table (causal).
//
// Sampling happens in the executor (tokens, not logits, cross the seam): every sequence names its
// request by `request_keys[s]`; the executor learns a request's sampling parameters and token
// history once, from `new_requests` (the first batch that schedules it), keeps them, extends the
// history with each token it samples, and forgets them when the engine releases the key
// (ModelExecutor::Release, once the request finished). A sampled key it does not know is an
// error; a released key it does not know is ignored.
//
// A plain value type: copyable, no pointers into other objects but `bitmask_fill` (shared, so a
// copy keeps it alive). Validate() checks every invariant an executor relies on, so a bad batch is
// an error value rather than a wild memory access.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/status.h"
#include "engine/bitmask_fill.h"
#include "engine/sampling_params.h"

namespace tinyserve {

// What the executor keeps about one request for sampling.
struct SamplingRegistration {
  uint64_t key = 0;
  SamplingParams params;
  uint64_t seed = 0;  // the request's seed (drawn at submit when unseeded)
  // Every id that ends the request as EOS (its eos_token_id, then the engine's extra EOS ids):
  // masked while outputs < min_tokens, as its stop_token_ids are (unless ignore_eos).
  std::vector<int32_t> eos_token_ids;
  std::vector<int32_t> token_ids;  // prompt, then the outputs so far (after a preemption)
  int32_t num_prompt_tokens = 0;
};

struct ScheduledBatch {
  // Per token, [num_tokens]:
  std::vector<int32_t> token_ids;     // input token id
  std::vector<int32_t> positions;     // absolute position in its sequence (0-based)
  std::vector<int64_t> slot_mapping;  // KV slot the token's K/V is written to; -1 = padding

  // Per sequence, [num_seqs] (query_start has num_seqs + 1 entries, query_start[0] == 0):
  std::vector<int32_t> query_start;   // row offsets of each sequence's tokens
  std::vector<int32_t> context_lens;  // tokens in the KV cache after this step (prefix + new)
  std::vector<uint8_t> sample;        // 1 iff logits are wanted for the sequence's last row
  // Prompt logprobs (SamplingParams::prompt_logprobs): logits are also wanted for the rows
  // [query_start[s] + prompt_logits_start[s], ... + num_prompt_logits[s]) of sequence s (the
  // prompt positions whose next prompt token still needs its logprob; 0 rows for most sequences).
  // Those rows may include the sampled last row; it is then returned twice.
  std::vector<int32_t> prompt_logits_start;  // row offset within the sequence's query rows
  std::vector<int32_t> num_prompt_logits;

  // Block tables, [num_seqs, max_blocks_per_seq] row-major, int32 block ids, -1 past the end.
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables;

  // Sampling (see the file comment). Per sequence, [num_seqs]; empty in a hand-built batch that
  // only wants logits (ModelRunner::ComputeLogits), required by ModelExecutor::Execute when the
  // batch samples or asks for prompt logprobs:
  std::vector<uint64_t> request_keys;
  std::vector<int32_t> output_index;  // outputs the request has: the index of the token sampled
  std::vector<SamplingRegistration> new_requests;
  // Per prompt-logit row, [num_prompt_logit_rows]: the prompt token its logits score (the token
  // after that row's position), and how many top alternatives to report.
  std::vector<int32_t> prompt_logit_targets;
  std::vector<int32_t> prompt_logit_num_top;

  // Structured outputs (kernels/sampling.h SampleRow::token_bitmask): the grammar masks of this
  // step's constrained sampled sequences, [num_bitmask_rows, bitmask_words] uint32 words row-major
  // (token t allowed iff bit t % 32 of word t / 32 of the row is set; bitmask_words =
  // (vocab + 31) / 32). Per sequence, [num_seqs] or empty (no sequence constrained):
  // `bitmask_row[s]` is sequence s's row, -1 = unconstrained; only sampled sequences have one,
  // each row belongs to one sequence.
  int32_t bitmask_words = 0;
  std::vector<uint32_t> token_bitmask;
  std::vector<int32_t> bitmask_row;
  // Null, or the fill still writing the words of token_bitmask (engine/bitmask_fill.h): only for
  // an executor that AwaitsBitmaskFill() (engine/model_executor.h), which must call AwaitBitmask()
  // before it reads or copies those words. Their count and bitmask_row are final either way.
  std::shared_ptr<const BitmaskFill> bitmask_fill;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_lens.size()); }
  int32_t num_query_tokens(int32_t seq) const { return query_start[seq + 1] - query_start[seq]; }
  // Number of sequences with sample[s] != 0: the rows of ExecutorOutput::logits.
  int32_t num_sampled() const;
  // Sum of num_prompt_logits: the rows of ExecutorOutput::prompt_logits.
  int32_t num_prompt_logit_rows() const;
  int32_t num_bitmask_rows() const {
    return bitmask_words == 0 ? 0 : static_cast<int32_t>(token_bitmask.size()) / bitmask_words;
  }
  // Blocks until the words of token_bitmask are written (at once when there is no fill).
  void AwaitBitmask() const {
    if (bitmask_fill != nullptr) bitmask_fill->Await();
  }
  // Sequence s's grammar mask (bitmask_words words), or null when it has none. The pointer is
  // valid at once; the words only after AwaitBitmask().
  const uint32_t* bitmask_of(int32_t seq) const {
    if (bitmask_row.empty() || bitmask_row[seq] < 0) return nullptr;
    return token_bitmask.data() + static_cast<size_t>(bitmask_row[seq]) * bitmask_words;
  }

  // Appends one sequence. `tokens`/`positions`/`slots` are its query rows; `blocks` its block
  // table (at most max_blocks_per_seq entries, which must be set first); the last two arguments
  // its prompt-logit rows (see prompt_logits_start).
  void AddSequence(const std::vector<int32_t>& tokens, const std::vector<int32_t>& seq_positions,
                   const std::vector<int64_t>& slots, int32_t context_len,
                   const std::vector<int32_t>& blocks, bool wants_logits,
                   int32_t prompt_logits_begin = 0, int32_t prompt_logits_count = 0);

  // Returns OK iff the batch is self-consistent and every slot and block id lies inside a cache
  // of `num_blocks` blocks of `block_size` tokens.
  Status Validate(int32_t num_blocks, int32_t block_size) const;
};

}  // namespace tinyserve
