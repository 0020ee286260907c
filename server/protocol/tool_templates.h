// Tool rendering of the chat templates (chat_template.h calls these when a request has tools, tool
// messages or assistant tool calls). Each family renders as its published Jinja template does
// (HF apply_chat_template with vLLM's inputs: tools as tool_spec.h's ChatTool, an assistant call's
// arguments as the parsed JSON object, so `tojson` writes it in Python's json.dumps form):
//
//   llama-3.1, llama-3.2  Meta's templates (tools_in_user_message, their default): the system
//            header gets "Environment: ipython\n" before the dates; the first message after the
//            system one must be a user message U (else 400), rendered as
//            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please
//            respond with a JSON for a function call with its proper arguments that best answers
//            the given prompt.\n\nRespond in the format {"name": function name, "parameters":
//            dictionary of argument name and its value}.Do not use variables.\n\n" + each tool as
//            json.dumps(indent=4) + "\n\n", then strip(U) + "<|eot_id|>". An assistant call (one
//            per message, else 400 "This model only supports single tool-calls at once!") is
//            `{"name": "NAME", "parameters": ARGS}<|eot_id|>` in an assistant turn; a tool result
//            is an "ipython" turn holding its content as a JSON string (the template's `tojson`
//            of a string).
//   qwen2.5  Qwen2.5-Instruct's template: the system turn (the first system message, else the
//            default) + "\n\n# Tools\n\nYou may call one or more functions ... <tools>" + "\n" +
//            json.dumps(tool) per tool + "\n</tools>\n\nFor each function call, return a json
//            object ... </tool_call>"; assistant calls as "\n<tool_call>\n{"name": "NAME",
//            "arguments": ARGS}\n</tool_call>" after the content; consecutive tool results as
//            "\n<tool_response>\nRESULT\n</tool_response>" inside one user turn.
//   mistral  Mistral-7B-Instruct-v0.3's template: "[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]"
//            before the last user turn; assistant calls as "[TOOL_CALLS] [{"name": ...,
//            "arguments": ..., "id": "ID"}, ...]</s>"; tool results as "[TOOL_RESULTS]
//            {"content": RESULT, "call_id": "ID"}[/TOOL_RESULTS]"; call ids must be 9 characters
//            (the template's rule; else 400).
//   every other template (plain, chatml, qwen2, smollm2, zephyr, llama-2, llama-3) has no tool
//            rendering of its own; tinyserve then rewrites the conversation into plain messages
//            (GenericToolMessages) and renders those: the tools go into a system message (appended
//            to the first system message after "\n\n", else a new first message) as kGenericTools
//            says, in the Hermes format the default parser (hermes) reads; an assistant's calls
//            are appended to its content as "<tool_call>\n{"name": ..., "arguments": ...}\n
//            </tool_call>" (one per line); consecutive tool results become one user message of
//            "<tool_response>\nRESULT\n</tool_response>" blocks joined by "\n".
// An empty tool list is no tools. Tool texts, arguments and results are message content (encoded
// as plain text). Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/protocol/chat_template.h"
#include "server/protocol/tool_spec.h"

namespace tinyserve::protocol {

// Returns true iff `tools` is non-empty or a message is a tool message or carries tool calls.
bool HasToolContent(const std::vector<ChatMessage>& messages, const std::vector<ChatTool>& tools);

// Returns true iff template `name` renders tools itself (llama-3.1, llama-3.2, qwen2.5, mistral).
bool TemplateRendersTools(std::string_view name);

StatusOr<RenderedChat> RenderLlama31WithTools(const std::vector<ChatMessage>& messages,
                                              const std::vector<ChatTool>& tools,
                                              bool add_generation_prompt, std::string_view date);
StatusOr<RenderedChat> RenderQwen25WithTools(const std::vector<ChatMessage>& messages,
                                             const std::vector<ChatTool>& tools,
                                             bool add_generation_prompt);
// Also without tools (the "mistral" template).
StatusOr<RenderedChat> RenderMistral(const std::vector<ChatMessage>& messages,
                                     const std::vector<ChatTool>& tools,
                                     bool add_generation_prompt);

// The generic rewrite above (no tool fields left in the result).
std::vector<ChatMessage> GenericToolMessages(const std::vector<ChatMessage>& messages,
                                             const std::vector<ChatTool>& tools);

}  // namespace tinyserve::protocol
