#include "engine/block_pool.h"

#include <vector>

#include "engine/kv_cache_manager.h"
#include "gtest/gtest.h"

namespace tinyserve {
namespace {

using Ids = std::vector<int32_t>;

uint64_t ConstantHash(uint64_t, const int32_t*, int32_t) { return 42; }

TEST(BlockPoolTest, AllocatesFromTheHeadAndCountsUsage) {
  BlockPool pool(4, 16, /*enable_prefix_caching=*/true);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.CanAllocate(3));
  pool.Allocate(3, &got);
  EXPECT_EQ(got, (Ids{0, 1, 2}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_EQ(pool.num_used_blocks(), 3);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_FALSE(pool.CanAllocate(2));
  EXPECT_TRUE(pool.CanAllocate(1));
}

TEST(BlockPoolTest, ExhaustionAndRefill) {
  BlockPool pool(3, 4, false);
  std::vector<int32_t> got;
  pool.Allocate(3, &got);
  EXPECT_FALSE(pool.CanAllocate(1));
  EXPECT_TRUE(pool.CanAllocate(0));
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
  pool.Free(got.data(), 3);
  EXPECT_TRUE(pool.CanAllocate(3));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
}

TEST(BlockPoolTest, FreesTailFirstSoHeadBlocksAreEvictedLast) {
  BlockPool pool(6, 4, false);
  std::vector<int32_t> a, b;
  pool.Allocate(3, &a);  // 0 1 2
  pool.Allocate(2, &b);  // 3 4
  EXPECT_EQ(pool.FreeQueueForTesting(), (Ids{5}));
  pool.Free(a.data(), 3);
  pool.Free(b.data(), 2);
  // LRU: the never-used block, then a's blocks tail first, then b's.
  EXPECT_EQ(pool.FreeQueueForTesting(), (Ids{5, 2, 1, 0, 4, 3}));
  std::vector<int32_t> c;
  pool.Allocate(2, &c);
  EXPECT_EQ(c, (Ids{5, 2}));
}

TEST(BlockPoolTest, SharedBlockIsFreedOnlyByItsLastReference) {
  BlockPool pool(2, 4, true);
  std::vector<int32_t> a;
  pool.Allocate(1, &a);
  const int32_t tokens[4] = {1, 2, 3, 4};
  const uint64_t h = pool.Hash(kRootBlockHash, tokens);
  pool.CacheBlock(a[0], h, kRootCacheId, tokens);
  ASSERT_EQ(pool.FindCached(h, kRootCacheId, tokens), a[0]);
  pool.Touch(a[0]);  // a second request shares it
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.Free(a.data(), 1);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.Free(a.data(), 1);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  // Cached and unreferenced: counted free, still findable.
  EXPECT_EQ(pool.num_cached_free_blocks(), 1);
  EXPECT_EQ(pool.num_uncached_free_blocks(), 1);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_EQ(pool.FindCached(h, kRootCacheId, tokens), a[0]);
}

TEST(BlockPoolTest, TouchTakesACachedBlockOutOfTheFreeQueue) {
  BlockPool pool(3, 2, true);
  std::vector<int32_t> a;
  pool.Allocate(1, &a);  // block 0
  const int32_t tokens[2] = {7, 8};
  const uint64_t h = pool.Hash(kRootBlockHash, tokens);
  pool.CacheBlock(0, h, kRootCacheId, tokens);
  pool.Free(a.data(), 1);
  EXPECT_EQ(pool.FreeQueueForTesting(), (Ids{1, 2, 0}));
  pool.Touch(0);
  EXPECT_EQ(pool.FreeQueueForTesting(), (Ids{1, 2}));
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.num_cached_free_blocks(), 0);
  EXPECT_TRUE(pool.is_cached(0));
}

TEST(BlockPoolTest, CachedBlockIsEvictedLazilyWhenReallocated) {
  BlockPool pool(2, 2, true);
  std::vector<int32_t> a;
  pool.Allocate(2, &a);
  const int32_t t0[2] = {1, 2}, t1[2] = {3, 4};
  const uint64_t h0 = pool.Hash(kRootBlockHash, t0), h1 = pool.Hash(h0, t1);
  const uint64_t id0 = pool.CacheBlock(a[0], h0, kRootCacheId, t0);
  EXPECT_EQ(pool.cache_id(a[0]), id0);
  EXPECT_NE(pool.CacheBlock(a[1], h1, id0, t1), kNoCacheId);
  pool.Free(a.data(), 2);  // queue: 1 0
  EXPECT_EQ(pool.num_cached_free_blocks(), 2);
  std::vector<int32_t> b;
  pool.Allocate(1, &b);
  EXPECT_EQ(b, (Ids{1}));  // the tail block goes first
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_EQ(pool.FindCached(h1, id0, t1), std::nullopt);
  EXPECT_EQ(pool.FindCached(h0, kRootCacheId, t0), 0);  // the head block survives
  EXPECT_EQ(pool.num_cached_free_blocks(), 1);
}

TEST(BlockPoolTest, HashCollisionIsAMissNotAWrongHit) {
  BlockPool pool(4, 2, true, &ConstantHash);
  std::vector<int32_t> a;
  pool.Allocate(3, &a);
  const int32_t t0[2] = {1, 2}, other[2] = {9, 9};
  const uint64_t id0 = pool.CacheBlock(a[0], pool.Hash(kRootBlockHash, t0), kRootCacheId, t0);
  ASSERT_NE(id0, kNoCacheId);
  // Same hash, different tokens: not found.
  EXPECT_EQ(pool.FindCached(42, kRootCacheId, other), std::nullopt);
  // Same hash and tokens, different parent: not found.
  EXPECT_EQ(pool.FindCached(42, id0, t0), std::nullopt);
  EXPECT_EQ(pool.FindCached(42, kRootCacheId, t0), a[0]);
  // A different content with the colliding hash is not registered: its chain ends.
  EXPECT_EQ(pool.CacheBlock(a[1], 42, kRootCacheId, other), kNoCacheId);
  EXPECT_FALSE(pool.is_cached(a[1]));
  EXPECT_EQ(pool.FindCached(42, kRootCacheId, t0), a[0]);
  // The same content again is a duplicate: it answers with the holder's id, unregistered.
  EXPECT_EQ(pool.CacheBlock(a[2], 42, kRootCacheId, t0), id0);
  EXPECT_FALSE(pool.is_cached(a[2]));
  // Nothing is registered under a broken chain.
  EXPECT_EQ(pool.CacheBlock(a[1], 7, kNoCacheId, other), kNoCacheId);
}

TEST(BlockPoolTest, PrefixCachingOffNeverHits) {
  BlockPool pool(2, 2, false);
  std::vector<int32_t> a;
  pool.Allocate(1, &a);
  const int32_t t0[2] = {1, 2};
  const uint64_t h = pool.Hash(kRootBlockHash, t0);
  EXPECT_EQ(pool.CacheBlock(a[0], h, kRootCacheId, t0), kNoCacheId);
  EXPECT_FALSE(pool.is_cached(a[0]));
  EXPECT_EQ(pool.FindCached(h, kRootCacheId, t0), std::nullopt);
}

Request MakeRequest(std::vector<int32_t> tokens) {
  Request r;
  r.num_prompt_tokens = static_cast<int32_t>(tokens.size());
  r.token_ids = std::move(tokens);
  return r;
}

TEST(KVCacheManagerTest, SlotIsBlockIdTimesBlockSizePlusOffset) {
  KVCacheManager kv(8, 4, false);
  Request r = MakeRequest({1, 2, 3, 4, 5, 6});
  r.block_ids = {5, 2};
  EXPECT_EQ(kv.Slot(r, 0), 20);
  EXPECT_EQ(kv.Slot(r, 3), 23);
  EXPECT_EQ(kv.Slot(r, 4), 8);
  EXPECT_EQ(kv.Slot(r, 5), 9);
}

TEST(KVCacheManagerTest, AllocatesOnlyTheMissingBlocks) {
  KVCacheManager kv(8, 4, false);
  Request r = MakeRequest({1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(kv.CanAllocate(r, {}, 5));
  kv.Allocate(r, {}, 5);  // 5 tokens: 2 blocks
  EXPECT_EQ(r.block_ids, (Ids{0, 1}));
  r.num_computed_tokens = 5;
  kv.Allocate(r, {}, 1);  // 6 tokens still fit
  EXPECT_EQ(r.block_ids.size(), 2u);
  r.num_computed_tokens = 6;
  r.token_ids.insert(r.token_ids.end(), {7, 8, 9});
  EXPECT_TRUE(kv.CanAllocate(r, {}, 3));  // 9 tokens: 3 blocks
  EXPECT_FALSE(
      KVCacheManager(2, 4, false).CanAllocate(MakeRequest({1, 2, 3, 4, 5, 6, 7, 8, 9}), {}, 9));
  kv.Free(r);
  EXPECT_TRUE(r.block_ids.empty());
  EXPECT_EQ(kv.pool().num_free_blocks(), 8);
}

TEST(KVCacheManagerTest, PrefixHitsStopOneTokenShortOfTheEnd) {
  KVCacheManager kv(8, 4, true);
  Request a = MakeRequest({1, 2, 3, 4, 5, 6, 7, 8, 9});
  kv.Allocate(a, {}, 9);
  a.num_computed_tokens = 9;
  kv.CacheComputedBlocks(a);  // two full blocks
  EXPECT_EQ(a.num_cached_blocks, 2);

  std::vector<int32_t> hits;
  Request same8 = MakeRequest({1, 2, 3, 4, 5, 6, 7, 8});  // 8 tokens: at most 7 may hit -> 1 block
  EXPECT_EQ(kv.FindCachedPrefix(same8, &hits), 4);
  EXPECT_EQ(hits, (Ids{a.block_ids[0]}));
  Request same9 = MakeRequest({1, 2, 3, 4, 5, 6, 7, 8, 0});  // 9 tokens: 2 blocks hit
  EXPECT_EQ(kv.FindCachedPrefix(same9, &hits), 8);
  EXPECT_EQ(hits, (Ids{a.block_ids[0], a.block_ids[1]}));
  Request diverges = MakeRequest({1, 2, 3, 4, 5, 0, 7, 8, 9, 10});
  EXPECT_EQ(kv.FindCachedPrefix(diverges, &hits), 4);
  Request head_differs = MakeRequest({0, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(kv.FindCachedPrefix(head_differs, &hits), 0);

  // Taking the hits shares the blocks and advances computed tokens.
  kv.FindCachedPrefix(same9, &hits);
  ASSERT_TRUE(kv.CanAllocate(same9, hits, 1));
  kv.Allocate(same9, hits, 1);
  EXPECT_EQ(same9.num_computed_tokens, 8);
  EXPECT_EQ(same9.block_ids.size(), 3u);
  EXPECT_EQ(kv.pool().ref_count(a.block_ids[0]), 2);
  EXPECT_EQ(kv.pool().num_used_blocks(), 4);
}

TEST(KVCacheManagerTest, UnreferencedHitsCountAgainstFreeBlocks) {
  KVCacheManager kv(3, 2, true);
  Request a = MakeRequest({1, 2, 3, 4, 5});
  kv.Allocate(a, {}, 5);  // 3 blocks: all of them
  a.num_computed_tokens = 5;
  kv.CacheComputedBlocks(a);
  kv.Free(a);  // 2 cached + 1 free
  Request b = MakeRequest({1, 2, 3, 4, 9, 9});
  std::vector<int32_t> hits;
  EXPECT_EQ(kv.FindCachedPrefix(b, &hits), 4);
  // 6 tokens = 3 blocks: 2 hits (both in the free queue) + 1 new = all 3 free blocks.
  EXPECT_TRUE(kv.CanAllocate(b, hits, 2));
  Request c = MakeRequest({1, 2, 3, 4, 9, 9, 9, 9});
  kv.FindCachedPrefix(c, &hits);
  EXPECT_FALSE(kv.CanAllocate(c, hits, 4));  // 4 blocks needed
}

// Hashes a block by its last token only, ignoring the parent: collisions everywhere.
uint64_t LastTokenHash(uint64_t, const int32_t* tokens, int32_t n) {
  return static_cast<uint64_t>(tokens[n - 1]);
}

TEST(KVCacheManagerTest, AncestorCollisionIsNotAWrongHit) {
  // x = [1 2 | 5 6 ...] caches only its first block; y = [3 2 | 5 6 ...] collides with it on
  // block 0 (same hash 2, other tokens), so y's block 1, computed over [3 2], must never serve
  // z = [1 2 | 5 6 ...], although its own hash, tokens and parent *hash* all match z's.
  KVCacheManager kv(8, 2, true, &LastTokenHash);
  Request x = MakeRequest({1, 2, 7});
  kv.Allocate(x, {}, 3);
  x.num_computed_tokens = 3;
  kv.CacheComputedBlocks(x);
  Request y = MakeRequest({3, 2, 5, 6, 7});
  kv.Allocate(y, {}, 5);
  y.num_computed_tokens = 5;
  kv.CacheComputedBlocks(y);
  EXPECT_FALSE(kv.pool().is_cached(y.block_ids[0]));  // collision with x's block 0
  EXPECT_FALSE(kv.pool().is_cached(y.block_ids[1]));  // its chain ended there
  Request z = MakeRequest({1, 2, 5, 6, 9});
  std::vector<int32_t> hits;
  EXPECT_EQ(kv.FindCachedPrefix(z, &hits), 2);  // x's block 0 only
  EXPECT_EQ(hits, (Ids{x.block_ids[0]}));
}

}  // namespace
}  // namespace tinyserve
