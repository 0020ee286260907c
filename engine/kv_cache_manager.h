// KVCacheManager: a request's view of the BlockPool: its block list, prefix-cache lookups over its
// tokens, and the KV slot of each position (DESIGN §3: slot = block_id * block_size + offset).
//
// It reads and writes the block fields of Request (block_ids, block_hashes, num_cached_blocks,
// cache_chain_id, and num_computed_tokens on a prefix hit). Check/act: CanAllocate(...) then
// Allocate(...); when the check fails the scheduler decides (preempt, or leave it waiting).
// Engine thread only; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"

namespace tinyserve {

class KVCacheManager {
 public:
  KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                 BlockHashFn hash_fn = &DefaultBlockHash);

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int32_t block_size() const { return pool_.block_size(); }

  // Finds the longest run of cached full blocks that starts req's tokens, covering at most
  // num_tokens - 1 tokens (the last token must be computed for its logits). Writes their ids to
  // *hit_blocks (cleared first) and returns the number of tokens they hold. Takes no references.
  // REQUIRES: req holds no blocks (num_computed_tokens == 0).
  int32_t FindCachedPrefix(Request& req, std::vector<int32_t>* hit_blocks);

  // Returns true iff req can hold num_computed_tokens + hits + num_new_tokens tokens, where hits
  // are `hit_blocks` (a FindCachedPrefix() result, or empty) reused ahead of the new tokens.
  bool CanAllocate(const Request& req, const std::vector<int32_t>& hit_blocks,
                   int32_t num_new_tokens) const;
  // Takes the hit blocks (advancing num_computed_tokens over them) and allocates the blocks that
  // num_new_tokens more tokens need. REQUIRES: CanAllocate(req, hit_blocks, num_new_tokens).
  void Allocate(Request& req, const std::vector<int32_t>& hit_blocks, int32_t num_new_tokens);

  // Registers the request's full, computed blocks with the prefix cache (after the executor wrote
  // their K/V). No-op when prefix caching is off.
  void CacheComputedBlocks(Request& req);

  // Releases all of req's blocks, tail first. Leaves block_ids empty; keeps block_hashes.
  void Free(Request& req);

  // The KV slot of position `pos` of req. REQUIRES: pos < block_ids.size() * block_size.
  int64_t Slot(const Request& req, int32_t pos) const {
    const int32_t bs = pool_.block_size();
    return static_cast<int64_t>(req.block_ids[pos / bs]) * bs + pos % bs;
  }

 private:
  // Extends req.block_hashes to cover its first `num_full_blocks` blocks.
  void HashBlocks(Request& req, int32_t num_full_blocks) const;
  int32_t BlocksFor(int32_t num_tokens) const {
    return (num_tokens + pool_.block_size() - 1) / pool_.block_size();
  }

  BlockPool pool_;
};

}  // namespace tinyserve
