#include "engine/kv_cache_manager.h"

#include <cassert>

namespace tinyserve {

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                               BlockHashFn hash_fn)
    : pool_(num_blocks, block_size, enable_prefix_caching, hash_fn) {}

void KVCacheManager::HashBlocks(Request& req, int32_t num_full_blocks) const {
  const int32_t bs = pool_.block_size();
  for (int32_t i = static_cast<int32_t>(req.block_hashes.size()); i < num_full_blocks; ++i) {
    const uint64_t parent = i == 0 ? kRootBlockHash : req.block_hashes[i - 1];
    req.block_hashes.push_back(pool_.Hash(parent, req.token_ids.data() + i * bs));
  }
}

int32_t KVCacheManager::FindCachedPrefix(Request& req, std::vector<int32_t>* hit_blocks) {
  assert(req.block_ids.empty() && req.num_computed_tokens == 0);
  hit_blocks->clear();
  if (!pool_.enable_prefix_caching()) return 0;
  const int32_t bs = pool_.block_size();
  const int32_t max_blocks = (req.num_tokens() - 1) / bs;
  HashBlocks(req, max_blocks);
  uint64_t parent = kRootCacheId;
  for (int32_t i = 0; i < max_blocks; ++i) {
    std::optional<int32_t> block =
        pool_.FindCached(req.block_hashes[i], parent, req.token_ids.data() + i * bs);
    if (!block) break;
    hit_blocks->push_back(*block);
    parent = pool_.cache_id(*block);
  }
  return static_cast<int32_t>(hit_blocks->size()) * bs;
}

bool KVCacheManager::CanAllocate(const Request& req, const std::vector<int32_t>& hit_blocks,
                                 int32_t num_new_tokens) const {
  const int32_t num_hits = static_cast<int32_t>(hit_blocks.size());
  const int32_t total_tokens =
      req.num_computed_tokens + num_hits * pool_.block_size() + num_new_tokens;
  const int32_t num_new_blocks =
      BlocksFor(total_tokens) - static_cast<int32_t>(req.block_ids.size()) - num_hits;
  // Hit blocks with ref count 0 sit in the free queue: taking them shrinks it too.
  int32_t num_evictable_hits = 0;
  for (int32_t b : hit_blocks) num_evictable_hits += pool_.ref_count(b) == 0;
  return pool_.CanAllocate(num_new_blocks + num_evictable_hits);
}

void KVCacheManager::Allocate(Request& req, const std::vector<int32_t>& hit_blocks,
                              int32_t num_new_tokens) {
  assert(CanAllocate(req, hit_blocks, num_new_tokens));
  for (int32_t b : hit_blocks) {
    pool_.Touch(b);
    req.block_ids.push_back(b);
  }
  const int32_t num_hits = static_cast<int32_t>(hit_blocks.size());
  if (num_hits > 0) req.cache_chain_id = pool_.cache_id(hit_blocks.back());
  req.num_cached_blocks += num_hits;
  req.num_computed_tokens += num_hits * pool_.block_size();
  const int32_t num_new_blocks = BlocksFor(req.num_computed_tokens + num_new_tokens) -
                                 static_cast<int32_t>(req.block_ids.size());
  if (num_new_blocks > 0) pool_.Allocate(num_new_blocks, &req.block_ids);
}

void KVCacheManager::CacheComputedBlocks(Request& req) {
  if (!pool_.enable_prefix_caching()) return;
  const int32_t bs = pool_.block_size();
  const int32_t num_full = req.num_computed_tokens / bs;
  if (num_full <= req.num_cached_blocks) return;
  HashBlocks(req, num_full);
  for (int32_t i = req.num_cached_blocks; i < num_full; ++i) {
    // After a collision the chain id is kNoCacheId and nothing more is registered.
    req.cache_chain_id = pool_.CacheBlock(req.block_ids[i], req.block_hashes[i], req.cache_chain_id,
                                          req.token_ids.data() + i * bs,
                                          i == 0 ? kRootBlockHash : req.block_hashes[i - 1]);
  }
  req.num_cached_blocks = num_full;
}

void KVCacheManager::Free(Request& req) {
  pool_.Free(req.block_ids.data(), static_cast<int32_t>(req.block_ids.size()));
  req.block_ids.clear();
  req.num_cached_blocks = 0;
  req.cache_chain_id = kRootCacheId;
}

}  // namespace tinyserve
