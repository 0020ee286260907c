// KvEventsConfig: `--kv-events-config JSON`, vLLM's KVEventsConfig (vllm/config/kv_events.py):
// the same keys, types and defaults, so a vLLM deployment's flag value works unchanged.
//
//   {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
//    "replay_endpoint": "tcp://*:5558", "buffer_steps": 10000, "hwm": 100000,
//    "max_queue_size": 100000, "topic": "kv-events"}
//
// publisher defaults to "zmq" when enable_kv_cache_events is true, else "null" (no events).
// Unknown keys, wrong types and out-of-range values are errors that name the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace tinyserve {

struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  std::string publisher = "null";              // "null" | "zmq"
  std::string endpoint = "tcp://*:5557";       // PUB: bound if it has '*', "::", ipc://, inproc://
  std::optional<std::string> replay_endpoint;  // ROUTER, always bound; none: no replay
  int64_t buffer_steps = 10'000;               // batches kept for replay
  int64_t hwm = 100'000;                       // the PUB socket's send high-water mark
  int64_t max_queue_size = 100'000;            // batches waiting for the publisher thread
  std::string topic;                           // the first frame of every message

  // True iff events are to be published (enabled, publisher "zmq").
  bool publishes() const { return enable_kv_cache_events && publisher == "zmq"; }
};

// Parses the flag's JSON object.
StatusOr<KvEventsConfig> ParseKvEventsConfig(const std::string& json);

}  // namespace tinyserve
