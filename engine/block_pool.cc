#include "engine/block_pool.h"

#include <algorithm>
#include <cassert>

#include "base/hash.h"

namespace tinyserve {

uint64_t DefaultBlockHash(uint64_t parent_hash, const int32_t* tokens, int32_t num_tokens) {
  uint64_t h = SplitMix64(parent_hash);
  for (int32_t i = 0; i < num_tokens; ++i) {
    h = SplitMix64(h ^ static_cast<uint32_t>(tokens[i]));
  }
  return h;
}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                     BlockHashFn hash_fn)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      hash_fn_(hash_fn),
      blocks_(static_cast<size_t>(num_blocks) + 1) {
  assert(num_blocks >= 1 && block_size >= 1);
  if (enable_prefix_caching_) {
    block_tokens_.resize(static_cast<size_t>(num_blocks) * block_size);
    cached_.reserve(static_cast<size_t>(num_blocks));  // never rehashes on the engine thread
  }
  Block& sentinel = blocks_[num_blocks_];
  sentinel.prev = sentinel.next = num_blocks_;
  for (int32_t b = 0; b < num_blocks_; ++b) PushBack(b);
}

void BlockPool::PushBack(int32_t block) {
  Block& sentinel = blocks_[num_blocks_];
  const int32_t tail = sentinel.prev;
  blocks_[block].prev = tail;
  blocks_[block].next = num_blocks_;
  blocks_[tail].next = block;
  sentinel.prev = block;
  ++num_free_;
  if (blocks_[block].cache_id != kNoCacheId) ++num_cached_free_;
}

void BlockPool::Unlink(int32_t block) {
  Block& b = blocks_[block];
  blocks_[b.prev].next = b.next;
  blocks_[b.next].prev = b.prev;
  b.prev = b.next = -1;
  --num_free_;
  if (b.cache_id != kNoCacheId) --num_cached_free_;
}

void BlockPool::Evict(int32_t block) {
  Block& b = blocks_[block];
  if (b.cache_id == kNoCacheId) return;
  cached_.erase(b.hash);  // a registered block always owns its hash's entry
  b.cache_id = kNoCacheId;
  if (record_events_) {
    if (events_.empty() || events_.back().type != KvCacheEvent::Type::kBlockRemoved) {
      events_.push_back({KvCacheEvent::Type::kBlockRemoved, {}, std::nullopt, {}, 0});
    }
    events_.back().block_hashes.push_back(b.hash);
  }
}

void BlockPool::Allocate(int32_t n, std::vector<int32_t>* out) {
  assert(CanAllocate(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t block = blocks_[num_blocks_].next;
    Unlink(block);
    Evict(block);
    blocks_[block].ref_count = 1;
    out->push_back(block);
  }
}

void BlockPool::Free(const int32_t* ids, int32_t n) {
  for (int32_t i = n - 1; i >= 0; --i) {
    Block& b = blocks_[ids[i]];
    assert(b.ref_count > 0);
    if (--b.ref_count == 0) PushBack(ids[i]);
  }
}

std::optional<int32_t> BlockPool::FindCached(uint64_t hash, uint64_t parent_cache_id,
                                             const int32_t* tokens) const {
  if (!enable_prefix_caching_ || parent_cache_id == kNoCacheId) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  const int32_t block = it->second;
  if (blocks_[block].parent_cache_id != parent_cache_id) return std::nullopt;
  const int32_t* cached_tokens = block_tokens_.data() + static_cast<size_t>(block) * block_size_;
  if (!std::equal(tokens, tokens + block_size_, cached_tokens)) return std::nullopt;
  return block;
}

void BlockPool::Touch(int32_t block) {
  Block& b = blocks_[block];
  if (b.ref_count == 0) Unlink(block);
  ++b.ref_count;
}

uint64_t BlockPool::CacheBlock(int32_t block, uint64_t hash, uint64_t parent_cache_id,
                               const int32_t* tokens, uint64_t parent_hash) {
  Block& b = blocks_[block];
  assert(b.ref_count > 0);
  if (!enable_prefix_caching_ || parent_cache_id == kNoCacheId) return kNoCacheId;
  if (b.cache_id != kNoCacheId) return b.cache_id;
  auto [it, inserted] = cached_.emplace(hash, block);
  if (!inserted) {
    // Another block holds the hash: the same content (a duplicate), or a collision.
    const std::optional<int32_t> same = FindCached(hash, parent_cache_id, tokens);
    return same ? blocks_[*same].cache_id : kNoCacheId;
  }
  b.cache_id = next_cache_id_++;
  b.hash = hash;
  b.parent_cache_id = parent_cache_id;
  std::copy(tokens, tokens + block_size_,
            block_tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  if (record_events_) {
    // The chain continues the last event's: one BlockStored, as vLLM reports a request's new
    // full blocks.
    const bool extends = !events_.empty() &&
                         events_.back().type == KvCacheEvent::Type::kBlockStored &&
                         events_.back().block_hashes.back() == parent_hash;
    if (!extends) {
      events_.push_back(
          {KvCacheEvent::Type::kBlockStored,
           {},
           parent_hash == kRootBlockHash ? std::nullopt : std::optional<uint64_t>(parent_hash),
           {},
           block_size_});
    }
    events_.back().block_hashes.push_back(hash);
    events_.back().token_ids.insert(events_.back().token_ids.end(), tokens, tokens + block_size_);
  }
  return b.cache_id;
}

bool BlockPool::ResetPrefixCache() {
  if (num_free_ != num_blocks_) return false;
  for (int32_t i = 0; i < num_blocks_; ++i) blocks_[i].cache_id = kNoCacheId;
  cached_.clear();
  num_cached_free_ = 0;
  if (record_events_) events_.push_back({KvCacheEvent::Type::kAllBlocksCleared, {}, {}, {}, 0});
  return true;
}

std::vector<uint64_t> BlockPool::CachedHashesForTesting() const {
  std::vector<uint64_t> hashes;
  for (const auto& [hash, block] : cached_) hashes.push_back(hash);
  std::sort(hashes.begin(), hashes.end());
  return hashes;
}

std::vector<int32_t> BlockPool::FreeQueueForTesting() const {
  std::vector<int32_t> order;
  for (int32_t b = blocks_[num_blocks_].next; b != num_blocks_; b = blocks_[b].next) {
    order.push_back(b);
  }
  return order;
}

}  // namespace tinyserve
