// SamplingStateTable: the executor's side of the sampling seam (engine/scheduled_batch.h).
//
// Holds, per live request key, the request's SamplingSpec (kernels/sampling.h, made once from its
// SamplingParams) and penalty history (its prompt and outputs, extended by each token the executor
// samples). Each step: Apply() the batch's registrations, Rows() for the sampled sequences,
// sample them on the backend, Accept() the sampled tokens; Release() what the engine releases. Used
// by the ModelRunner and by the test executors, so that every executor samples by the same rules.
//
// The history lives where the backend samples: a host PenaltyState, or, on a backend that
// KeepsPenaltyHistory() (CUDA), a slot of the backend's device tables: set once from prompt +
// outputs at registration (so a preemption's re-registration rebuilds it), then one small
// AddPenaltyOutputs per step with the accepted tokens; it is never uploaded again in full.
//
// Not thread-safe: the engine thread drives it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/token_logprobs.h"
#include "engine/scheduled_batch.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"

namespace tinyserve {

class SamplingStateTable {
 public:
  // `backend`: where the histories live when it KeepsPenaltyHistory() (it must outlive the table);
  // null or otherwise, on the host.
  explicit SamplingStateTable(int32_t vocab_size, Backend* backend = nullptr)
      : vocab_size_(vocab_size),
        device_(backend != nullptr && backend->KeepsPenaltyHistory() ? backend : nullptr) {}

  // Registers the batch's new requests (a key registered again is replaced: its history is
  // rebuilt from the registration).
  void Apply(const ScheduledBatch& batch);
  // Forgets these keys (unknown ones are ignored).
  void Release(const std::vector<uint64_t>& keys);
  // One row per sequence with sample[s] != 0, in order, each with its grammar mask (pointing into
  // `batch`, which must outlive the rows) if any. Returns InvalidArgument naming the key if a
  // sampled sequence's request is not registered, or if the batch's mask rows are not
  // (vocab + 31) / 32 words.
  StatusOr<std::vector<SampleRow>> Rows(const ScheduledBatch& batch) const;
  // Extends the history of each sampled sequence's request with its sampled token.
  // REQUIRES: sampled has one entry per sampled sequence (what Rows() covered).
  void Accept(const ScheduledBatch& batch, const std::vector<TokenLogprobs>& sampled);

  size_t size() const { return entries_.size(); }
  bool contains(uint64_t key) const { return entries_.count(key) != 0; }

  // The spec of a request with these parameters (min_tokens masks every id that would stop it:
  // its EOS ids, those in the vocabulary, unless ignore_eos, then its stop ids not listed yet).
  static SamplingSpec MakeSpec(const SamplingParams& params, uint64_t seed,
                               std::span<const int32_t> eos_token_ids, int32_t vocab_size);

  // The number of device history slots in use (0 on the host).
  size_t num_penalty_slots() const { return next_slot_ - free_slots_.size(); }

 private:
  struct Entry {
    SamplingSpec spec;
    PenaltyState penalties;  // on the host: the history; with device_: unused
    int32_t slot = -1;       // with device_: the backend's history slot, when spec has penalties
  };
  void FreeSlot(Entry& e);

  const int32_t vocab_size_;
  Backend* const device_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::vector<int32_t> free_slots_;  // released slots, reused before new ones
  int32_t next_slot_ = 0;
  std::vector<int32_t> accepted_slots_, accepted_tokens_;  // Accept()'s scratch
};

}  // namespace tinyserve
