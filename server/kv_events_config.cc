#include "server/kv_events_config.h"

#include <nlohmann/json.hpp>

namespace tinyserve {
namespace {

Status Bad(const std::string& what) { return InvalidArgument("--kv-events-config: " + what); }

}  // namespace

StatusOr<KvEventsConfig> ParseKvEventsConfig(const std::string& json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    return Bad(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) return Bad("expected a JSON object, got " + j.dump());
  KvEventsConfig c;
  bool publisher_set = false;
  for (const auto& item : j.items()) {
    // Named references, not a structured binding: clang 14 cannot capture bindings in a lambda.
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    auto need = [&](bool ok, const char* type) -> Status {
      return ok ? Status::Ok() : Bad("\"" + key + "\" must be " + type + ", got " + value.dump());
    };
    if (key == "enable_kv_cache_events") {
      if (Status s = need(value.is_boolean(), "a boolean"); !s.ok()) return s;
      c.enable_kv_cache_events = value.get<bool>();
    } else if (key == "publisher") {
      if (Status s = need(value.is_string() || value.is_null(), "\"null\" or \"zmq\""); !s.ok()) {
        return s;
      }
      if (value.is_string()) {
        c.publisher = value.get<std::string>();
        if (c.publisher != "null" && c.publisher != "zmq") {
          return Bad("\"publisher\" must be \"null\" or \"zmq\", got \"" + c.publisher + "\"");
        }
        publisher_set = true;
      }
    } else if (key == "endpoint" || key == "topic") {
      if (Status s = need(value.is_string(), "a string"); !s.ok()) return s;
      (key == "endpoint" ? c.endpoint : c.topic) = value.get<std::string>();
    } else if (key == "replay_endpoint") {
      if (Status s = need(value.is_string() || value.is_null(), "a string or null"); !s.ok()) {
        return s;
      }
      if (value.is_string()) c.replay_endpoint = value.get<std::string>();
    } else if (key == "buffer_steps" || key == "hwm" || key == "max_queue_size") {
      if (Status s = need(value.is_number_integer(), "an integer"); !s.ok()) return s;
      const int64_t v = value.get<int64_t>();
      const int64_t min = key == "hwm" ? 0 : 1;
      if (v < min) return Bad("\"" + key + "\" must be >= " + std::to_string(min));
      (key == "buffer_steps" ? c.buffer_steps : key == "hwm" ? c.hwm : c.max_queue_size) = v;
    } else {
      return Bad("unknown key \"" + key +
                 "\" (known: enable_kv_cache_events, publisher, endpoint, replay_endpoint, "
                 "buffer_steps, hwm, max_queue_size, topic)");
    }
  }
  if (!publisher_set) c.publisher = c.enable_kv_cache_events ? "zmq" : "null";
  if (c.publishes() && c.endpoint.empty()) return Bad("\"endpoint\" must not be empty");
  if (c.replay_endpoint && c.replay_endpoint->empty()) {
    return Bad("\"replay_endpoint\" must not be empty (use null for no replay)");
  }
  return c;
}

}  // namespace tinyserve
