// The block pool's KV-cache events (engine/kv_cache_events.h): a chain of registrations is one
// BlockStored with the first block's parent, an eviction a BlockRemoved, a duplicate or a
// collision nothing, ResetPrefixCache() an AllBlocksCleared (only with no block referenced), and
// nothing at all while recording is off.
#include <vector>

#include "engine/block_pool.h"
#include "gtest/gtest.h"

namespace tinyserve {
namespace {

using Type = KvCacheEvent::Type;

TEST(BlockPoolEventsTest, StoredChainsEvictionsAndReset) {
  BlockPool pool(3, 2, /*enable_prefix_caching=*/true);
  pool.set_record_events(true);
  std::vector<int32_t> blocks;
  pool.Allocate(2, &blocks);
  const int32_t t0[] = {1, 2}, t1[] = {3, 4};
  const uint64_t h0 = pool.Hash(kRootBlockHash, t0), h1 = pool.Hash(h0, t1);
  const uint64_t c0 = pool.CacheBlock(blocks[0], h0, kRootCacheId, t0, kRootBlockHash);
  pool.CacheBlock(blocks[1], h1, c0, t1, h0);
  std::vector<KvCacheEvent> events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);  // one chain, one event
  EXPECT_EQ(events[0].type, Type::kBlockStored);
  EXPECT_EQ(events[0].block_hashes, (std::vector<uint64_t>{h0, h1}));
  EXPECT_FALSE(events[0].parent_block_hash.has_value());
  EXPECT_EQ(events[0].token_ids, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(events[0].block_size, 2);
  EXPECT_FALSE(pool.has_events());

  // A second block with the same content is a duplicate: no event.
  std::vector<int32_t> dup;
  pool.Allocate(1, &dup);
  pool.CacheBlock(dup[0], h0, kRootCacheId, t0, kRootBlockHash);
  EXPECT_FALSE(pool.has_events());
  EXPECT_FALSE(pool.ResetPrefixCache());  // blocks are referenced
  EXPECT_FALSE(pool.has_events());

  // Freed, then reallocated: the cached blocks are evicted, one BlockRemoved for the step.
  pool.Free(blocks.data(), 2);
  pool.Free(dup.data(), 1);
  EXPECT_EQ(pool.CachedHashesForTesting().size(), 2u);
  std::vector<int32_t> again;
  pool.Allocate(3, &again);
  events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, Type::kBlockRemoved);
  EXPECT_EQ(events[0].block_hashes.size(), 2u);
  EXPECT_TRUE(pool.CachedHashesForTesting().empty());

  // A child chained onto a known parent carries the parent's hash.
  const int32_t t2[] = {5, 6};
  const uint64_t c0b = pool.CacheBlock(again[0], h0, kRootCacheId, t0, kRootBlockHash);
  pool.TakeEvents();
  const uint64_t h2 = pool.Hash(h0, t2);
  pool.CacheBlock(again[1], h2, c0b, t2, h0);
  events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].parent_block_hash, h0);

  pool.Free(again.data(), 3);
  ASSERT_TRUE(pool.ResetPrefixCache());
  events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, Type::kAllBlocksCleared);
  EXPECT_TRUE(pool.CachedHashesForTesting().empty());
  EXPECT_EQ(pool.num_cached_free_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 3);
  EXPECT_FALSE(pool.FindCached(h0, kRootCacheId, t0).has_value());
}

TEST(BlockPoolEventsTest, NothingIsRecordedWhileOff) {
  BlockPool pool(2, 2, true);
  std::vector<int32_t> blocks;
  pool.Allocate(1, &blocks);
  const int32_t t0[] = {1, 2};
  pool.CacheBlock(blocks[0], pool.Hash(kRootBlockHash, t0), kRootCacheId, t0);
  pool.Free(blocks.data(), 1);
  pool.Allocate(2, &blocks);
  EXPECT_FALSE(pool.has_events());
}

}  // namespace
}  // namespace tinyserve
