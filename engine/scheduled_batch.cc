#include "engine/scheduled_batch.h"

#include <string>
#include <vector>

namespace tinyserve {

int32_t ScheduledBatch::num_sampled() const {
  int32_t n = 0;
  for (uint8_t s : sample) n += s != 0;
  return n;
}

int32_t ScheduledBatch::num_prompt_logit_rows() const {
  int32_t n = 0;
  for (int32_t c : num_prompt_logits) n += c;
  return n;
}

void ScheduledBatch::AddSequence(const std::vector<int32_t>& tokens,
                                 const std::vector<int32_t>& seq_positions,
                                 const std::vector<int64_t>& slots, int32_t context_len,
                                 const std::vector<int32_t>& blocks, bool wants_logits,
                                 int32_t prompt_logits_begin, int32_t prompt_logits_count) {
  if (query_start.empty()) query_start.push_back(0);
  token_ids.insert(token_ids.end(), tokens.begin(), tokens.end());
  positions.insert(positions.end(), seq_positions.begin(), seq_positions.end());
  slot_mapping.insert(slot_mapping.end(), slots.begin(), slots.end());
  query_start.push_back(static_cast<int32_t>(token_ids.size()));
  context_lens.push_back(context_len);
  sample.push_back(wants_logits ? 1 : 0);
  prompt_logits_start.push_back(prompt_logits_begin);
  num_prompt_logits.push_back(prompt_logits_count);
  const size_t row = block_tables.size();
  block_tables.resize(row + static_cast<size_t>(max_blocks_per_seq), -1);
  for (size_t i = 0; i < blocks.size() && i < static_cast<size_t>(max_blocks_per_seq); ++i) {
    block_tables[row + i] = blocks[i];
  }
}

Status ScheduledBatch::Validate(int32_t num_blocks, int32_t block_size) const {
  const size_t n = token_ids.size();
  if (positions.size() != n || slot_mapping.size() != n) {
    return InvalidArgument("batch: token_ids, positions and slot_mapping differ in length");
  }
  const size_t seqs = context_lens.size();
  if (query_start.size() != seqs + 1 || sample.size() != seqs ||
      prompt_logits_start.size() != seqs || num_prompt_logits.size() != seqs) {
    return InvalidArgument(
        "batch: query_start must have num_seqs + 1 entries; sample, prompt_logits_start and "
        "num_prompt_logits num_seqs");
  }
  if (!request_keys.empty() && (request_keys.size() != seqs || output_index.size() != seqs)) {
    return InvalidArgument("batch: request_keys and output_index must have num_seqs entries");
  }
  const size_t prompt_rows = static_cast<size_t>(num_prompt_logit_rows());
  if (!request_keys.empty() &&
      (prompt_logit_targets.size() != prompt_rows || prompt_logit_num_top.size() != prompt_rows)) {
    return InvalidArgument(
        "batch: prompt_logit_targets and prompt_logit_num_top must have one entry per "
        "prompt-logit row");
  }
  if (bitmask_words < 0 || (bitmask_words == 0 && !token_bitmask.empty()) ||
      (bitmask_words > 0 && token_bitmask.size() % static_cast<size_t>(bitmask_words) != 0)) {
    return InvalidArgument("batch: token_bitmask must be num_bitmask_rows x bitmask_words words");
  }
  if (!bitmask_row.empty()) {
    if (bitmask_row.size() != seqs) {
      return InvalidArgument("batch: bitmask_row must be empty or have num_seqs entries");
    }
    std::vector<uint8_t> used(static_cast<size_t>(num_bitmask_rows()), 0);
    for (size_t s = 0; s < seqs; ++s) {
      const int32_t row = bitmask_row[s];
      if (row == -1) continue;
      if (row < 0 || row >= num_bitmask_rows() || !sample[s] || used[row]) {
        return InvalidArgument("batch: sequence " + std::to_string(s) + " has bitmask row " +
                               std::to_string(row) +
                               " (rows belong to one sampled sequence each, inside the mask)");
      }
      used[row] = 1;
    }
  } else if (!token_bitmask.empty()) {
    return InvalidArgument("batch: token_bitmask rows without bitmask_row");
  }
  if (query_start[0] != 0 || static_cast<size_t>(query_start[seqs]) != n) {
    return InvalidArgument("batch: query_start must run from 0 to num_tokens");
  }
  if (max_blocks_per_seq < 0 ||
      block_tables.size() != seqs * static_cast<size_t>(max_blocks_per_seq)) {
    return InvalidArgument("batch: block_tables must be num_seqs x max_blocks_per_seq");
  }
  const int64_t num_slots = static_cast<int64_t>(num_blocks) * block_size;
  for (size_t s = 0; s < seqs; ++s) {
    const int32_t begin = query_start[s], end = query_start[s + 1];
    if (end <= begin) return InvalidArgument("batch: sequence " + std::to_string(s) + " is empty");
    if (prompt_logits_start[s] < 0 || num_prompt_logits[s] < 0 ||
        prompt_logits_start[s] + num_prompt_logits[s] > end - begin) {
      return InvalidArgument("batch: sequence " + std::to_string(s) +
                             " has prompt-logit rows outside its query rows");
    }
    const int32_t ctx = context_lens[s];
    if (ctx < end - begin || ctx > max_blocks_per_seq * block_size) {
      return InvalidArgument("batch: sequence " + std::to_string(s) + " has context_len " +
                             std::to_string(ctx) + " that its query rows or blocks cannot hold");
    }
    const int32_t* table = block_tables.data() + s * static_cast<size_t>(max_blocks_per_seq);
    const int32_t blocks_needed = (ctx + block_size - 1) / block_size;
    for (int32_t b = 0; b < blocks_needed; ++b) {
      if (table[b] < 0 || table[b] >= num_blocks) {
        return InvalidArgument("batch: sequence " + std::to_string(s) + " block table entry " +
                               std::to_string(b) + " = " + std::to_string(table[b]) +
                               " is outside the cache");
      }
    }
    for (int32_t t = begin; t < end; ++t) {
      const int32_t pos = positions[t];
      if (pos < 0 || pos >= ctx) {
        return InvalidArgument("batch: position " + std::to_string(pos) + " outside context " +
                               std::to_string(ctx));
      }
      const int64_t slot = slot_mapping[t];
      if (slot < -1 || slot >= num_slots) {
        return InvalidArgument("batch: slot " + std::to_string(slot) + " outside the cache");
      }
      if (slot >= 0 &&
          slot != static_cast<int64_t>(table[pos / block_size]) * block_size + pos % block_size) {
        return InvalidArgument("batch: slot " + std::to_string(slot) + " of position " +
                               std::to_string(pos) + " disagrees with the block table");
      }
    }
  }
  return Status::Ok();
}

}  // namespace tinyserve
