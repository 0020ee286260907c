// BPE merging: repeatedly merge the adjacent pair with the best score, leftmost on ties.
//
// Both tokenizers share this loop: SentencePiece-style BPE (score = the merged piece's score) and
// byte-level BPE (score = -rank). It gives exactly the result of llama2.c run.c's O(n^2) loop
// ("scan all adjacent pairs, take the first with the strictly highest score, merge, repeat") in
// O(n log n), with a max-heap of candidate pairs over a doubly linked list of symbols:
//  - Invariant: every pair of symbols adjacent right now that has a merge rule has an entry in the
//    heap, keyed (score desc, position of its left symbol asc). Positions are the symbols' indices
//    in the input; a merge keeps the left symbol, so list order is index order and "leftmost" is
//    "smallest left index".
//  - Entries are never removed early; an entry is stale once its left symbol was merged away, its
//    right neighbour changed, or either symbol's id changed. Popping skips stale entries, so the
//    first live entry popped is the best current pair, leftmost on ties: run.c's choice.
//  - Merging (l, r) into l creates at most two new adjacent pairs (prev(l), l) and (l, next(l)),
//    which are pushed, restoring the invariant.
// A MergeTable is immutable once built and safe to share between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace tinyserve {

class MergeTable {
 public:
  struct Rule {
    float score;        // higher merges first
    int32_t merged_id;  // the id the pair becomes
  };

  // Adds (or replaces) the rule for the pair (left_id, right_id).
  void Add(int32_t left_id, int32_t right_id, Rule rule);
  // The rule for the pair, or nullptr when the pair does not merge.
  const Rule* Find(int32_t left_id, int32_t right_id) const;
  size_t size() const { return rules_.size(); }

 private:
  static uint64_t Key(int32_t left_id, int32_t right_id) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left_id)) << 32) |
           static_cast<uint32_t>(right_id);
  }
  std::unordered_map<uint64_t, Rule> rules_;
};

// Merges `ids` in place until no adjacent pair has a rule in `table`.
// REQUIRES: ids.size() < 2^31.
void ApplyBpeMerges(const MergeTable& table, std::vector<int32_t>& ids);

}  // namespace tinyserve
