// RecognizeHfChatTemplate: which known family a tokenizer_config.json chat_template is.
#include <string>
#include <string_view>

#include "models/tokenizer/hf_tokenizer.h"

namespace tinyserve {
namespace {

bool Has(std::string_view text, std::string_view marker) {
  return text.find(marker) != std::string_view::npos;
}

// ChatML templates that put a default system message first when the conversation has none.
struct DefaultSystem {
  const char* name;
  const char* message;
};
constexpr DefaultSystem kChatmlDefaults[] = {
    {"qwen2.5", "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
    {"smollm2", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
    {"qwen2", "You are a helpful assistant."},
};

}  // namespace

StatusOr<std::string> RecognizeHfChatTemplate(std::string_view jinja, const std::string& source) {
  auto unsupported = [&](const std::string& why) {
    return InvalidArgument(
        source + ": unrecognised chat_template (" + why +
        "); known families: llama-2, llama-3, llama-3.1, llama-3.2, "
        "chatml, qwen2, qwen2.5, smollm2, zephyr, mistral; pass --chat-template NAME "
        "to choose one");
  };
  if (Has(jinja, "<|start_header_id|>") && Has(jinja, "<|end_header_id|>") &&
      Has(jinja, "<|eot_id|>")) {
    if (Has(jinja, "Cutting Knowledge Date: December 2023") && Has(jinja, "Today Date: ")) {
      // Llama 3.2 dates its preamble today (strftime_now); 3.1 and 3.3 with "26 Jul 2024".
      return std::string(Has(jinja, "strftime_now") ? "llama-3.2" : "llama-3.1");
    }
    if (Has(jinja, "Cutting Knowledge Date") || Has(jinja, "tools_in_user_message")) {
      return unsupported("a Llama 3.1+-style template with an unknown preamble");
    }
    return std::string("llama-3");
  }
  if (Has(jinja, "<|im_start|>") && Has(jinja, "<|im_end|>")) {
    for (const DefaultSystem& d : kChatmlDefaults) {
      if (Has(jinja, d.message)) return std::string(d.name);
    }
    if (Has(jinja, "<|im_start|>system\\n") || Has(jinja, "<|im_start|>system\n")) {
      return unsupported("a ChatML template with an unknown default system message");
    }
    return std::string("chatml");
  }
  if (Has(jinja, "<|user|>") && Has(jinja, "<|assistant|>") && Has(jinja, "eos_token")) {
    return std::string("zephyr");
  }
  if (Has(jinja, "[INST]") && Has(jinja, "[/INST]")) {
    if (Has(jinja, "<<SYS>>")) return std::string("llama-2");
    // Mistral-7B-Instruct-v0.3's: tools in [AVAILABLE_TOOLS], results in [TOOL_RESULTS]. The
    // older Mistral templates ("[INST] " + content + " [/INST]", no tools) space their turns
    // differently, so they stay unrecognised rather than rendered as v0.3.
    if (Has(jinja, "[AVAILABLE_TOOLS]") && Has(jinja, "[/AVAILABLE_TOOLS]") &&
        Has(jinja, "[TOOL_CALLS]") && Has(jinja, "[TOOL_RESULTS]")) {
      return std::string("mistral");
    }
    return unsupported("an [INST] template without <<SYS>> or Mistral v0.3's tool markers");
  }
  return unsupported("no known markers");
}

}  // namespace tinyserve
