#include "bench/serve/stream_record.h"

#include <nlohmann/json.hpp>

namespace tinyserve::bench {
namespace {

const std::string* TextOf(const nlohmann::json& choice) {
  auto it = choice.find("text");
  if (it != choice.end() && it->is_string()) return &it->get_ref<const std::string&>();
  auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return nullptr;
  for (const char* key : {"content", "reasoning_content"}) {
    auto c = delta->find(key);
    if (c != delta->end() && c->is_string() && !c->get_ref<const std::string&>().empty()) {
      return &c->get_ref<const std::string&>();
    }
  }
  return nullptr;
}

}  // namespace

bool StreamRecorder::OnPayload(std::string_view payload) {
  if (done_) return false;
  if (payload == "[DONE]") {
    record_->end_s = clock_->Now();
    done_ = true;
    return false;
  }
  const nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    record_->error = "malformed SSE payload: " + std::string(payload.substr(0, 200));
    record_->end_s = clock_->Now();
    done_ = true;
    return false;
  }
  if (auto err = chunk.find("error"); err != chunk.end()) {
    record_->error = "server error in stream: " + err->dump();
    record_->end_s = clock_->Now();
    done_ = true;
    return false;
  }
  if (auto choices = chunk.find("choices"); choices != chunk.end() && choices->is_array() &&
                                            !choices->empty() && (*choices)[0].is_object()) {
    const std::string* text = TextOf((*choices)[0]);
    if (text != nullptr && !text->empty()) {
      record_->chunk_s.push_back(clock_->Now());
      record_->generated_text += *text;
    }
  }
  if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    if (auto c = usage->find("completion_tokens"); c != usage->end() && c->is_number_integer()) {
      record_->output_len = c->get<int32_t>();
      record_->usage_reported = true;
    }
    if (auto p = usage->find("prompt_tokens"); p != usage->end() && p->is_number_integer()) {
      record_->prompt_len = p->get<int32_t>();
    }
  }
  return true;
}

}  // namespace tinyserve::bench
