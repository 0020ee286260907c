// BlockPool: the fixed set of KV-cache blocks, ref-counted, with an LRU free queue and a prefix
// cache of full blocks (DESIGN §3).
//
// Block states: USED (ref count > 0), CACHED (ref count 0, holds a registered full block that a
// later request may reuse), FREE (ref count 0, no content worth keeping). CACHED and FREE blocks
// sit together in the free queue in LRU order: Allocate() takes from the head, Free() appends to
// the tail. A cached block is evicted lazily, only when Allocate() takes it.
//
// Prefix caching: a full block is keyed by hash(parent_hash, its block_size token ids), chained
// from kRootBlockHash. Each registration gets a unique cache id, and a block records the cache id
// of its parent's content. A lookup hit must match the hash, the token ids, and the parent's cache
// id, so by induction a hit's K/V was computed over exactly the tokens of the prefix: a hash
// collision (of a block or of any ancestor) is a miss, never wrong K/V. At most one block per hash.
//
// Check/act API: the caller asks CanAllocate(n) and then Allocate(n); the pool never guesses
// (preemption is the scheduler's decision). Engine thread only; not thread-safe.
//
// KV-cache events (engine/kv_cache_events.h): with set_record_events(true) every change of the
// prefix cache's content is recorded (a registration as BlockStored, consecutive registrations of
// one chain merged into one event; an eviction as BlockRemoved; ResetPrefixCache() as
// AllBlocksCleared) until TakeEvents().
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv_cache_events.h"

namespace tinyserve {

// Hash of one full block given its parent's hash. `tokens` is [num_tokens].
using BlockHashFn = uint64_t (*)(uint64_t parent_hash, const int32_t* tokens, int32_t num_tokens);

// A 64-bit mixing hash (SplitMix64 finalizer over each token).
uint64_t DefaultBlockHash(uint64_t parent_hash, const int32_t* tokens, int32_t num_tokens);

inline constexpr uint64_t kRootBlockHash = 0x9e3779b97f4a7c15ull;  // parent hash of block 0
inline constexpr uint64_t kNoCacheId = 0;                          // "not in the prefix cache"
inline constexpr uint64_t kRootCacheId = 1;                        // the parent cache id of block 0

class BlockPool {
 public:
  // REQUIRES: num_blocks >= 1, block_size >= 1.
  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
            BlockHashFn hash_fn = &DefaultBlockHash);

  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  bool enable_prefix_caching() const { return enable_prefix_caching_; }
  uint64_t Hash(uint64_t parent_hash, const int32_t* tokens) const {
    return hash_fn_(parent_hash, tokens, block_size_);
  }

  // Blocks with ref count 0 (CACHED + FREE): what Allocate() can hand out.
  int32_t num_free_blocks() const { return num_free_; }
  int32_t num_used_blocks() const { return num_blocks_ - num_free_; }
  int32_t num_cached_free_blocks() const { return num_cached_free_; }                // CACHED
  int32_t num_uncached_free_blocks() const { return num_free_ - num_cached_free_; }  // FREE
  // 1 - free / total, cached-unreferenced blocks counting as free. In [0, 1].
  double usage() const { return 1.0 - static_cast<double>(num_free_) / num_blocks_; }

  // Returns true iff Allocate(n) would succeed.
  bool CanAllocate(int32_t n) const { return n <= num_free_; }
  // Takes n blocks from the head of the free queue (evicting their cache entries), sets their
  // ref count to 1 and appends their ids to *out. REQUIRES: CanAllocate(n).
  void Allocate(int32_t n, std::vector<int32_t>* out);

  // Drops one reference from each block of `ids` ([n], a request's blocks in position order),
  // walking from the last to the first, so that a request's head blocks enter the free queue last
  // and stay cached longest. REQUIRES: each ref count > 0.
  void Free(const int32_t* ids, int32_t n);

  // Returns the cached block with this hash whose parent's cache id is `parent_cache_id` and whose
  // token ids are `tokens` ([block_size]), if any. Does not take a reference.
  std::optional<int32_t> FindCached(uint64_t hash, uint64_t parent_cache_id,
                                    const int32_t* tokens) const;
  // Takes one reference to `block` (a FindCached() hit), removing it from the free queue if its
  // ref count was 0.
  void Touch(int32_t block);
  // Registers the full, computed `block` (ref count > 0) under `hash`, as the child of the content
  // with cache id `parent_cache_id`. Returns the cache id of this content: the block's new id; or,
  // if another block already caches the same (hash, parent, tokens), that block's id (this block
  // stays unregistered); or kNoCacheId if prefix caching is off, `parent_cache_id` is kNoCacheId,
  // or a different content holds `hash` (a collision: the caller's chain ends here).
  // `parent_hash` is the hash the block's hash was chained from (kRootBlockHash for a prompt's
  // first block); only KV-cache events use it.
  uint64_t CacheBlock(int32_t block, uint64_t hash, uint64_t parent_cache_id, const int32_t* tokens,
                      uint64_t parent_hash = kRootBlockHash);
  // Drops every cached block's registration (vLLM's reset_prefix_cache) and records
  // AllBlocksCleared. Returns true iff it did: only when no block is referenced.
  bool ResetPrefixCache();

  // Starts or stops recording KV-cache events.
  void set_record_events(bool on) { record_events_ = on; }
  bool has_events() const { return !events_.empty(); }
  // The events recorded since the last call, oldest first.
  std::vector<KvCacheEvent> TakeEvents() { return std::exchange(events_, {}); }
  // The hashes of every registered block (referenced or not), sorted: the set a consumer of the
  // KV-cache events rebuilds. For tests.
  std::vector<uint64_t> CachedHashesForTesting() const;
  // The cache id of a registered block; kNoCacheId if it is not registered.
  uint64_t cache_id(int32_t block) const { return blocks_[block].cache_id; }

  int32_t ref_count(int32_t block) const { return blocks_[block].ref_count; }
  bool is_cached(int32_t block) const { return blocks_[block].cache_id != kNoCacheId; }
  // The free queue, head (next to allocate) first. For tests.
  std::vector<int32_t> FreeQueueForTesting() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    int32_t prev = -1;  // free-queue links; -1 = none (sentinel is num_blocks_)
    int32_t next = -1;
    uint64_t cache_id = kNoCacheId;  // != kNoCacheId iff registered in cached_
    uint64_t hash = 0;
    uint64_t parent_cache_id = kNoCacheId;
  };

  void PushBack(int32_t block);
  void Unlink(int32_t block);
  void Evict(int32_t block);

  const int32_t num_blocks_;
  const int32_t block_size_;
  const bool enable_prefix_caching_;
  const BlockHashFn hash_fn_;

  std::vector<Block> blocks_;          // [num_blocks + 1]; the last is the free-queue sentinel
  std::vector<int32_t> block_tokens_;  // [num_blocks, block_size] token ids of cached blocks
  std::unordered_map<uint64_t, int32_t> cached_;  // hash -> block
  uint64_t next_cache_id_ = kRootCacheId + 1;
  bool record_events_ = false;
  std::vector<KvCacheEvent> events_;
  int32_t num_free_ = 0;
  int32_t num_cached_free_ = 0;
};

}  // namespace tinyserve
