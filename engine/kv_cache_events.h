// KvCacheEvent: one change of the prefix cache's content, as vLLM's block pool reports it for
// KV-cache-aware routers (vllm/distributed/kv_events.py: BlockStored, BlockRemoved,
// AllBlocksCleared). The engine only describes the changes; a KvCacheEventSink outside engine/
// (server/kv_event_publisher.h) encodes and sends them.
//
// What a consumer rebuilds from them, in order: the set of block hashes the pool holds in its
// prefix cache (registered blocks, referenced or not). BlockStored adds hashes (a chain: each
// block's parent is the block before it, the first one's parent is parent_block_hash, none for a
// prompt's first block); BlockRemoved drops hashes (a cached block evicted on reallocation);
// AllBlocksCleared empties the set. A duplicate registration (a second block with content already
// cached) and a hash collision change nothing and report nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tinyserve {

struct KvCacheEvent {
  enum class Type : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Type type = Type::kBlockStored;
  std::vector<uint64_t> block_hashes;         // stored: the chain in order; removed: the evicted
  std::optional<uint64_t> parent_block_hash;  // stored: the first block's parent (none: a root)
  std::vector<int32_t> token_ids;             // stored: [block_hashes.size() * block_size]
  int32_t block_size = 0;                     // stored
};

// Receives the prefix cache's changes. OnKvCacheEvents() runs on the engine thread, once at the
// end of each step that changed the cache (and after EngineCore::ResetPrefixCache), with the
// changes in the order they happened; it must be cheap (hand the vector to another thread).
class KvCacheEventSink {
 public:
  virtual ~KvCacheEventSink() = default;
  virtual void OnKvCacheEvents(std::vector<KvCacheEvent> events) = 0;
};

}  // namespace tinyserve
