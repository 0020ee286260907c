#include "server/kv_event_publisher.h"

#include <chrono>
#include <cstdio>
#include <msgpack.hpp>
#include <zmq.hpp>

namespace tinyserve {
namespace {

constexpr const char* kMediumGpu = "GPU";  // vLLM's MEDIUM_GPU

void PackStr(msgpack::packer<msgpack::sbuffer>& pk, const std::string& s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackHashes(msgpack::packer<msgpack::sbuffer>& pk, const std::vector<uint64_t>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (uint64_t h : hashes) pk.pack_uint64(h);
}

// seq as 8 bytes, big-endian (Python's int.to_bytes(8, "big")).
std::string SeqBytes(int64_t seq) {
  std::string out(8, '\0');
  const auto u = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((u >> (8 * (7 - i))) & 0xff);
  return out;
}

uint64_t ParseSeq(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* p = static_cast<const unsigned char*>(m.data());
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | p[i];
  return v;
}

// vLLM's rule (ZmqEventPublisher._socket_setup): bind a wildcard, "::", ipc:// or inproc://
// endpoint; connect to any other.
bool ShouldBind(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

}  // namespace

std::string EncodeKvEventBatch(double ts, const std::vector<KvCacheEvent>& events,
                               int64_t data_parallel_rank) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_array(3);  // KVEventBatch: ts, events, data_parallel_rank
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const KvCacheEvent& e : events) {
    switch (e.type) {
      case KvCacheEvent::Type::kBlockStored:
        // block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name;
        // extra_keys, group_idx and the kv_cache_spec fields are at their defaults: omitted.
        pk.pack_array(8);
        PackStr(pk, "BlockStored");
        PackHashes(pk, e.block_hashes);
        if (e.parent_block_hash) {
          pk.pack_uint64(*e.parent_block_hash);
        } else {
          pk.pack_nil();
        }
        pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
        for (int32_t t : e.token_ids) pk.pack_int32(t);
        pk.pack_int32(e.block_size);
        pk.pack_nil();  // lora_id
        PackStr(pk, kMediumGpu);
        pk.pack_nil();  // lora_name
        break;
      case KvCacheEvent::Type::kBlockRemoved:
        pk.pack_array(3);  // block_hashes, medium; group_idx at its default: omitted
        PackStr(pk, "BlockRemoved");
        PackHashes(pk, e.block_hashes);
        PackStr(pk, kMediumGpu);
        break;
      case KvCacheEvent::Type::kAllBlocksCleared:
        pk.pack_array(1);
        PackStr(pk, "AllBlocksCleared");
        break;
    }
  }
  pk.pack_int64(data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;  // ROUTER
};

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(const KvEventsConfig& config) {
  auto sockets = std::make_unique<Sockets>();
  try {
    sockets->pub.set(zmq::sockopt::sndhwm, static_cast<int>(config.hwm));
    sockets->pub.set(zmq::sockopt::linger, 0);
    if (ShouldBind(config.endpoint)) {
      sockets->pub.bind(config.endpoint);
    } else {
      sockets->pub.connect(config.endpoint);
    }
  } catch (const zmq::error_t& e) {
    return Unavailable("KV events: cannot set up the PUB socket on " + config.endpoint + ": " +
                       e.what());
  }
  if (config.replay_endpoint) {
    try {
      sockets->replay = std::make_unique<zmq::socket_t>(sockets->context, zmq::socket_type::router);
      sockets->replay->set(zmq::sockopt::linger, 0);
      sockets->replay->bind(*config.replay_endpoint);
    } catch (const zmq::error_t& e) {
      return Unavailable("KV events: cannot bind the replay socket on " + *config.replay_endpoint +
                         ": " + e.what());
    }
  }
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(config, std::move(sockets)));
}

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config, std::unique_ptr<Sockets> sockets)
    : config_(config), sockets_(std::move(sockets)) {
  endpoint_ = ShouldBind(config_.endpoint) ? sockets_->pub.get(zmq::sockopt::last_endpoint)
                                           : config_.endpoint;
  if (sockets_->replay != nullptr) {
    replay_endpoint_ = sockets_->replay->get(zmq::sockopt::last_endpoint);
  }
  thread_ = std::thread([this] { Run(); });  // the sockets pass to it (thread start: a barrier)
}

KvEventPublisher::~KvEventPublisher() { Shutdown(); }

void KvEventPublisher::Shutdown() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sockets_.reset();
}

void KvEventPublisher::OnKvCacheEvents(std::vector<KvCacheEvent> events) {
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  MutexLock lock(mu_);
  while (!stopping_ && static_cast<int64_t>(queue_.size()) >= config_.max_queue_size) {
    lock.Wait(cv_);  // vLLM's Queue.put blocks too
  }
  if (stopping_) return;
  queue_.push_back({ts, std::move(events)});
  cv_.notify_all();
}

void KvEventPublisher::Publish(const Batch& batch) {
  const uint64_t seq = num_published_.load();
  std::string payload = EncodeKvEventBatch(batch.ts, batch.events);
  const std::string seq_bytes = SeqBytes(static_cast<int64_t>(seq));
  try {
    sockets_->pub.send(zmq::buffer(config_.topic), zmq::send_flags::sndmore);
    sockets_->pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
    sockets_->pub.send(zmq::buffer(payload), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    // A PUB socket drops rather than fails; the batch stays replayable.
    std::fprintf(stderr, "tinyserve: KV events: send of batch %llu failed: %s\n",
                 static_cast<unsigned long long>(seq), e.what());
  }
  replay_buffer_.emplace_back(seq, std::move(payload));
  while (static_cast<int64_t>(replay_buffer_.size()) > config_.buffer_steps) {
    replay_buffer_.pop_front();
  }
  num_published_.store(seq + 1);
}

void KvEventPublisher::ServeReplay() {
  zmq::socket_t& replay = *sockets_->replay;
  std::vector<zmq::message_t> frames;
  while (true) {
    zmq::message_t frame;
    if (!replay.recv(frame, zmq::recv_flags::dontwait)) return;
    const bool more = frame.more();
    frames.push_back(std::move(frame));
    if (more) continue;
    if (frames.size() != 3) {  // identity, empty delimiter, start seq
      std::fprintf(stderr, "tinyserve: KV events: ignoring a replay request of %zu frames\n",
                   frames.size());
      frames.clear();
      continue;
    }
    const uint64_t start = ParseSeq(frames[2]);
    const std::string identity = frames[0].to_string();
    for (const auto& [seq, payload] : replay_buffer_) {
      if (seq < start) continue;
      replay.send(zmq::buffer(identity), zmq::send_flags::sndmore);
      replay.send(zmq::message_t(), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(SeqBytes(static_cast<int64_t>(seq))), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    replay.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    replay.send(zmq::message_t(), zmq::send_flags::sndmore);
    replay.send(zmq::buffer(SeqBytes(-1)), zmq::send_flags::sndmore);
    replay.send(zmq::message_t(), zmq::send_flags::none);
    frames.clear();
  }
}

void KvEventPublisher::Run() {
  std::deque<Batch> batches;
  while (true) {
    bool stopping = false;
    {
      MutexLock lock(mu_);
      if (queue_.empty() && !stopping_) {
        // With a replay socket, wake every 2 ms to serve it; else sleep until there is work.
        const auto deadline =
            std::chrono::steady_clock::now() +
            (sockets_->replay != nullptr ? std::chrono::milliseconds(2) : std::chrono::seconds(1));
        lock.WaitUntil(cv_, deadline);
      }
      batches.swap(queue_);
      stopping = stopping_;
    }
    if (!batches.empty()) cv_.notify_all();  // room in the queue
    for (const Batch& b : batches) Publish(b);
    batches.clear();
    if (sockets_->replay != nullptr) {
      try {
        ServeReplay();
      } catch (const zmq::error_t& e) {
        std::fprintf(stderr, "tinyserve: KV events: replay failed: %s\n", e.what());
      }
    }
    if (stopping) {
      MutexLock lock(mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace tinyserve
