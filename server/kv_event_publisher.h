// KvEventPublisher: the engine's KV-cache events (engine/kv_cache_events.h) on the wire exactly as
// vLLM's ZmqEventPublisher sends them (vllm/distributed/kv_events.py), so KV-cache-aware routers
// (llm-d's precise prefix scorer, vllm-project/router's kv_aware policy, whose decoder is
// src/kv_events/decoder.rs) follow a tinyserve replica as they follow vLLM.
//
// Wire format. A ZMQ PUB socket sends one multipart message per engine step that changed the
// cache: [topic, seq, payload], seq an 8-byte big-endian counter from 0 with no gaps, payload the
// msgpack of vLLM's KVEventBatch as msgspec encodes it (array_like, omit_defaults, tag=True: a
// struct is an array of its fields in declaration order, trailing fields at their default left
// out, a tagged struct led by its class name):
//   KVEventBatch      [ts: float64 (Unix seconds), events: [...], data_parallel_rank: 0]
//   BlockStored       ["BlockStored", block_hashes: [uint], parent_block_hash: uint | nil,
//                      token_ids: [int], block_size: int, lora_id: nil, medium: "GPU",
//                      lora_name: nil]
//   BlockRemoved      ["BlockRemoved", block_hashes: [uint], medium: "GPU"]
//   AllBlocksCleared  ["AllBlocksCleared"]
// The replay socket (ROUTER, optional) answers a request [identity, "", start_seq (8-byte
// big-endian)] with [identity, "", seq, payload] for every kept batch with seq >= start_seq, then
// the end marker [identity, "", -1 (8-byte big-endian, signed), ""]; it keeps the last
// buffer_steps batches.
//
// Threads: OnKvCacheEvents() (engine thread) stamps the batch with the wall clock and queues it;
// one publisher thread owns both sockets, encodes, sends, keeps the replay buffer and serves
// replay requests. A full queue (max_queue_size) blocks the engine thread until there is room, as
// vLLM's does. Shutdown() sends what is queued, then closes the sockets; the destructor calls it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "engine/kv_cache_events.h"
#include "server/kv_events_config.h"

namespace tinyserve {

// The msgpack payload of one KVEventBatch (see above). `ts` is Unix time in seconds.
std::string EncodeKvEventBatch(double ts, const std::vector<KvCacheEvent>& events,
                               int64_t data_parallel_rank = 0);

class KvEventPublisher final : public KvCacheEventSink {
 public:
  // Binds (or connects, by vLLM's rule: see KvEventsConfig::endpoint) the sockets and starts the
  // publisher thread. Returns Unavailable, naming the endpoint, if a socket cannot be set up.
  // REQUIRES: config.publishes().
  static StatusOr<std::unique_ptr<KvEventPublisher>> Start(const KvEventsConfig& config);
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void OnKvCacheEvents(std::vector<KvCacheEvent> events) override;
  // Publishes what is queued, stops the thread and closes the sockets. Idempotent.
  void Shutdown();

  // The endpoints as bound (a wildcard port resolved: "tcp://127.0.0.1:41234"); the replay one is
  // empty without replay.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  // Batches sent so far (the next sequence number). Thread-safe.
  uint64_t num_published() const { return num_published_.load(); }

 private:
  struct Sockets;
  struct Batch {
    double ts = 0.0;
    std::vector<KvCacheEvent> events;
  };
  KvEventPublisher(const KvEventsConfig& config, std::unique_ptr<Sockets> sockets);
  void Run();
  void ServeReplay();
  void Publish(const Batch& batch);

  const KvEventsConfig config_;
  std::unique_ptr<Sockets> sockets_;  // the publisher thread's alone once it runs
  std::string endpoint_;
  std::string replay_endpoint_;
  std::deque<std::pair<uint64_t, std::string>> replay_buffer_;  // publisher thread
  std::atomic<uint64_t> num_published_{0};

  Mutex mu_;
  std::condition_variable cv_;  // the queue changed, or stopping
  std::deque<Batch> queue_ TS_GUARDED_BY(mu_);
  bool stopping_ TS_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tinyserve
