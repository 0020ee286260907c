#include "server/protocol/chat_template.h"

namespace tinyserve::protocol {
namespace {

std::string Capitalized(const std::string& role) {
  std::string out = role;
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

// Python's str.strip() for ASCII whitespace.
std::string Strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  size_t end = s.find_last_not_of(kSpace);
  return std::string(s.substr(begin, end - begin + 1));
}

std::string RenderPlain(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) out += Capitalized(m.role) + ": " + m.content + "\n";
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

std::string RenderChatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string RenderZephyr(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) out += "<|" + m.role + "|>\n" + m.content + "</s>\n";
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

StatusOr<std::string> RenderLlama2(const std::vector<ChatMessage>& messages) {
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    first = 1;
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if ((m.role == "user") != expect_user || (m.role != "user" && m.role != "assistant")) {
      return InvalidArgument("Conversation roles must alternate user/assistant/user/assistant/...");
    }
    std::string content = m.content;
    if (i == first && has_system) {
      content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + m.content;
    }
    if (m.role == "user") {
      out += "<s>[INST] " + Strip(content) + " [/INST]";
    } else {
      out += " " + Strip(content) + " </s>";
    }
  }
  return out;
}

}  // namespace

bool IsKnownChatTemplate(std::string_view name) {
  return name == "plain" || name == "chatml" || name == "zephyr" || name == "llama-2";
}

StatusOr<std::string> RenderChatTemplate(std::string_view name,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) {
  if (name == "plain") return RenderPlain(messages, add_generation_prompt);
  if (name == "chatml") return RenderChatml(messages, add_generation_prompt);
  if (name == "zephyr") return RenderZephyr(messages, add_generation_prompt);
  if (name == "llama-2") return RenderLlama2(messages);
  return NotFound("unknown chat template '" + std::string(name) +
                  "' (known: plain, chatml, zephyr, llama-2)");
}

std::vector<std::pair<std::string, int32_t>> ChatTemplateSpecialTokens(std::string_view name,
                                                                       const Tokenizer& tokenizer) {
  std::vector<std::pair<std::string, int32_t>> special;
  if (name == "llama-2" || name == "zephyr") {
    if (tokenizer.bos_id() >= 0) special.emplace_back("<s>", tokenizer.bos_id());
    if (tokenizer.eos_id() >= 0) special.emplace_back("</s>", tokenizer.eos_id());
  }
  return special;
}

std::vector<int32_t> EncodeWithSpecialTokens(
    std::string_view text, const Tokenizer& tokenizer,
    const std::vector<std::pair<std::string, int32_t>>& special, bool add_bos) {
  std::vector<int32_t> ids;
  if (add_bos && tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());
  auto encode_span = [&](std::string_view span) {
    if (span.empty()) return;
    std::vector<int32_t> part = tokenizer.Encode(span, /*add_bos=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best_at = std::string_view::npos;
    const std::pair<std::string, int32_t>* best = nullptr;
    for (const auto& s : special) {
      if (s.first.empty()) continue;
      size_t at = text.find(s.first, pos);
      if (at == std::string_view::npos) continue;
      if (best == nullptr || at < best_at ||
          (at == best_at && s.first.size() > best->first.size())) {
        best_at = at;
        best = &s;
      }
    }
    if (best == nullptr) {
      encode_span(text.substr(pos));
      break;
    }
    encode_span(text.substr(pos, best_at - pos));
    ids.push_back(best->second);
    pos = best_at + best->first.size();
  }
  return ids;
}

std::vector<int32_t> EncodeChatPrompt(std::string_view name, std::string_view rendered,
                                      const Tokenizer& tokenizer) {
  return EncodeWithSpecialTokens(rendered, tokenizer, ChatTemplateSpecialTokens(name, tokenizer),
                                 /*add_bos=*/name != "llama-2");
}

}  // namespace tinyserve::protocol
