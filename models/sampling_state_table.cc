#include "models/sampling_state_table.h"

#include <algorithm>
#include <string>

namespace tinyserve {

SamplingSpec SamplingStateTable::MakeSpec(const SamplingParams& p, uint64_t seed,
                                          std::span<const int32_t> eos_token_ids,
                                          int32_t vocab_size) {
  SamplingSpec s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.repetition_penalty = p.repetition_penalty;
  s.seed = seed;
  s.min_tokens = p.min_tokens;
  if (!p.ignore_eos) {
    for (int32_t t : eos_token_ids) {
      if (t >= 0 && t < vocab_size) s.min_tokens_masked_ids.push_back(t);
    }
  }
  for (int32_t t : p.stop_token_ids) {  // an id already masked as EOS is not listed twice
    if (std::find(s.min_tokens_masked_ids.begin(), s.min_tokens_masked_ids.end(), t) ==
        s.min_tokens_masked_ids.end()) {
      s.min_tokens_masked_ids.push_back(t);
    }
  }
  s.logit_bias = p.logit_bias;
  s.allowed_token_ids = p.allowed_token_ids;
  s.num_logprobs = p.logprobs ? *p.logprobs : -1;
  return s;
}

void SamplingStateTable::FreeSlot(Entry& e) {
  if (e.slot >= 0) free_slots_.push_back(e.slot);
  e.slot = -1;
}

void SamplingStateTable::Apply(const ScheduledBatch& batch) {
  for (const SamplingRegistration& r : batch.new_requests) {
    Entry& e = entries_[r.key];
    e.spec = MakeSpec(r.params, r.seed, r.eos_token_ids, vocab_size_);
    e.penalties = PenaltyState();
    if (!e.spec.has_penalties()) {
      FreeSlot(e);
    } else if (device_ == nullptr) {
      e.penalties.Reset(r.token_ids, r.num_prompt_tokens);
    } else {
      if (e.slot < 0) {
        if (free_slots_.empty()) {
          e.slot = next_slot_++;
        } else {
          e.slot = free_slots_.back();
          free_slots_.pop_back();
        }
      }
      device_->SetPenaltyHistory(e.slot, vocab_size_, r.token_ids.data(),
                                 static_cast<int32_t>(r.token_ids.size()), r.num_prompt_tokens);
    }
  }
}

void SamplingStateTable::Release(const std::vector<uint64_t>& keys) {
  for (uint64_t key : keys) {
    auto it = entries_.find(key);
    if (it == entries_.end()) continue;
    FreeSlot(it->second);
    entries_.erase(it);
  }
}

StatusOr<std::vector<SampleRow>> SamplingStateTable::Rows(const ScheduledBatch& batch) const {
  std::vector<SampleRow> rows;
  if (batch.num_sampled() == 0) return rows;
  if (batch.request_keys.size() != static_cast<size_t>(batch.num_seqs())) {
    return InvalidArgument("batch samples but does not name its sequences' requests");
  }
  if (!batch.token_bitmask.empty() && batch.bitmask_words != (vocab_size_ + 31) / 32) {
    return InvalidArgument("batch token bitmask has " + std::to_string(batch.bitmask_words) +
                           " words per row; a vocabulary of " + std::to_string(vocab_size_) +
                           " needs " + std::to_string((vocab_size_ + 31) / 32));
  }
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    if (!batch.sample[s]) continue;
    auto it = entries_.find(batch.request_keys[s]);
    if (it == entries_.end()) {
      return InvalidArgument("batch samples request key " + std::to_string(batch.request_keys[s]) +
                             ", which was never registered with the executor");
    }
    const Entry& e = it->second;
    rows.push_back({&e.spec, device_ == nullptr ? &e.penalties : nullptr,
                    static_cast<uint64_t>(batch.output_index[s]), e.slot, batch.bitmask_of(s)});
  }
  return rows;
}

void SamplingStateTable::Accept(const ScheduledBatch& batch,
                                const std::vector<TokenLogprobs>& sampled) {
  size_t row = 0;
  accepted_slots_.clear();
  accepted_tokens_.clear();
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    if (!batch.sample[s]) continue;
    auto it = entries_.find(batch.request_keys[s]);
    const int32_t token = sampled[row++].token_id;
    if (it == entries_.end() || !it->second.spec.has_penalties()) continue;
    if (device_ == nullptr) {
      it->second.penalties.AddOutput(token);
    } else {
      accepted_slots_.push_back(it->second.slot);
      accepted_tokens_.push_back(token);
    }
  }
  if (!accepted_slots_.empty()) {
    device_->AddPenaltyOutputs(accepted_slots_.data(), accepted_tokens_.data(),
                               static_cast<int32_t>(accepted_slots_.size()));
  }
}

}  // namespace tinyserve
