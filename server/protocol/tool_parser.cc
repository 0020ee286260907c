#include "server/protocol/tool_parser.h"
#include "server/protocol/json_fields.h"

#include <nlohmann/json.hpp>
#include <utility>

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kSpace = " \t\n\r";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";

std::string_view StripView(std::string_view s) {
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

// The length of the longest proper prefix of `tag` that `s` ends with.
size_t PartialTagSuffix(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

// The end (one past the closing bracket) of the JSON object or array that starts at s[0], or npos
// when the text ends first. Brackets inside strings do not count; no other checks.
size_t JsonValueEnd(std::string_view s) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// {"name": string, <args_key>: object} (args_key "arguments", or for llama3_json also
// "parameters"): the name and the arguments' JSON text. A string holding a JSON object counts as
// that object (some models quote the arguments).
std::optional<std::pair<std::string, std::string>> ReadCall(const Json& call, bool llama3) {
  if (!call.is_object()) return std::nullopt;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  auto args = call.find("arguments");
  if (llama3 && args == call.end()) args = call.find("parameters");
  if (args == call.end()) return std::nullopt;
  Json value = *args;
  if (value.is_string()) value = ParseJsonText<Json>(value.get<std::string>());
  if (!value.is_object()) return std::nullopt;
  return std::make_pair(name->get<std::string>(),
                        value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::string_view ToolParserName(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kHermes:
      return "hermes";
    case ToolParserKind::kLlama3Json:
      return "llama3_json";
    case ToolParserKind::kMistral:
      return "mistral";
  }
  return "hermes";
}

const std::vector<std::string>& KnownToolParsers() {
  static const auto* names = new std::vector<std::string>{"hermes", "llama3_json", "mistral"};
  return *names;
}

std::optional<ToolParserKind> ToolParserFromName(std::string_view name) {
  for (ToolParserKind k :
       {ToolParserKind::kHermes, ToolParserKind::kLlama3Json, ToolParserKind::kMistral}) {
    if (ToolParserName(k) == name) return k;
  }
  return std::nullopt;
}

ToolParserKind DefaultToolParserFor(std::string_view chat_template) {
  if (chat_template == "llama-3.1" || chat_template == "llama-3.2") {
    return ToolParserKind::kLlama3Json;
  }
  if (chat_template == "mistral") return ToolParserKind::kMistral;
  return ToolParserKind::kHermes;
}

std::string ToolCallId(ToolParserKind kind, std::string_view id_seed, int32_t index) {
  static constexpr std::string_view kAlnum =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  uint64_t state = 0xcbf29ce484222325ULL;  // FNV-1a over the seed, then the index
  for (char c : id_seed) state = (state ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  state = (state ^ static_cast<uint64_t>(index)) * 0x100000001b3ULL;
  const bool mistral = kind == ToolParserKind::kMistral;
  std::string id = mistral ? "" : "call_";
  const int length = mistral ? 9 : 24;
  for (int i = 0; i < length; ++i) id.push_back(kAlnum[SplitMix64(&state) % kAlnum.size()]);
  return id;
}

ToolCallParser::ToolCallParser(ToolParserKind kind, bool parallel_tool_calls, std::string id_seed)
    : kind_(kind),
      parallel_(parallel_tool_calls),
      id_seed_(std::move(id_seed)),
      state_(kind == ToolParserKind::kHermes ? State::kContent : State::kStart) {}

ToolParseDelta ToolCallParser::Feed(std::string_view text) {
  ToolParseDelta out;
  buf_.append(text);
  Process(/*at_end=*/false, &out);
  return out;
}

ToolParseDelta ToolCallParser::Finish() {
  ToolParseDelta out;
  Process(/*at_end=*/true, &out);
  return out;
}

void ToolCallParser::Process(bool at_end, ToolParseDelta* out) {
  for (;;) {
    bool progressed = false;
    switch (state_) {
      case State::kStart:
        progressed = StepStart(at_end);
        break;
      case State::kContent:
        progressed = StepContent(at_end, out);
        break;
      case State::kInBlock:
        progressed = StepInBlock(at_end, out);
        break;
      case State::kJsonSequence:
        progressed = StepJsonSequence(at_end, out);
        break;
      case State::kArray:
        progressed = StepArray(at_end, out);
        break;
    }
    if (!progressed || (buf_.empty() && state_ == State::kContent)) return;
  }
}

void ToolCallParser::EmitContent(std::string_view text, ToolParseDelta* out) {
  if (skip_space_) {
    const size_t k = text.find_first_not_of(kSpace);
    if (k == std::string_view::npos) return;
    text.remove_prefix(k);
    skip_space_ = false;
  }
  out->content.append(text);
  content_.append(text);
}

void ToolCallParser::AddCall(std::string name, std::string arguments, ToolParseDelta* out) {
  skip_space_ = true;
  const int32_t index = num_parsed_++;
  if (!parallel_ && !calls_.empty()) return;
  ChatToolCall call{ToolCallId(kind_, id_seed_, index), std::move(name), std::move(arguments)};
  out->calls.push_back(call);
  calls_.push_back(std::move(call));
}

// llama3_json and mistral: what the output starts with decides.
bool ToolCallParser::StepStart(bool at_end) {
  const size_t b = buf_.find_first_not_of(kSpace);
  if (b == std::string::npos) {
    if (!at_end) return false;
    state_ = State::kContent;
    return true;
  }
  const std::string_view rest = std::string_view(buf_).substr(b);
  const std::string_view tag = kind_ == ToolParserKind::kLlama3Json ? kPythonTag : kMistralTag;
  if (rest.size() < tag.size() && tag.substr(0, rest.size()) == rest && !at_end) return false;
  opener_ = buf_.substr(0, b);
  if (rest.substr(0, std::min(rest.size(), tag.size())) == tag) {
    opener_ += tag;
    buf_.erase(0, b + tag.size());
    state_ = kind_ == ToolParserKind::kLlama3Json ? State::kJsonSequence : State::kArray;
    return true;
  }
  const char want = kind_ == ToolParserKind::kLlama3Json ? '{' : '[';
  if (rest[0] == want) {
    buf_.erase(0, b);
    state_ = kind_ == ToolParserKind::kLlama3Json ? State::kJsonSequence : State::kArray;
  } else {
    opener_.clear();
    state_ = State::kContent;
  }
  return true;
}

bool ToolCallParser::StepContent(bool at_end, ToolParseDelta* out) {
  if (kind_ == ToolParserKind::kLlama3Json) {  // no tags after the start
    EmitContent(buf_, out);
    buf_.clear();
    return false;
  }
  const std::string_view tag = kind_ == ToolParserKind::kHermes ? kHermesOpen : kMistralTag;
  const size_t at = buf_.find(tag);
  if (at != std::string::npos) {
    // Whitespace before the tag belongs to the call (kept in opener_ in case it fails).
    const std::string_view before = std::string_view(buf_).substr(0, at);
    const size_t keep = before.find_last_not_of(kSpace) + 1;  // npos + 1 == 0
    EmitContent(before.substr(0, keep), out);
    opener_ = std::string(before.substr(keep)) + std::string(tag);
    buf_.erase(0, at + tag.size());
    state_ = kind_ == ToolParserKind::kHermes ? State::kInBlock : State::kArray;
    return true;
  }
  if (at_end) {
    EmitContent(buf_, out);
    buf_.clear();
    return false;
  }
  // Hold back what may start a tag, and the whitespace before it.
  size_t hold = PartialTagSuffix(buf_, tag);
  const std::string_view head = std::string_view(buf_).substr(0, buf_.size() - hold);
  const size_t keep = head.find_last_not_of(kSpace) + 1;
  EmitContent(head.substr(0, keep), out);
  buf_.erase(0, keep);
  return false;
}

bool ToolCallParser::StepInBlock(bool at_end, ToolParseDelta* out) {
  const size_t close = buf_.find(kHermesClose);
  if (close == std::string::npos && !at_end) return false;
  const std::string_view body =
      std::string_view(buf_).substr(0, close == std::string::npos ? buf_.size() : close);
  const Json parsed = ParseJsonText<Json>(StripView(body));
  if (auto call = ReadCall(parsed, /*llama3=*/false)) {
    AddCall(std::move(call->first), std::move(call->second), out);
  } else {
    EmitContent(opener_, out);
    EmitContent(body, out);
    if (close != std::string::npos) EmitContent(kHermesClose, out);
  }
  buf_.erase(0, close == std::string::npos ? buf_.size() : close + kHermesClose.size());
  opener_.clear();
  state_ = State::kContent;
  return true;
}

bool ToolCallParser::StepJsonSequence(bool at_end, ToolParseDelta* out) {
  size_t b = buf_.find_first_not_of(kSpace);
  if (b != std::string::npos && buf_[b] == ';' && num_parsed_ > 0) {
    b = buf_.find_first_not_of(kSpace, b + 1);
  }
  if (b == std::string::npos) {
    if (!at_end) return false;
    if (num_parsed_ == 0) EmitContent(opener_ + buf_, out);  // nothing but the tag
    buf_.clear();
    state_ = State::kContent;
    return true;
  }
  const std::string_view rest = std::string_view(buf_).substr(b);
  const size_t end = rest[0] == '{' ? JsonValueEnd(rest) : 0;
  if (end == std::string_view::npos && !at_end) return false;
  std::optional<std::pair<std::string, std::string>> call;
  if (end != 0 && end != std::string_view::npos) {
    call = ReadCall(ParseJsonText<Json>(rest.substr(0, end)), /*llama3=*/true);
  }
  if (!call) {  // the calls end here; the rest is content
    EmitContent(num_parsed_ == 0 ? opener_ + buf_ : buf_, out);
    buf_.clear();
    opener_.clear();
    state_ = State::kContent;
    return true;
  }
  AddCall(std::move(call->first), std::move(call->second), out);
  buf_.erase(0, b + end);
  return true;
}

bool ToolCallParser::StepArray(bool at_end, ToolParseDelta* out) {
  const size_t b = buf_.find_first_not_of(kSpace);
  if (b == std::string::npos && !at_end) return false;
  const std::string_view rest =
      b == std::string::npos ? std::string_view() : std::string_view(buf_).substr(b);
  const size_t end = !rest.empty() && rest[0] == '[' ? JsonValueEnd(rest) : 0;
  if (end == std::string_view::npos && !at_end) return false;
  std::vector<std::pair<std::string, std::string>> calls;
  bool ok = end != 0 && end != std::string_view::npos;
  if (ok) {
    const Json parsed = ParseJsonText<Json>(rest.substr(0, end));
    ok = parsed.is_array() && !parsed.empty();
    for (size_t i = 0; ok && i < parsed.size(); ++i) {
      auto call = ReadCall(parsed[i], /*llama3=*/false);
      ok = call.has_value();
      if (ok) calls.push_back(std::move(*call));
    }
  }
  if (!ok) {  // this block is content; later tags are still looked for
    const size_t consumed = end == 0 || end == std::string_view::npos ? buf_.size() : b + end;
    EmitContent(opener_ + buf_.substr(0, consumed), out);
    buf_.erase(0, consumed);
  } else {
    for (auto& [name, args] : calls) AddCall(std::move(name), std::move(args), out);
    buf_.erase(0, b + end);
  }
  opener_.clear();
  state_ = State::kContent;
  return true;
}

ToolParseDelta ParseToolCalls(ToolParserKind kind, bool parallel_tool_calls,
                              std::string_view id_seed, std::string_view text) {
  ToolCallParser parser(kind, parallel_tool_calls, std::string(id_seed));
  ToolParseDelta out = parser.Feed(text);
  ToolParseDelta tail = parser.Finish();
  out.content += tail.content;
  for (ChatToolCall& c : tail.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace tinyserve::protocol
