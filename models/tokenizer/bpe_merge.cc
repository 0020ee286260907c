#include "models/tokenizer/bpe_merge.h"

#include <queue>

namespace tinyserve {

void MergeTable::Add(int32_t left_id, int32_t right_id, Rule rule) {
  rules_[Key(left_id, right_id)] = rule;
}

const MergeTable::Rule* MergeTable::Find(int32_t left_id, int32_t right_id) const {
  auto it = rules_.find(Key(left_id, right_id));
  return it == rules_.end() ? nullptr : &it->second;
}

namespace {

struct Candidate {
  float score;
  int32_t left;     // index of the left symbol
  int32_t right;    // index of the right symbol
  int32_t left_id;  // ids when pushed; a mismatch at pop time means the entry is stale
  int32_t right_id;
  int32_t merged_id;
};

// Orders the heap: highest score on top, then the smallest left index (leftmost).
struct WorseCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

}  // namespace

void ApplyBpeMerges(const MergeTable& table, std::vector<int32_t>& ids) {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  std::vector<int32_t> prev(n), next(n);  // -1 at the ends
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<bool> alive(n, true);
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, WorseCandidate> heap(WorseCandidate{},
                                                                              std::move(storage));
  auto push_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const MergeTable::Rule* rule = table.Find(ids[left], ids[right]);
    if (rule != nullptr) {
      heap.push({rule->score, left, right, ids[left], ids[right], rule->merged_id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i, i + 1);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || !alive[c.right] || next[c.left] != c.right || ids[c.left] != c.left_id ||
        ids[c.right] != c.right_id) {
      continue;  // stale
    }
    ids[c.left] = c.merged_id;
    alive[c.right] = false;
    next[c.left] = next[c.right];
    if (next[c.left] >= 0) prev[next[c.left]] = c.left;
    push_pair(prev[c.left], c.left);
    push_pair(c.left, next[c.left]);
  }

  int32_t out = 0;
  for (int32_t i = 0; i >= 0 && i < n; i = next[i]) ids[out++] = ids[i];
  ids.resize(out);
}

}  // namespace tinyserve
