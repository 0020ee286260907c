// Chat templates: a conversation rendered to the prompt text a model was trained on.
//
// Templates are selected by name: a model directory's tokenizer_config.json chat_template is
// recognised as one of them (RecognizeHfChatTemplate in models/tokenizer/hf_tokenizer.h), or
// `serve --chat-template NAME` picks one; llama2.c models use "plain". Each renders exactly as
// below, as the published Jinja templates do (HF apply_chat_template); special tokens appear as
// their literal text, and EncodeChatPrompt() maps them to ids. {x} is a message's content, {Role}
// its role with a capital letter; "\n" is a newline.
//
//   plain    per message "{Role}: {x}\n"; generation prompt "Assistant:"
//            e.g. "System: Be brief.\nUser: Hi\nAssistant:"
//   chatml   per message "<|im_start|>{role}\n{x}<|im_end|>\n";
//            generation prompt "<|im_start|>assistant\n" (SmolLM)
//   qwen2, qwen2.5, smollm2
//            chatml, preceded by "<|im_start|>system\n{D}<|im_end|>\n" when the first message is
//            not a system message, with the default system message D of Qwen2 ("You are a
//            helpful assistant."), Qwen2.5 ("You are Qwen, created by Alibaba Cloud. You are a
//            helpful assistant.") or SmolLM2 ("You are a helpful AI assistant named SmolLM,
//            trained by Hugging Face")
//   zephyr   per message "<|{role}|>\n{x}</s>\n"; generation prompt "<|assistant|>\n" (TinyLlama)
//   llama-2  Meta's Llama-2-chat template (HF tokenizer_config.json): an optional first system
//            message S is folded into the first user turn; then user/assistant must alternate,
//            starting with user (else 400 "Conversation roles must alternate
//            user/assistant/user/assistant/...");
//            user turn      "<s>[INST] {strip(u)} [/INST]"  (first: u =
//            "<<SYS>>\nS\n<</SYS>>\n\nU") assistant turn " {strip(a)} </s>" no generation prompt
//            (the text ends with "[/INST]").
//   llama-3  Meta-Llama-3-Instruct: "<|begin_of_text|>" before the first message; per message
//            "<|start_header_id|>{role}<|end_header_id|>\n\n{strip(x)}<|eot_id|>"; generation
//            prompt "<|start_header_id|>assistant<|end_header_id|>\n\n".
//   llama-3.1, llama-3.2
//            Meta's Llama 3.1 / 3.3 and Llama 3.2 templates without tools: "<|begin_of_text|>"
//            then always a system header "<|start_header_id|>system<|end_header_id|>\n\n
//            Cutting Knowledge Date: December 2023\nToday Date: {D}\n\n{strip(S)}<|eot_id|>",
//            S the first message if it is a system one (else ""); then every other message as in
//            llama-3. D is "26 Jul 2024" for llama-3.1, today's date ("%d %b %Y", local time, as
//            transformers' strftime_now) for llama-3.2.
//   mistral  Mistral-7B-Instruct-v0.3's template: "<s>", then (after an optional first system
//            message S) user/assistant turns that alternate starting with user (else 400): user
//            "[INST] {u}[/INST]" (the last message, when a user one, "[INST] S\n\n{u}[/INST]"),
//            assistant " {strip(a)}</s>"; no generation prompt.
// Tools, tool results and assistant tool calls: tool_templates.h.
// Pure functions but for llama-3.2's date; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "models/tokenizer/tokenizer.h"
#include "server/protocol/tool_spec.h"

namespace tinyserve::protocol {

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_in, std::string content_in)
      : role(std::move(role_in)), content(std::move(content_in)) {}

  std::string role;                      // "system", "user", "assistant" or "tool"
  std::string content;                   // "" for a null content
  std::vector<ChatToolCall> tool_calls;  // an assistant message's calls (tool_spec.h)
  std::string tool_call_id;              // a tool message's: the call it answers

  friend bool operator==(const ChatMessage&, const ChatMessage&) = default;
};

// The known template names, in the order above.
const std::vector<std::string>& KnownChatTemplates();

// Returns true iff `name` is one of KnownChatTemplates().
bool IsKnownChatTemplate(std::string_view name);

// The template a server uses: `flag` (--chat-template) when set, else the model's own
// (`model_template`, "" when it has none), else "plain". `model_template_error` is why the model's
// template was not recognised ("" if it was, or there is none): without a flag that is the error
// (InvalidArgument), so that a model is never served with a guessed template; a flag overrides it.
// A name that is not one of KnownChatTemplates() is InvalidArgument.
StatusOr<std::string> ChooseChatTemplate(std::string_view flag, std::string_view model_template,
                                         std::string_view model_template_error = {});

// A rendered conversation: the text, and where the message contents lie in it.
struct RenderedChat {
  std::string text;
  // [begin, end) byte ranges of `text` that hold message contents, in order. Special-token text
  // inside them is encoded as plain text, so a user cannot inject a special token.
  std::vector<std::pair<size_t, size_t>> content_ranges;
};

// Renders `messages` (and the request's `tools`) with template `name`; the generation prompt is
// appended iff `add_generation_prompt`. `today` replaces llama-3.2's date when not empty (tests).
// Errors: NotFound for an unknown template name (a server configuration error), InvalidArgument
// when the messages break the template's rules (a 400).
StatusOr<RenderedChat> RenderChat(std::string_view name, const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, std::string_view today = {},
                                  const std::vector<ChatTool>& tools = {});

// RenderChat's text alone.
StatusOr<std::string> RenderChatTemplate(std::string_view name,
                                         const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt);

// The special-token strings a prompt of template `name` may hold, with their ids: the
// tokenizer's own special tokens (Tokenizer::special_tokens(): <|im_start|>, <|eot_id|>, ... of an
// HF tokenizer.json), and for llama-2, zephyr and mistral "<s>" -> bos_id(), "</s>" -> eos_id()
// when the tokenizer does not list them (llama2.c and GGUF vocabularies).
std::vector<std::pair<std::string, int32_t>> ChatTemplateSpecialTokens(std::string_view name,
                                                                       const Tokenizer& tokenizer);

// The ids of `text` where each occurrence of a `special` string (earliest, then longest first)
// that does not overlap a `plain_ranges` range becomes its id and every other span is
// tokenizer.EncodeSpan(span, at_start = the span begins the text); BOS first iff `add_bos` and the
// vocabulary has one. (Encoding each span alone gives it SentencePiece's dummy prefix space, as
// HF's legacy Llama tokenizer does after a special token.) `plain_ranges` are sorted [begin, end)
// byte ranges.
std::vector<int32_t> EncodeWithSpecialTokens(
    std::string_view text, const Tokenizer& tokenizer,
    const std::vector<std::pair<std::string, int32_t>>& special, bool add_bos,
    const std::vector<std::pair<size_t, size_t>>& plain_ranges = {});

// The prompt ids for a rendered conversation: EncodeWithSpecialTokens with the template's special
// tokens, message contents encoded as plain text. BOS is added only for "plain": the other
// templates write their own BOS where the model wants one ("<s>", "<|begin_of_text|>"), and HF's
// apply_chat_template and vLLM encode the rendered text without adding special tokens.
std::vector<int32_t> EncodeChatPrompt(std::string_view name, const RenderedChat& rendered,
                                      const Tokenizer& tokenizer);

}  // namespace tinyserve::protocol
