// FakeExecutor: a deterministic stand-in for the model, for scheduler and engine tests.
//
// It keeps a simulated KV cache that behaves like a real one: the "K/V" written at position p is
// a hash of the K/V at position p - 1 (read back through the block table) and of token p, so each
// entry depends on the whole prefix, and the logits of a sequence come from the entry at its last
// position. A wrong block table or slot, a stale or wrong-prefix prefix-cache hit, or a lost
// recompute changes the output, exactly as with a real model; reading a slot never written fails
// the test. The logits make the next token the argmax by a wide margin (so greedy picks it) and
// vary the others, so sampling with temperature has something to draw. It samples them as every
// executor does: per-request state in a SamplingStateTable, the CPU sampler's rules.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/clock.h"
#include "engine/model_executor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_sampler.h"
#include "models/sampling_state_table.h"

namespace tinyserve::testing {

class FakeExecutor : public ModelExecutor {
 public:
  FakeExecutor(int32_t num_blocks, int32_t block_size, int32_t vocab_size, int32_t max_model_len,
               FakeClock* clock = nullptr, double step_seconds = 0.0)
      : num_blocks_(num_blocks),
        block_size_(block_size),
        vocab_size_(vocab_size),
        max_model_len_(max_model_len),
        clock_(clock),
        step_seconds_(step_seconds),
        kv_(static_cast<size_t>(num_blocks) * block_size, kUnwritten),
        sampling_(vocab_size),
        sampler_(vocab_size) {}

  static constexpr uint64_t kUnwritten = 0;
  // The K/V entry of a position whose predecessor's entry is `prev` (kRoot for position 0).
  static constexpr uint64_t kRoot = 1469598103934665603ull;
  static uint64_t Mix(uint64_t prev, int32_t token, int32_t pos) {
    uint64_t h =
        (prev ^ (static_cast<uint64_t>(token) * 0x9e3779b97f4a7c15ull + pos)) * 1099511628211ull;
    h ^= h >> 29;
    return h == kUnwritten ? 2 : h;
  }
  // The entry of the last position of a sequence of `tokens`.
  static uint64_t ContextState(const std::vector<int32_t>& tokens) {
    uint64_t h = kRoot;
    for (size_t p = 0; p < tokens.size(); ++p) h = Mix(h, tokens[p], static_cast<int32_t>(p));
    return h;
  }
  static void LogitsFromState(uint64_t h, int32_t vocab, float* out) {
    for (int32_t i = 0; i < vocab; ++i) {
      out[i] = static_cast<float>((h >> 7) % 13 + static_cast<uint64_t>(i) * 7 % 11) * 0.25f;
    }
    out[(h >> 17) % static_cast<uint64_t>(vocab)] += 4.0f;
  }
  // The logits row after a context of `tokens`.
  static void Logits(const std::vector<int32_t>& tokens, int32_t vocab, float* out) {
    LogitsFromState(ContextState(tokens), vocab, out);
  }

  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override {
    ++num_calls_;
    if (clock_ != nullptr) clock_->Advance(step_seconds_);
    batches_.push_back(batch);
    Status valid = batch.Validate(num_blocks_, block_size_);
    EXPECT_TRUE(valid.ok()) << valid.ToString();
    if (!valid.ok()) return valid;
    if (fail_on_call_ && *fail_on_call_ == num_calls_)
      return Unavailable("injected device failure");
    sampling_.Apply(batch);
    StatusOr<std::vector<SampleRow>> rows = sampling_.Rows(batch);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    if (!rows.ok()) return rows.status();
    ExecutorOutput out;
    out.sampled.resize(batch.num_sampled());
    out.prompt_logprobs.resize(batch.num_prompt_logit_rows());
    std::vector<float> logits(vocab_size_);
    int32_t row = 0, prompt_row = 0;
    for (int32_t s = 0; s < batch.num_seqs(); ++s) {
      const int32_t* table = batch.block_tables.data() + s * batch.max_blocks_per_seq;
      auto slot = [&](int32_t pos) {
        return static_cast<size_t>(table[pos / block_size_]) * block_size_ + pos % block_size_;
      };
      for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) {
        const int32_t pos = batch.positions[t];
        const uint64_t prev = pos == 0 ? kRoot : kv_[slot(pos - 1)];
        EXPECT_NE(prev, kUnwritten) << "sequence " << s << " reads unwritten KV at " << pos - 1;
        EXPECT_EQ(static_cast<size_t>(batch.slot_mapping[t]), slot(pos));
        kv_[slot(pos)] = Mix(prev, batch.token_ids[t], pos);
      }
      // Prompt-logit rows: the logits after each of those positions' contexts.
      const int32_t first = batch.query_start[s] + batch.prompt_logits_start[s];
      for (int32_t i = 0; i < batch.num_prompt_logits[s]; ++i, ++prompt_row) {
        LogitsFromState(kv_[slot(batch.positions[first + i])], vocab_size_, logits.data());
        sampler_.FillLogprobs(logits.data(), batch.prompt_logit_targets[prompt_row],
                              batch.prompt_logit_num_top[prompt_row],
                              &out.prompt_logprobs[prompt_row]);
      }
      if (!batch.sample[s]) continue;
      const uint64_t last = kv_[slot(batch.context_lens[s] - 1)];
      LogitsFromState(last, vocab_size_, logits.data());
      out.sampled[row].token_id = sampler_.Sample((*rows)[row], logits.data(), &out.sampled[row]);
      ++row;
    }
    sampling_.Accept(batch, out.sampled);
    return out;
  }

  void Release(const std::vector<uint64_t>& keys) override { sampling_.Release(keys); }
  int32_t num_kv_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return block_size_; }
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t max_model_len() const override { return max_model_len_; }

  void FailOnCall(int32_t call) { fail_on_call_ = call; }
  int32_t num_calls() const { return num_calls_; }
  const std::vector<ScheduledBatch>& batches() const { return batches_; }
  // Requests whose sampling state the executor holds (registered, not released yet).
  size_t num_sampling_states() const { return sampling_.size(); }

 private:
  const int32_t num_blocks_, block_size_, vocab_size_, max_model_len_;
  FakeClock* const clock_;
  const double step_seconds_;
  std::vector<uint64_t> kv_;  // [num_blocks * block_size] the entry written to each slot
  SamplingStateTable sampling_;
  CpuSampler sampler_;
  std::vector<ScheduledBatch> batches_;
  std::optional<int32_t> fail_on_call_;
  int32_t num_calls_ = 0;
};

}  // namespace tinyserve::testing
