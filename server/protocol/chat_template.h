// Chat templates: a conversation rendered to the prompt text a model was trained on.
//
// Templates are selected by name (the model directory's config will pick one; llama2.c models use
// "plain"). Each renders exactly as below; special tokens appear as their literal text, and
// EncodeWithSpecialTokens() maps them to ids. {x} is a message's content, {Role} its role with a
// capital letter; "\n" is a newline.
//
//   plain    per message "{Role}: {x}\n"; generation prompt "Assistant:"
//            e.g. "System: Be brief.\nUser: Hi\nAssistant:"
//   chatml   per message "<|im_start|>{role}\n{x}<|im_end|>\n";
//            generation prompt "<|im_start|>assistant\n"
//   zephyr   per message "<|{role}|>\n{x}</s>\n"; generation prompt "<|assistant|>\n"
//   llama-2  Meta's Llama-2-chat template (HF tokenizer_config.json): an optional first system
//            message S is folded into the first user turn; then user/assistant must alternate,
//            starting with user (else 400 "Conversation roles must alternate
//            user/assistant/user/assistant/...");
//            user turn      "<s>[INST] {strip(u)} [/INST]"  (first: u =
//            "<<SYS>>\nS\n<</SYS>>\n\nU") assistant turn " {strip(a)} </s>" no generation prompt
//            (the text ends with "[/INST]").
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/status.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve::protocol {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;

  friend bool operator==(const ChatMessage&, const ChatMessage&) = default;
};

// Returns true iff `name` is a known template: "plain", "chatml", "zephyr", "llama-2".
bool IsKnownChatTemplate(std::string_view name);

// Renders `messages` with template `name`; the generation prompt is appended iff
// `add_generation_prompt`. Errors: NotFound for an unknown template name (a server configuration
// error), InvalidArgument when the messages break the template's rules (a 400).
StatusOr<std::string> RenderChatTemplate(std::string_view name,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt);

// The special-token strings of template `name` with the ids `tokenizer` gives them: "<s>" ->
// bos_id(), "</s>" -> eos_id() for llama-2 and zephyr; none for plain. chatml's and zephyr's own
// markers (<|im_start|>, <|user|>, ...) need the vocabulary's added tokens, which the Tokenizer
// interface does not expose yet: they are encoded as text.
std::vector<std::pair<std::string, int32_t>> ChatTemplateSpecialTokens(std::string_view name,
                                                                       const Tokenizer& tokenizer);

// The ids of `text` where each occurrence of a `special` string (earliest, then longest first)
// becomes its id and every other span is tokenizer.Encode(span, /*add_bos=*/false); BOS first iff
// `add_bos` and the vocabulary has one. (Encoding each span alone gives it SentencePiece's dummy
// prefix space, as HF's legacy Llama tokenizer does after a special token.)
std::vector<int32_t> EncodeWithSpecialTokens(
    std::string_view text, const Tokenizer& tokenizer,
    const std::vector<std::pair<std::string, int32_t>>& special, bool add_bos);

// The prompt ids for a rendered template: EncodeWithSpecialTokens with the template's special
// tokens; BOS is added unless the template writes its own ("llama-2").
std::vector<int32_t> EncodeChatPrompt(std::string_view name, std::string_view rendered,
                                      const Tokenizer& tokenizer);

}  // namespace tinyserve::protocol
