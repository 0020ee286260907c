// vLLM's KV-cache events from tinyserve (issue 22): --kv-events-config parsing; the msgpack layout
// of a batch (vllm/distributed/kv_events.py as msgspec encodes it, and as vllm-project/router's
// src/kv_events/decoder.rs reads it); and a ZMQ SUB + msgpack subscriber that follows a real
// EngineCore (fake executor, a small KV cache) through prefix hits, evictions, preemptions and a
// prefix-cache reset, and rebuilds the block pool's own set of cached hashes with no gap in the
// sequence numbers; after a deliberate gap the replay socket returns exactly the missed batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "engine/engine_core.h"
#include "server/kv_event_publisher.h"
#include "server/kv_events_config.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"

namespace tinyserve::testing {
namespace {

using std::chrono::milliseconds;

// ---- --kv-events-config -----------------------------------------------------------------------

TEST(KvEventsConfigTest, DefaultsAreVllms) {
  auto c = ParseKvEventsConfig("{}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->enable_kv_cache_events);
  EXPECT_EQ(c->publisher, "null");
  EXPECT_FALSE(c->publishes());
  EXPECT_EQ(c->endpoint, "tcp://*:5557");
  EXPECT_FALSE(c->replay_endpoint.has_value());
  EXPECT_EQ(c->buffer_steps, 10000);
  EXPECT_EQ(c->hwm, 100000);
  EXPECT_EQ(c->max_queue_size, 100000);
  EXPECT_EQ(c->topic, "");
  auto enabled = ParseKvEventsConfig(R"({"enable_kv_cache_events": true})");
  ASSERT_TRUE(enabled.ok());
  EXPECT_EQ(enabled->publisher, "zmq");  // vLLM's __post_init__
  EXPECT_TRUE(enabled->publishes());
}

TEST(KvEventsConfigTest, EveryKey) {
  auto c = ParseKvEventsConfig(
      R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:6000",
          "replay_endpoint": "tcp://*:6001", "buffer_steps": 5, "hwm": 7,
          "max_queue_size": 9, "topic": "kv"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoint, "tcp://*:6000");
  EXPECT_EQ(*c->replay_endpoint, "tcp://*:6001");
  EXPECT_EQ(c->buffer_steps, 5);
  EXPECT_EQ(c->hwm, 7);
  EXPECT_EQ(c->max_queue_size, 9);
  EXPECT_EQ(c->topic, "kv");
  auto off = ParseKvEventsConfig(R"({"enable_kv_cache_events": true, "publisher": "null"})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->publishes());
}

TEST(KvEventsConfigTest, BadInputNamesTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "not valid JSON"},
      {"[1]", "expected a JSON object"},
      {R"({"enable_kv_cache_events": "yes"})", "\"enable_kv_cache_events\" must be a boolean"},
      {R"({"publisher": "kafka"})", "\"publisher\" must be \"null\" or \"zmq\""},
      {R"({"endpoint": 5557})", "\"endpoint\" must be a string"},
      {R"({"buffer_steps": 0})", "\"buffer_steps\" must be >= 1"},
      {R"({"hwm": 1.5})", "\"hwm\" must be an integer"},
      {R"({"replay_endpoint": ""})", "\"replay_endpoint\" must not be empty"},
      {R"({"endpoints": "tcp://*:1"})", "unknown key \"endpoints\""},
  };
  for (const auto& [json, want] : cases) {
    SCOPED_TRACE(json);
    auto c = ParseKvEventsConfig(json);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("--kv-events-config: "), std::string::npos);
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status().message();
  }
}

// ---- the batch's msgpack layout ---------------------------------------------------------------

std::string AsStr(const msgpack::object& o) {
  EXPECT_EQ(o.type, msgpack::type::STR);
  return o.as<std::string>();
}

TEST(KvEventEncodingTest, FieldsInVllmsOrderAndTypes) {
  std::vector<KvCacheEvent> events(4);
  events[0] = {KvCacheEvent::Type::kBlockStored, {11, 12}, std::nullopt, {1, 2, 3, 4}, 2};
  events[1] = {KvCacheEvent::Type::kBlockStored, {13}, 12, {5, 6}, 2};
  events[2] = {KvCacheEvent::Type::kBlockRemoved, {11, 0xffffffffffffffffull}, {}, {}, 0};
  events[3] = {KvCacheEvent::Type::kAllBlocksCleared, {}, {}, {}, 0};
  const std::string payload = EncodeKvEventBatch(1764547200.25, events);
  msgpack::object_handle h = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = h.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);  // ts, events, data_parallel_rank
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 1764547200.25);
  EXPECT_EQ(batch.via.array.ptr[2].as<int64_t>(), 0);
  const msgpack::object& list = batch.via.array.ptr[1];
  ASSERT_EQ(list.via.array.size, 4u);
  // BlockStored: tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
  // lora_name.
  const msgpack::object* s0 = list.via.array.ptr[0].via.array.ptr;
  ASSERT_EQ(list.via.array.ptr[0].via.array.size, 8u);
  EXPECT_EQ(AsStr(s0[0]), "BlockStored");
  EXPECT_EQ(s0[1].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{11, 12}));
  EXPECT_TRUE(s0[2].is_nil());
  EXPECT_EQ(s0[3].as<std::vector<int32_t>>(), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(s0[4].as<int32_t>(), 2);
  EXPECT_TRUE(s0[5].is_nil());
  EXPECT_EQ(AsStr(s0[6]), "GPU");
  EXPECT_TRUE(s0[7].is_nil());
  const msgpack::object* s1 = list.via.array.ptr[1].via.array.ptr;
  EXPECT_EQ(s1[2].type, msgpack::type::POSITIVE_INTEGER);
  EXPECT_EQ(s1[2].as<uint64_t>(), 12u);
  // BlockRemoved: tag, block_hashes, medium.
  ASSERT_EQ(list.via.array.ptr[2].via.array.size, 3u);
  const msgpack::object* r = list.via.array.ptr[2].via.array.ptr;
  EXPECT_EQ(AsStr(r[0]), "BlockRemoved");
  EXPECT_EQ(r[1].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{11, 0xffffffffffffffffull}));
  EXPECT_EQ(AsStr(r[2]), "GPU");
  // AllBlocksCleared: the tag alone.
  ASSERT_EQ(list.via.array.ptr[3].via.array.size, 1u);
  EXPECT_EQ(AsStr(list.via.array.ptr[3].via.array.ptr[0]), "AllBlocksCleared");
}

// ---- a subscriber follows an engine -----------------------------------------------------------

int64_t SeqOf(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i)
    v = (v << 8) | static_cast<const unsigned char*>(m.data())[i];
  return static_cast<int64_t>(v);
}

// Applies one batch's events to `cached` (the subscriber's view); counts what it saw.
struct Follower {
  std::set<uint64_t> cached;
  int num_stored = 0, num_removed = 0, num_cleared = 0;
  void Apply(const std::string& payload, int32_t block_size) {
    msgpack::object_handle h = msgpack::unpack(payload.data(), payload.size());
    const msgpack::object& events = h.get().via.array.ptr[1];
    for (uint32_t i = 0; i < events.via.array.size; ++i) {
      const msgpack::object& e = events.via.array.ptr[i];
      const std::string tag = e.via.array.ptr[0].as<std::string>();
      if (tag == "BlockStored") {
        const auto hashes = e.via.array.ptr[1].as<std::vector<uint64_t>>();
        const auto tokens = e.via.array.ptr[3].as<std::vector<int32_t>>();
        EXPECT_EQ(tokens.size(), hashes.size() * static_cast<size_t>(block_size));
        EXPECT_EQ(e.via.array.ptr[4].as<int32_t>(), block_size);
        if (!e.via.array.ptr[2].is_nil()) {
          // A chain continues a block the subscriber knows (it was stored and not evicted).
          EXPECT_TRUE(cached.count(e.via.array.ptr[2].as<uint64_t>()));
        }
        for (uint64_t hash : hashes) EXPECT_TRUE(cached.insert(hash).second) << hash;
        ++num_stored;
      } else if (tag == "BlockRemoved") {
        for (uint64_t hash : e.via.array.ptr[1].as<std::vector<uint64_t>>()) {
          EXPECT_EQ(cached.erase(hash), 1u) << hash;
        }
        ++num_removed;
      } else if (tag == "AllBlocksCleared") {
        cached.clear();
        ++num_cleared;
      } else {
        ADD_FAILURE() << "unknown tag " << tag;
      }
    }
  }
};

// Requests every kept batch from `start` on; returns (seq, payload) until the end marker.
std::vector<std::pair<int64_t, std::string>> Replay(zmq::context_t& ctx, const std::string& ep,
                                                    int64_t start) {
  // A DEALER, not a REQ: one request gets many replies. It sends the empty delimiter a REQ would.
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 5000);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(ep);
  std::string start_bytes(8, '\0');
  for (int i = 0; i < 8; ++i) start_bytes[i] = static_cast<char>((start >> (8 * (7 - i))) & 0xff);
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start_bytes), zmq::send_flags::none);
  std::vector<std::pair<int64_t, std::string>> out;
  while (true) {
    zmq::message_t empty, seq, payload;
    if (!dealer.recv(empty)) {
      ADD_FAILURE() << "replay timed out";
      return out;
    }
    EXPECT_EQ(empty.size(), 0u);
    EXPECT_TRUE(dealer.recv(seq));
    EXPECT_TRUE(seq.more());
    EXPECT_TRUE(dealer.recv(payload));
    const int64_t n = SeqOf(seq);
    if (n == -1) {
      EXPECT_EQ(payload.size(), 0u);
      return out;
    }
    out.emplace_back(n, payload.to_string());
  }
}

TEST(KvEventsFollowTest, SubscriberRebuildsThePoolsCachedSetAndReplayFillsAGap) {
  KvEventsConfig config;
  config.enable_kv_cache_events = true;
  config.publisher = "zmq";
  config.endpoint = "tcp://127.0.0.1:*";
  config.replay_endpoint = "tcp://127.0.0.1:*";
  config.topic = "kv-test";
  auto started = KvEventPublisher::Start(config);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<KvEventPublisher> publisher = std::move(started).value();
  ASSERT_NE(publisher->endpoint().find("tcp://127.0.0.1:"), std::string::npos);

  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, config.topic);
  sub.set(zmq::sockopt::rcvtimeo, 5000);
  sub.set(zmq::sockopt::linger, 0);
  sub.connect(publisher->endpoint());
  // ZMQ's slow joiner: a PUB socket drops what it sends before the subscription reaches it. Empty
  // batches (no events) are sent until one arrives; those lost before come back by replay below.
  std::map<int64_t, std::string> received;  // seq -> payload, via SUB
  int64_t first_seq = -1, last_seq = -1;
  {
    sub.set(zmq::sockopt::rcvtimeo, 20);
    for (int i = 0; i < 500 && first_seq < 0; ++i) {
      publisher->OnKvCacheEvents({});
      zmq::message_t topic, seq, payload;
      while (sub.recv(topic)) {
        ASSERT_TRUE(sub.recv(seq));
        ASSERT_TRUE(sub.recv(payload));
        last_seq = SeqOf(seq);
        if (first_seq < 0) first_seq = last_seq;
        received[last_seq] = payload.to_string();
      }
    }
    ASSERT_GE(first_seq, 0) << "the subscriber never got a batch";
    sub.set(zmq::sockopt::rcvtimeo, 5000);
  }

  constexpr int32_t kBlocks = 14, kBlockSize = 4;
  FakeClock clock;
  FakeExecutor executor(kBlocks, kBlockSize, /*vocab=*/32, /*max_model_len=*/64, &clock, 0.001);
  EngineConfig engine_config;
  engine_config.max_num_batched_tokens = 16;
  engine_config.max_num_seqs = 4;
  RecordingObserver recorder;
  EngineCore core(engine_config, &executor, &clock);
  core.AddObserver(&recorder);
  core.SetKvCacheEventSink(publisher.get());

  // Three waves of requests: shared 12-token prefixes (hits), more than the 14 blocks hold
  // (preemptions), and new prompts that evict the old ones' cached blocks.
  int64_t num_preemptions = 0, num_hits = 0;
  for (int wave = 0; wave < 3; ++wave) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> prompt = Prompt(12, 7 + wave);
      for (int k = 0; k <= i % 3; ++k) prompt.push_back(1 + (i + k) % 30);
      streams.push_back(
          SubmitOk(core, MakeEngineRequest(Name("w" + std::to_string(wave) + "r", i), prompt, 9)));
    }
    RunUntilIdle(core);
  }
  for (const SchedulerStats& s : recorder.steps) {
    num_preemptions += s.num_preemptions;
    num_hits += s.prefix_cache_hits;
  }
  EXPECT_GT(num_preemptions, 0);
  EXPECT_GT(num_hits, 0);
  const std::vector<uint64_t> before_reset =
      core.scheduler().kv_cache().pool().CachedHashesForTesting();
  ASSERT_TRUE(core.ResetPrefixCache());
  // One more request after the reset: the subscriber's set must follow AllBlocksCleared too.
  SubmitOk(core, MakeEngineRequest("after-reset", Prompt(13, 3), 4));
  RunUntilIdle(core);
  const std::vector<uint64_t> pool_state =
      core.scheduler().kv_cache().pool().CachedHashesForTesting();
  EXPECT_FALSE(before_reset.empty());
  EXPECT_FALSE(pool_state.empty());

  // Receive everything published after the handshake.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (publisher->num_published() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  std::this_thread::sleep_for(milliseconds(50));  // the queue drains
  const int64_t total = static_cast<int64_t>(publisher->num_published());
  ASSERT_GT(total, 10);
  // The deliberate gap: five batches in the middle are received and thrown away.
  const int64_t gap_begin = std::max(last_seq + 1, total / 2), gap_end = gap_begin + 5;
  ASSERT_LT(gap_end, total);
  std::map<int64_t, std::string> dropped;
  while (last_seq < total - 1) {
    zmq::message_t topic, seq, payload;
    ASSERT_TRUE(sub.recv(topic)) << "no batch within 5 s after seq " << last_seq;
    EXPECT_EQ(topic.to_string(), config.topic);
    ASSERT_TRUE(topic.more());
    ASSERT_TRUE(sub.recv(seq));
    ASSERT_TRUE(sub.recv(payload));
    EXPECT_FALSE(payload.more());
    const int64_t n = SeqOf(seq);
    EXPECT_EQ(n, last_seq + 1) << "a gap in the PUB stream";
    last_seq = n;
    if (n >= gap_begin && n < gap_end) {
      dropped[n] = payload.to_string();
    } else {
      received[n] = payload.to_string();
    }
  }
  // Fill the handshake's lost batches and the deliberate gap from the replay socket.
  const std::vector<std::pair<int64_t, std::string>> replayed =
      Replay(ctx, publisher->replay_endpoint(), 0);
  ASSERT_EQ(static_cast<int64_t>(replayed.size()), total);  // everything is still buffered
  for (int64_t i = 0; i < total; ++i) EXPECT_EQ(replayed[i].first, i);
  for (const auto& [n, payload] : replayed) {
    if (n < first_seq) received[n] = payload;
    if (n >= gap_begin && n < gap_end) {
      EXPECT_EQ(payload, dropped.at(n)) << "replay returned another batch for seq " << n;
      received[n] = payload;
    }
    if (received.count(n)) {
      EXPECT_EQ(received.at(n), payload);  // the replayed bytes are the published ones
    }
  }
  // A replay from inside the buffer starts there.
  const auto from_gap = Replay(ctx, publisher->replay_endpoint(), gap_begin);
  ASSERT_FALSE(from_gap.empty());
  EXPECT_EQ(from_gap.front().first, gap_begin);
  EXPECT_EQ(from_gap.back().first, total - 1);

  ASSERT_EQ(static_cast<int64_t>(received.size()), total);
  Follower follower;
  int64_t expect = 0;
  for (const auto& [n, payload] : received) {
    ASSERT_EQ(n, expect++);  // no gap
    follower.Apply(payload, kBlockSize);
  }
  EXPECT_GT(follower.num_stored, 0);
  EXPECT_GT(follower.num_removed, 0);  // evictions
  EXPECT_EQ(follower.num_cleared, 1);
  EXPECT_EQ(std::vector<uint64_t>(follower.cached.begin(), follower.cached.end()), pool_state);
  publisher->Shutdown();
  core.Stop();
}

}  // namespace
}  // namespace tinyserve::testing
