#include "structured/mask_cache.h"

#include "base/hash.h"
#include "structured/stack_machine.h"
#include "structured/token_trie.h"

namespace tinyserve::structured {

size_t MaskCache::KeyHash::operator()(const std::vector<int32_t>& key) const {
  uint64_t h = key.size();
  for (int32_t v : key) h = SplitMix64(h ^ static_cast<uint32_t>(v));
  return static_cast<size_t>(h);
}

size_t MaskCache::num_entries() const {
  MutexLock lock(mu_);
  return entries_.size();
}

size_t MaskCache::num_entries_with_uncertain() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [key, entry] : entries_) n += entry->uncertain.empty() ? 0 : 1;
  return n;
}

std::shared_ptr<const MaskCache::Entry> MaskCache::Get(const std::vector<int32_t>& key) const {
  {
    MutexLock lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
  }
  std::shared_ptr<const Entry> entry = Compute(key);
  const size_t bytes = entry->accepted.size() * sizeof(uint32_t) +
                       entry->uncertain.size() * sizeof(entry->uncertain[0]) + 64;
  MutexLock lock(mu_);
  auto [it, inserted] = entries_.try_emplace(key, nullptr);
  if (!inserted) return it->second;  // computed meanwhile by another thread: one answer
  if (num_bytes_ + bytes > kMaxBytes) {
    entries_.erase(it);
    return entry;
  }
  it->second = entry;
  num_bytes_ += bytes;
  return entry;
}

std::shared_ptr<const MaskCache::Entry> MaskCache::Compute(const std::vector<int32_t>& key) const {
  const TokenTrie& trie = vocabulary_->trie();
  const auto& nodes = trie.nodes();
  const auto& ids = trie.token_ids();
  auto entry = std::make_shared<Entry>();
  entry->accepted.assign((vocabulary_->size() + 31) / 32, 0u);
  auto add_uncertain = [&](int32_t begin, int32_t end) {
    if (begin >= end) return;
    if (!entry->uncertain.empty() && entry->uncertain.back().second == begin) {
      entry->uncertain.back().second = end;
    } else {
      entry->uncertain.push_back({begin, end});
    }
  };
  StackMachine machine(grammar_);
  int32_t top = key.back();  // -1 or kOutside
  for (size_t i = key.size() - 1; i-- > 0;) top = machine.Push(key[i], top);
  std::vector<StackSet> levels(trie.max_depth() + 1);
  std::vector<char> reached(trie.max_depth() + 1, 0);  // popped outside at some depth <= d
  levels[0].stacks = {top};
  const int32_t n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 0; i < n;) {
    const TokenTrie::Node& node = nodes[i];
    const int32_t d = node.depth;
    machine.Advance(levels[d - 1], node.byte, &levels[d]);
    const StackSet& here = levels[d];
    const bool before = reached[d - 1] != 0;
    reached[d] = before || here.popped_outside;
    const bool alive = !here.stacks.empty();
    const bool accept = alive || here.can_end || here.popped_outside;
    for (int32_t k = node.tokens_begin; k < node.tokens_end; ++k) {
      if (accept) {
        entry->accepted[ids[k] >> 5] |= uint32_t{1} << (ids[k] & 31);
      } else if (before) {
        add_uncertain(k, k + 1);
      }
    }
    if (alive) {
      ++i;
      continue;
    }
    // Dead within the frames: the longer tokens are rejected, unless the frames could end on
    // the way (then the stack below decides).
    if (reached[d] && node.subtree_end > i + 1) {
      add_uncertain(node.tokens_end, nodes[node.subtree_end - 1].tokens_end);
    }
    i = node.subtree_end;
  }
  return entry;
}

}  // namespace tinyserve::structured
