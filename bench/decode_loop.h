// The decode loop decode_bench and quant_decode_bench time: `batch` sequences prefilled with
// `prompt_len` tokens each, then `steps` decode steps, every step through ModelExecutor::Execute
// with greedy sampling: the path the engine runs (tokens, not logits, cross the executor seam, so
// the step's sampling is the backend's, shared out over its threads, and no logits are copied).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/scheduled_batch.h"
#include "models/model_runner.h"

namespace tinyserve {

// Tokens/s of the timed decode steps (batch * steps / their wall time). Each sequence has its
// own contiguous run of blocks (the runner needs max_model_len / block_size * batch of them).
inline StatusOr<double> TimedGreedyDecode(ModelRunner& runner, int32_t batch, int32_t prompt_len,
                                          int32_t steps) {
  using Clock = std::chrono::steady_clock;
  const int32_t bs = runner.block_size();
  const int32_t max_blocks = (runner.max_model_len() + bs - 1) / bs;
  const int32_t vocab = runner.vocab_size();
  if (static_cast<int64_t>(max_blocks) * batch > runner.num_kv_blocks())
    return ResourceExhausted("too few KV blocks");
  if (prompt_len < 1 || prompt_len + steps > runner.max_model_len())
    return InvalidArgument("prompt and decode tokens do not fit the max model length");
  std::vector<std::vector<int32_t>> tables(batch);
  int32_t next_block = 0;
  for (auto& t : tables) {
    for (int32_t b = 0; b < max_blocks; ++b) t.push_back(next_block++);
  }
  auto slot = [&](int32_t s, int32_t p) {
    return static_cast<int64_t>(tables[s][p / bs]) * bs + p % bs;
  };
  std::vector<uint64_t> keys(batch);
  for (int32_t s = 0; s < batch; ++s) keys[s] = static_cast<uint64_t>(s) + 1;
  std::vector<int32_t> last(batch);
  ScheduledBatch prefill;
  prefill.max_blocks_per_seq = max_blocks;
  for (int32_t s = 0; s < batch; ++s) {
    std::vector<int32_t> toks, pos;
    std::vector<int64_t> slots;
    for (int32_t p = 0; p < prompt_len; ++p) {
      toks.push_back(1 + (s * 131 + p * 17) % (vocab - 1));
      pos.push_back(p);
      slots.push_back(slot(s, p));
    }
    prefill.AddSequence(toks, pos, slots, prompt_len, tables[s], true);
    SamplingRegistration reg;
    reg.key = keys[s];
    reg.params.temperature = 0.0f;
    reg.params.max_tokens = steps + 1;
    reg.params.ignore_eos = true;
    reg.token_ids = toks;
    reg.num_prompt_tokens = prompt_len;
    prefill.new_requests.push_back(std::move(reg));
  }
  prefill.request_keys = keys;
  prefill.output_index.assign(batch, 0);
  StatusOr<ExecutorOutput> first = runner.Execute(prefill);
  if (!first.ok()) return first.status();
  for (int32_t s = 0; s < batch; ++s) last[s] = first->sampled[s].token_id;

  const auto t0 = Clock::now();
  for (int32_t step = 0; step < steps; ++step) {
    const int32_t p = prompt_len + step;
    ScheduledBatch decode;
    decode.max_blocks_per_seq = max_blocks;
    for (int32_t s = 0; s < batch; ++s) {
      decode.AddSequence({last[s]}, {p}, {slot(s, p)}, p + 1, tables[s], true);
    }
    decode.request_keys = keys;
    decode.output_index.assign(batch, step + 1);
    StatusOr<ExecutorOutput> out = runner.Execute(decode);
    if (!out.ok()) return out.status();
    for (int32_t s = 0; s < batch; ++s) last[s] = out->sampled[s].token_id;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  runner.Release(keys);
  return static_cast<double>(batch) * steps / seconds;
}

}  // namespace tinyserve
