#include "server/protocol/logprobs_json.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/json_writer.h"
#include "base/utf8.h"

namespace tinyserve::protocol {
namespace {

// The float as the double with the same shortest decimal form (-0.1f -> -0.1, not
// -0.10000000149011612), clamped.
double JsonLogprob(float logprob) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf) - 1, ClampLogprob(logprob));
  if (ec != std::errc()) return ClampLogprob(logprob);
  *end = '\0';
  return std::strtod(buf, nullptr);
}

nlohmann::ordered_json BytesJson(const std::string& piece) {
  nlohmann::ordered_json bytes = nlohmann::ordered_json::array();
  for (char c : piece) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

nlohmann::ordered_json ChatEntry(const Tokenizer& tokenizer, int32_t prev_id, int32_t id,
                                 float logprob) {
  const std::string piece = tokenizer.DecodePiece(prev_id, id);
  nlohmann::ordered_json entry;
  entry["token"] = ToValidUtf8(piece);
  entry["logprob"] = JsonLogprob(logprob);
  entry["bytes"] = BytesJson(piece);
  return entry;
}

}  // namespace

float ClampLogprob(float logprob) {
  if (std::isnan(logprob) || logprob < kMinLogprob) return kMinLogprob;
  return logprob;
}

std::string LogprobTokenText(const Tokenizer& tokenizer, int32_t prev_id, int32_t id) {
  return ToValidUtf8(tokenizer.DecodePiece(prev_id, id));
}

nlohmann::ordered_json CompletionLogprobsJson(const Tokenizer& tokenizer, int32_t prev_id,
                                              const std::vector<TokenLogprobs>& tokens,
                                              size_t text_offset, size_t* next_text_offset) {
  nlohmann::ordered_json offsets = nlohmann::ordered_json::array();
  nlohmann::ordered_json token_logprobs = nlohmann::ordered_json::array();
  nlohmann::ordered_json token_texts = nlohmann::ordered_json::array();
  nlohmann::ordered_json top_logprobs = nlohmann::ordered_json::array();
  for (const TokenLogprobs& t : tokens) {
    const std::string text = LogprobTokenText(tokenizer, prev_id, t.token_id);
    offsets.push_back(text_offset);
    token_logprobs.push_back(JsonLogprob(t.logprob));
    token_texts.push_back(text);
    nlohmann::ordered_json top = nlohmann::ordered_json::object();
    top[text] = JsonLogprob(t.logprob);
    for (const auto& [id, logprob] : t.top) {
      const std::string alt = LogprobTokenText(tokenizer, prev_id, id);
      if (!top.contains(alt)) top[alt] = JsonLogprob(logprob);
    }
    top_logprobs.push_back(std::move(top));
    text_offset += Utf8Length(text);
    prev_id = t.token_id;
  }
  if (next_text_offset != nullptr) *next_text_offset = text_offset;
  nlohmann::ordered_json out;
  out["text_offset"] = std::move(offsets);
  out["token_logprobs"] = std::move(token_logprobs);
  out["tokens"] = std::move(token_texts);
  out["top_logprobs"] = std::move(top_logprobs);
  return out;
}

void AppendCompletionLogprobsJson(const Tokenizer& tokenizer, int32_t prev_id,
                                  const std::vector<TokenLogprobs>& tokens, size_t text_offset,
                                  size_t* next_text_offset, std::string* out) {
  std::vector<std::string> texts;  // [tokens] the token texts
  texts.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t before = i == 0 ? prev_id : tokens[i - 1].token_id;
    texts.push_back(LogprobTokenText(tokenizer, before, tokens[i].token_id));
  }
  out->append(R"({"text_offset":[)");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonInt(static_cast<int64_t>(text_offset), out);
    text_offset += Utf8Length(texts[i]);
  }
  if (next_text_offset != nullptr) *next_text_offset = text_offset;
  out->append(R"(],"token_logprobs":[)");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonDouble(JsonLogprob(tokens[i].logprob), out);
  }
  out->append(R"(],"tokens":[)");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(texts[i], out);
  }
  out->append(R"(],"top_logprobs":[)");
  std::vector<std::string> keys;  // one dict's keys so far (a repeated text is left out)
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out->push_back(',');
    const int32_t before = i == 0 ? prev_id : tokens[i - 1].token_id;
    keys.clear();
    keys.push_back(texts[i]);
    out->push_back('{');
    AppendJsonString(texts[i], out);
    out->push_back(':');
    AppendJsonDouble(JsonLogprob(tokens[i].logprob), out);
    for (const auto& [id, logprob] : tokens[i].top) {
      std::string alt = LogprobTokenText(tokenizer, before, id);
      if (std::find(keys.begin(), keys.end(), alt) != keys.end()) continue;
      out->push_back(',');
      AppendJsonString(alt, out);
      out->push_back(':');
      AppendJsonDouble(JsonLogprob(logprob), out);
      keys.push_back(std::move(alt));
    }
    out->push_back('}');
  }
  out->append("]}");
}

nlohmann::ordered_json CompletionPromptLogprobsJson(
    const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
    const std::vector<TokenLogprobs>& prompt_logprobs) {
  const std::string first = LogprobTokenText(tokenizer, -1, prompt_ids.front());
  nlohmann::ordered_json out;
  out["text_offset"] = nlohmann::ordered_json::array({0});
  out["token_logprobs"] = nlohmann::ordered_json::array({nullptr});
  out["tokens"] = nlohmann::ordered_json::array({first});
  out["top_logprobs"] = nlohmann::ordered_json::array({nullptr});
  ConcatCompletionLogprobs(&out, CompletionLogprobsJson(tokenizer, prompt_ids.front(),
                                                        prompt_logprobs, Utf8Length(first)));
  return out;
}

nlohmann::ordered_json PromptLogprobsJson(const Tokenizer& tokenizer,
                                          const std::vector<int32_t>& prompt_ids,
                                          const std::vector<TokenLogprobs>& prompt_logprobs) {
  assert(!prompt_ids.empty() && prompt_logprobs.size() < prompt_ids.size());
  nlohmann::ordered_json out = nlohmann::ordered_json::array({nullptr});
  for (size_t i = 0; i < prompt_logprobs.size(); ++i) {
    const TokenLogprobs& t = prompt_logprobs[i];
    const int32_t prev = prompt_ids[i];
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    auto add = [&](int32_t id, float logprob, int32_t rank) {
      nlohmann::ordered_json value;
      value["logprob"] = JsonLogprob(logprob);
      value["rank"] = rank;
      value["decoded_token"] = LogprobTokenText(tokenizer, prev, id);
      entry[std::to_string(id)] = std::move(value);
    };
    add(t.token_id, t.logprob, t.rank);
    for (size_t k = 0; k < t.top.size(); ++k) {
      add(t.top[k].first, t.top[k].second, static_cast<int32_t>(k) + 1);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

void ConcatCompletionLogprobs(nlohmann::ordered_json* head, const nlohmann::ordered_json& tail) {
  for (const char* key : {"text_offset", "token_logprobs", "tokens", "top_logprobs"}) {
    nlohmann::ordered_json& dst = (*head)[key];
    for (const auto& v : tail.at(key)) dst.push_back(v);
  }
}

nlohmann::ordered_json ChatLogprobsJson(const Tokenizer& tokenizer, int32_t prev_id,
                                        const std::vector<TokenLogprobs>& tokens) {
  nlohmann::ordered_json content = nlohmann::ordered_json::array();
  for (const TokenLogprobs& t : tokens) {
    nlohmann::ordered_json entry = ChatEntry(tokenizer, prev_id, t.token_id, t.logprob);
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const auto& [id, logprob] : t.top)
      top.push_back(ChatEntry(tokenizer, prev_id, id, logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
    prev_id = t.token_id;
  }
  nlohmann::ordered_json out;
  out["content"] = std::move(content);
  return out;
}

}  // namespace tinyserve::protocol
