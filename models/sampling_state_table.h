// SamplingStateTable: the executor's side of the sampling seam (engine/scheduled_batch.h).
//
// Holds, per live request key, the request's SamplingSpec (kernels/sampling.h, made once from its
// SamplingParams) and PenaltyState (its prompt and outputs, extended by each token the executor
// samples). Each step: Apply() the batch's registrations, Rows() for the sampled sequences,
// sample them on the backend, Accept() the sampled tokens; Release() what the engine releases. Used
// by the ModelRunner and by the test executors, so that every executor samples by the same rules.
//
// Not thread-safe: the engine thread drives it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/token_logprobs.h"
#include "engine/scheduled_batch.h"
#include "kernels/sampling.h"

namespace tinyserve {

class SamplingStateTable {
 public:
  explicit SamplingStateTable(int32_t vocab_size) : vocab_size_(vocab_size) {}

  // Registers the batch's new requests (a key registered again is replaced: its history is
  // rebuilt from the registration).
  void Apply(const ScheduledBatch& batch);
  // Forgets these keys (unknown ones are ignored).
  void Release(const std::vector<uint64_t>& keys) {
    for (uint64_t key : keys) entries_.erase(key);
  }
  // One row per sequence with sample[s] != 0, in order. Returns InvalidArgument naming the key if a
  // sampled sequence's request is not registered.
  StatusOr<std::vector<SampleRow>> Rows(const ScheduledBatch& batch) const;
  // Extends the history of each sampled sequence's request with its sampled token.
  // REQUIRES: sampled has one entry per sampled sequence (what Rows() covered).
  void Accept(const ScheduledBatch& batch, const std::vector<TokenLogprobs>& sampled);

  size_t size() const { return entries_.size(); }
  bool contains(uint64_t key) const { return entries_.count(key) != 0; }

  // The spec of a request with these parameters (min_tokens masks: its EOS, when in the
  // vocabulary and not ignored, then its stop ids).
  static SamplingSpec MakeSpec(const SamplingParams& params, uint64_t seed,
                               std::optional<int32_t> eos_token_id, int32_t vocab_size);

 private:
  struct Entry {
    SamplingSpec spec;
    PenaltyState penalties;
  };
  const int32_t vocab_size_;
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace tinyserve
