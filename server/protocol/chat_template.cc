#include "server/protocol/chat_template.h"

#include <algorithm>
#include <ctime>
#include <optional>

#include "models/tokenizer/added_tokens.h"
#include "server/protocol/chat_builder.h"
#include "server/protocol/tool_templates.h"

namespace tinyserve::protocol {
namespace {

std::string Capitalized(const std::string& role) {
  std::string out = role;
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

RenderedChat RenderPlain(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  ChatBuilder b;
  for (const auto& m : messages) b.Text(Capitalized(m.role) + ": ").Content(m.content).Text("\n");
  if (add_generation_prompt) b.Text("Assistant:");
  return b.Take();
}

// ChatML; `default_system` (when not null) is put first unless the first message is a system one.
RenderedChat RenderChatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const char* default_system) {
  ChatBuilder b;
  if (default_system != nullptr && (messages.empty() || messages[0].role != "system")) {
    b.Text("<|im_start|>system\n").Text(default_system).Text("<|im_end|>\n");
  }
  for (const auto& m : messages) {
    b.Text("<|im_start|>" + m.role + "\n").Content(m.content).Text("<|im_end|>\n");
  }
  if (add_generation_prompt) b.Text("<|im_start|>assistant\n");
  return b.Take();
}

RenderedChat RenderZephyr(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  ChatBuilder b;
  for (const auto& m : messages) b.Text("<|" + m.role + "|>\n").Content(m.content).Text("</s>\n");
  if (add_generation_prompt) b.Text("<|assistant|>\n");
  return b.Take();
}

RenderedChat RenderLlama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  ChatBuilder b;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) b.Text("<|begin_of_text|>");
    b.Text("<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n")
        .Content(Strip(messages[i].content))
        .Text("<|eot_id|>");
  }
  if (add_generation_prompt) b.Text("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return b.Take();
}

// Llama 3.1+ (no tools): a system header always comes first, with the dated preamble and the
// stripped system message (if the first message is one); then every other message as Llama 3.
RenderedChat RenderLlama31(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           std::string_view date) {
  ChatBuilder b;
  b.Text("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
  b.Text("Cutting Knowledge Date: December 2023\nToday Date: ").Text(date).Text("\n\n");
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    b.Content(Strip(messages[0].content));
    first = 1;
  }
  b.Text("<|eot_id|>");
  for (size_t i = first; i < messages.size(); ++i) {
    b.Text("<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n")
        .Content(Strip(messages[i].content))
        .Text("<|eot_id|>");
  }
  if (add_generation_prompt) b.Text("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return b.Take();
}

// Today in local time as strftime "%d %b %Y" in the C locale ("30 Nov 2026"), as transformers'
// strftime_now gives the Llama 3.2 template.
std::string TodayDateString() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[32];
  const size_t n = std::strftime(buf, sizeof(buf), "%d %b %Y", &local);
  return std::string(buf, n);
}

StatusOr<RenderedChat> RenderLlama2(const std::vector<ChatMessage>& messages) {
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    first = 1;
  }
  ChatBuilder b;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if ((m.role == "user") != expect_user || (m.role != "user" && m.role != "assistant")) {
      return InvalidArgument("Conversation roles must alternate user/assistant/user/assistant/...");
    }
    std::string content = m.content;
    if (i == first && has_system) {
      // The <<SYS>> markers are plain text, so the folded message is content as a whole.
      content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + m.content;
    }
    if (m.role == "user") {
      b.Text("<s>[INST] ").Content(Strip(content)).Text(" [/INST]");
    } else {
      b.Text(" ").Content(Strip(content)).Text(" </s>");
    }
  }
  return b.Take();
}

constexpr const char* kQwen2System = "You are a helpful assistant.";
constexpr const char* kQwen25System =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr const char* kSmolLM2System =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

}  // namespace

const std::vector<std::string>& KnownChatTemplates() {
  static const auto* names = new std::vector<std::string>{
      "plain",   "chatml",  "qwen2",     "qwen2.5",   "smollm2", "zephyr",
      "llama-2", "llama-3", "llama-3.1", "llama-3.2", "mistral"};
  return *names;
}

bool IsKnownChatTemplate(std::string_view name) {
  const auto& names = KnownChatTemplates();
  return std::find(names.begin(), names.end(), name) != names.end();
}

StatusOr<std::string> ChooseChatTemplate(std::string_view flag, std::string_view model_template,
                                         std::string_view model_template_error) {
  std::string name;
  if (!flag.empty()) {
    name = flag;
  } else if (!model_template_error.empty()) {
    return InvalidArgument(std::string(model_template_error));
  } else {
    name = model_template.empty() ? "plain" : model_template;
  }
  if (!IsKnownChatTemplate(name)) {
    return InvalidArgument("chat template '" + name + "' is not supported by this server; pass " +
                           "--chat-template NAME");
  }
  return name;
}

StatusOr<RenderedChat> RenderChat(std::string_view name, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, std::string_view today,
                                  const std::vector<ChatTool>& tools) {
  if (name == "mistral") return RenderMistral(messages, tools, add_generation_prompt);
  if (IsKnownChatTemplate(name) && HasToolContent(messages, tools)) {
    if (name == "qwen2.5") return RenderQwen25WithTools(messages, tools, add_generation_prompt);
    if (name == "llama-3.1") {
      return RenderLlama31WithTools(messages, tools, add_generation_prompt, "26 Jul 2024");
    }
    if (name == "llama-3.2") {
      return RenderLlama31WithTools(messages, tools, add_generation_prompt,
                                    today.empty() ? TodayDateString() : std::string(today));
    }
    return RenderChat(name, GenericToolMessages(messages, tools), add_generation_prompt, today);
  }
  if (name == "plain") return RenderPlain(messages, add_generation_prompt);
  if (name == "chatml") return RenderChatml(messages, add_generation_prompt, nullptr);
  if (name == "qwen2") return RenderChatml(messages, add_generation_prompt, kQwen2System);
  if (name == "qwen2.5") return RenderChatml(messages, add_generation_prompt, kQwen25System);
  if (name == "smollm2") return RenderChatml(messages, add_generation_prompt, kSmolLM2System);
  if (name == "zephyr") return RenderZephyr(messages, add_generation_prompt);
  if (name == "llama-2") return RenderLlama2(messages);
  if (name == "llama-3") return RenderLlama3(messages, add_generation_prompt);
  if (name == "llama-3.1") return RenderLlama31(messages, add_generation_prompt, "26 Jul 2024");
  if (name == "llama-3.2") {
    return RenderLlama31(messages, add_generation_prompt,
                         today.empty() ? TodayDateString() : std::string(today));
  }
  std::string known;
  for (const std::string& n : KnownChatTemplates()) known += (known.empty() ? "" : ", ") + n;
  return NotFound("unknown chat template '" + std::string(name) + "' (known: " + known + ")");
}

StatusOr<std::string> RenderChatTemplate(std::string_view name,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) {
  StatusOr<RenderedChat> rendered = RenderChat(name, messages, add_generation_prompt);
  if (!rendered.ok()) return rendered.status();
  return std::move(rendered->text);
}

std::vector<std::pair<std::string, int32_t>> ChatTemplateSpecialTokens(std::string_view name,
                                                                       const Tokenizer& tokenizer) {
  std::vector<std::pair<std::string, int32_t>> special = tokenizer.special_tokens();
  auto listed = [&](std::string_view text) {
    return std::any_of(special.begin(), special.end(),
                       [&](const auto& s) { return s.first == text; });
  };
  if (name == "llama-2" || name == "zephyr" || name == "mistral") {
    if (tokenizer.bos_id() >= 0 && !listed("<s>")) special.emplace_back("<s>", tokenizer.bos_id());
    if (tokenizer.eos_id() >= 0 && !listed("</s>")) {
      special.emplace_back("</s>", tokenizer.eos_id());
    }
  }
  return special;
}

std::vector<int32_t> EncodeWithSpecialTokens(
    std::string_view text, const Tokenizer& tokenizer,
    const std::vector<std::pair<std::string, int32_t>>& special, bool add_bos,
    const std::vector<std::pair<size_t, size_t>>& plain_ranges) {
  std::vector<AddedToken> tokens;
  tokens.reserve(special.size());
  for (const auto& [s, id] : special) tokens.push_back({s, id});
  const AddedTokenMatcher matcher(std::move(tokens));

  // Returns true iff [begin, end) overlaps a plain range.
  auto in_plain = [&](size_t begin, size_t end) {
    auto it = std::lower_bound(
        plain_ranges.begin(), plain_ranges.end(), begin,
        [](const std::pair<size_t, size_t>& r, size_t pos) { return r.second <= pos; });
    return it != plain_ranges.end() && it->first < end;
  };
  std::vector<int32_t> ids;
  if (add_bos && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  auto encode_span = [&](size_t begin, size_t end) {
    if (end <= begin) return;
    std::vector<int32_t> part = tokenizer.EncodeSpan(text.substr(begin, end - begin), begin == 0);
    ids.insert(ids.end(), part.begin(), part.end());
  };
  size_t pos = 0;
  size_t search = 0;
  while (pos < text.size()) {
    std::optional<AddedTokenMatcher::Match> m = matcher.Find(text, search);
    if (!m) break;
    if (in_plain(m->text_begin, m->text_end)) {
      search = m->text_begin + 1;  // content: not a special token; look further
      continue;
    }
    encode_span(pos, m->text_begin);
    ids.push_back(m->id);
    pos = search = m->text_end;
  }
  encode_span(pos, text.size());
  return ids;
}

std::vector<int32_t> EncodeChatPrompt(std::string_view name, const RenderedChat& rendered,
                                      const Tokenizer& tokenizer) {
  return EncodeWithSpecialTokens(rendered.text, tokenizer,
                                 ChatTemplateSpecialTokens(name, tokenizer),
                                 /*add_bos=*/name == "plain", rendered.content_ranges);
}

}  // namespace tinyserve::protocol
