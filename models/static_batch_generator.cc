#include "models/static_batch_generator.h"

#include <algorithm>
#include <string>

namespace tinyserve {

int32_t ArgMax(const float* logits, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

StatusOr<std::vector<GeneratedSequence>> GenerateStaticBatch(
    ModelRunner& executor, const std::vector<std::vector<int32_t>>& prompts,
    const std::vector<int32_t>& max_tokens, const StaticBatchOptions& options, bool keep_logits) {
  const size_t num = prompts.size();
  if (max_tokens.size() != num) return InvalidArgument("one max_tokens per prompt is needed");
  const int32_t bs = executor.block_size();
  const int32_t max_len = executor.max_model_len();
  const int32_t vocab = executor.vocab_size();

  struct Seq {
    std::vector<int32_t> tokens;  // prompt + outputs
    int32_t prompt_len = 0;
    int32_t computed = 0;  // tokens whose K/V is in the cache
    int32_t limit = 0;     // total length at which it stops
    std::vector<int32_t> blocks;
    bool done = false;
  };
  std::vector<Seq> seqs(num);
  std::vector<GeneratedSequence> results(num);
  size_t next_block = 0;
  for (size_t i = 0; i < num; ++i) {
    if (prompts[i].empty()) return InvalidArgument("prompt " + std::to_string(i) + " is empty");
    if (static_cast<int32_t>(prompts[i].size()) > max_len) {
      return OutOfRange("prompt " + std::to_string(i) + " has " +
                        std::to_string(prompts[i].size()) +
                        " tokens, more than the max model length " + std::to_string(max_len));
    }
    Seq& s = seqs[i];
    s.tokens = prompts[i];
    s.prompt_len = static_cast<int32_t>(prompts[i].size());
    s.limit = std::min(max_len, s.prompt_len + std::max(0, max_tokens[i]));
    s.done = s.prompt_len >= s.limit;  // no room for even one new token
    // Blocks for every position that will be written: positions [0, limit - 1).
    const int32_t need = std::max(1, (s.limit + bs - 1) / bs);
    for (int32_t b = 0; b < need; ++b, ++next_block) {
      int32_t id = static_cast<int32_t>(next_block);
      if (!options.block_order.empty()) {
        if (next_block >= options.block_order.size()) {
          return ResourceExhausted("block_order holds too few blocks");
        }
        id = options.block_order[next_block];
      }
      if (id >= executor.num_kv_blocks()) {
        return ResourceExhausted("not enough KV blocks for the static batch (" +
                                 std::to_string(executor.num_kv_blocks()) + ")");
      }
      s.blocks.push_back(id);
    }
  }

  while (true) {
    ScheduledBatch batch;
    // As the scheduler: the tables as wide as the widest row of this batch.
    size_t widest = 0;
    for (const Seq& s : seqs) {
      if (!s.done) widest = std::max(widest, s.blocks.size());
    }
    batch.max_blocks_per_seq = static_cast<int32_t>(widest);
    std::vector<size_t> in_batch;
    for (size_t i = 0; i < num; ++i) {
      Seq& s = seqs[i];
      if (s.done) continue;
      const int32_t total = static_cast<int32_t>(s.tokens.size());
      const int32_t count = std::min(total - s.computed, std::max(1, options.prefill_chunk));
      std::vector<int32_t> toks, pos;
      std::vector<int64_t> slots;
      for (int32_t p = s.computed; p < s.computed + count; ++p) {
        toks.push_back(s.tokens[p]);
        pos.push_back(p);
        slots.push_back(static_cast<int64_t>(s.blocks[p / bs]) * bs + p % bs);
      }
      const bool samples = s.computed + count == total;
      batch.AddSequence(toks, pos, slots, s.computed + count, s.blocks, samples);
      in_batch.push_back(i);
    }
    if (in_batch.empty()) break;
    StatusOr<LogitsOutput> out = executor.ComputeLogits(batch);
    if (!out.ok()) return out.status();
    int32_t row = 0;
    for (size_t j = 0; j < in_batch.size(); ++j) {
      Seq& s = seqs[in_batch[j]];
      s.computed += batch.num_query_tokens(static_cast<int32_t>(j));
      if (!batch.sample[j]) continue;
      const float* logits = out->row(row++);
      const int32_t next = ArgMax(logits, vocab);
      GeneratedSequence& r = results[in_batch[j]];
      r.output_ids.push_back(next);
      if (keep_logits) r.logits.emplace_back(logits, logits + vocab);
      s.tokens.push_back(next);
      const bool is_stop = std::find(options.stop_token_ids.begin(), options.stop_token_ids.end(),
                                     next) != options.stop_token_ids.end();
      if (is_stop) r.stopped = true;
      if (is_stop || static_cast<int32_t>(s.tokens.size()) >= s.limit) s.done = true;
    }
  }
  return results;
}

}  // namespace tinyserve
