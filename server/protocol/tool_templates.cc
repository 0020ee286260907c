#include "server/protocol/tool_templates.h"

#include "server/protocol/chat_builder.h"
#include "server/protocol/json_fields.h"

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

// An assistant call's arguments as the template sees them (vLLM parses the JSON text into a dict).
Json ArgumentsOf(const ChatToolCall& call) {
  Json parsed = ParseJsonText<Json>(call.arguments);
  return parsed.is_discarded() ? Json::object() : parsed;
}

bool HasCalls(const ChatMessage& m) { return !m.tool_calls.empty(); }

constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";

// The Hermes tool list: intro, "\n" + json.dumps(tool) per tool, outro.
std::string HermesToolList(const std::vector<ChatTool>& tools) {
  std::string out(kToolsIntro);
  for (const ChatTool& t : tools) out += "\n" + PythonJsonDumps(t.json);
  out += kToolsOutro;
  return out;
}

std::string HermesCall(const ChatToolCall& c) {
  return "<tool_call>\n{\"name\": \"" + c.name +
         "\", \"arguments\": " + PythonJsonDumps(ArgumentsOf(c)) + "}\n</tool_call>";
}

constexpr const char* kQwen25System =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

}  // namespace

bool HasToolContent(const std::vector<ChatMessage>& messages, const std::vector<ChatTool>& tools) {
  if (!tools.empty()) return true;
  for (const ChatMessage& m : messages) {
    if (m.role == "tool" || HasCalls(m)) return true;
  }
  return false;
}

bool TemplateRendersTools(std::string_view name) {
  return name == "llama-3.1" || name == "llama-3.2" || name == "qwen2.5" || name == "mistral";
}

StatusOr<RenderedChat> RenderLlama31WithTools(const std::vector<ChatMessage>& messages,
                                              const std::vector<ChatTool>& tools,
                                              bool add_generation_prompt, std::string_view date) {
  ChatBuilder b;
  size_t first = 0;
  b.Text("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
  if (!tools.empty()) b.Text("Environment: ipython\n");
  b.Text("Cutting Knowledge Date: December 2023\nToday Date: ").Text(date).Text("\n\n");
  if (!messages.empty() && messages[0].role == "system") {
    b.Content(Strip(messages[0].content));
    first = 1;
  }
  b.Text("<|eot_id|>");
  if (!tools.empty()) {
    if (first >= messages.size() || messages[first].role != "user") {
      return InvalidArgument(
          "Cannot put tools in the first user message when there's no first user message!");
    }
    std::string tool_text;
    for (const ChatTool& t : tools) tool_text += PythonJsonDumps(t.json, 4) + "\n\n";
    b.Text("<|start_header_id|>user<|end_header_id|>\n\n")
        .Text(
            "Given the following functions, please respond with a JSON for a function call with "
            "its proper arguments that best answers the given prompt.\n\nRespond in the format "
            "{\"name\": function name, \"parameters\": dictionary of argument name and its "
            "value}.Do not use variables.\n\n")
        .Content(tool_text)
        .Content(Strip(messages[first].content))
        .Text("<|eot_id|>");
    ++first;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (HasCalls(m)) {
      if (m.tool_calls.size() != 1) {
        return InvalidArgument("This model only supports single tool-calls at once!");
      }
      const ChatToolCall& c = m.tool_calls[0];
      b.Text("<|start_header_id|>assistant<|end_header_id|>\n\n")
          .Content("{\"name\": \"" + c.name +
                   "\", \"parameters\": " + PythonJsonDumps(ArgumentsOf(c)) + "}")
          .Text("<|eot_id|>");
    } else if (m.role == "tool") {
      b.Text("<|start_header_id|>ipython<|end_header_id|>\n\n")
          .Content(PythonJsonDumps(Json(m.content)))
          .Text("<|eot_id|>");
    } else {
      b.Text("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n")
          .Content(Strip(m.content))
          .Text("<|eot_id|>");
    }
  }
  if (add_generation_prompt) b.Text("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return b.Take();
}

StatusOr<RenderedChat> RenderQwen25WithTools(const std::vector<ChatMessage>& messages,
                                             const std::vector<ChatTool>& tools,
                                             bool add_generation_prompt) {
  ChatBuilder b;
  const bool has_system = !messages.empty() && messages[0].role == "system";
  b.Text("<|im_start|>system\n");
  if (has_system) {
    b.Content(messages[0].content);
  } else {
    b.Text(kQwen25System);
  }
  if (!tools.empty()) b.Content("\n\n" + HermesToolList(tools));
  b.Text("<|im_end|>\n");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" && i == 0) continue;
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") b.Text("<|im_start|>user");
      b.Text("\n<tool_response>\n").Content(m.content).Text("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") b.Text("<|im_end|>\n");
    } else if (m.role == "assistant" && HasCalls(m)) {
      b.Text("<|im_start|>assistant");
      if (!m.content.empty()) b.Text("\n").Content(m.content);
      for (const ChatToolCall& c : m.tool_calls) b.Text("\n").Content(HermesCall(c));
      b.Text("<|im_end|>\n");
    } else {
      b.Text("<|im_start|>" + m.role + "\n").Content(m.content).Text("<|im_end|>\n");
    }
  }
  if (add_generation_prompt) b.Text("<|im_start|>assistant\n");
  return b.Take();
}

StatusOr<RenderedChat> RenderMistral(const std::vector<ChatMessage>& messages,
                                     const std::vector<ChatTool>& tools,
                                     bool /*add_generation_prompt*/) {
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    first = 1;
  }
  // Plain user/assistant turns must alternate, starting with user; tool turns are skipped.
  size_t index = 0;
  size_t last_user = messages.size();
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") last_user = i;
    if (m.role == "tool" || HasCalls(m)) continue;
    if ((m.role == "user") != (index % 2 == 0)) {
      return InvalidArgument(
          "After the optional system message, conversation roles must alternate "
          "user/assistant/user/assistant/...");
    }
    ++index;
  }
  auto check_id = [](const std::string& id) -> Status {
    if (id.size() != 9) {
      return InvalidArgument("Tool call IDs should be alphanumeric strings with length 9!");
    }
    return Status::Ok();
  };
  ChatBuilder b;
  b.Text("<s>");
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      if (!tools.empty() && i == last_user) {
        std::string list = "[";
        for (size_t t = 0; t < tools.size(); ++t) {
          const Json& fn = tools[t].json.at("function");
          list += "{\"type\": \"function\", \"function\": {";
          bool first_key = true;
          for (const auto& [key, val] : fn.items()) {
            if (key == "return") continue;
            if (!first_key) list += ", ";
            first_key = false;
            // The template writes string values between quotes as they are (no escaping).
            list += val.is_string() ? "\"" + key + "\": \"" + val.get<std::string>() + "\""
                                    : "\"" + key + "\": " + PythonJsonDumps(val);
          }
          list += "}}";
          list += t + 1 < tools.size() ? ", " : "]";
        }
        b.Text("[AVAILABLE_TOOLS] ").Content(list).Text("[/AVAILABLE_TOOLS]");
      }
      b.Text("[INST] ");
      if (i + 1 == messages.size() && has_system) b.Content(system + "\n\n");
      b.Content(m.content).Text("[/INST]");
    } else if (HasCalls(m)) {
      b.Text("[TOOL_CALLS] ");
      std::string calls = "[";
      for (size_t c = 0; c < m.tool_calls.size(); ++c) {
        const ChatToolCall& call = m.tool_calls[c];
        if (Status s = check_id(call.id); !s.ok()) return s;
        std::string fn =
            PythonJsonDumps(Json{{"name", call.name}, {"arguments", ArgumentsOf(call)}});
        fn.pop_back();  // the template's out[:-1]
        calls += fn + ", \"id\": \"" + call.id + "\"}";
        if (c + 1 < m.tool_calls.size()) calls += ", ";
      }
      b.Content(calls + "]").Text("</s>");
    } else if (m.role == "assistant") {
      b.Text(" ").Content(Strip(m.content)).Text("</s>");
    } else if (m.role == "tool") {
      if (Status s = check_id(m.tool_call_id); !s.ok()) return s;
      b.Text("[TOOL_RESULTS] ")
          .Content("{\"content\": " + m.content + ", \"call_id\": \"" + m.tool_call_id + "\"}")
          .Text("[/TOOL_RESULTS]");
    } else {
      return InvalidArgument(
          "Only user and assistant roles are supported, with the exception of an initial "
          "optional system message!");
    }
  }
  return b.Take();
}

std::vector<ChatMessage> GenericToolMessages(const std::vector<ChatMessage>& messages,
                                             const std::vector<ChatTool>& tools) {
  std::vector<ChatMessage> out;
  size_t first = 0;
  if (!tools.empty()) {
    if (!messages.empty() && messages[0].role == "system") {
      out.push_back({"system", messages[0].content + "\n\n" + HermesToolList(tools)});
      first = 1;
    } else {
      out.push_back({"system", HermesToolList(tools)});
    }
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      std::string block = "<tool_response>\n" + m.content + "\n</tool_response>";
      if (i > first && messages[i - 1].role == "tool") {
        out.back().content += "\n" + block;
      } else {
        out.push_back({"user", std::move(block)});
      }
    } else if (HasCalls(m)) {
      std::string content = m.content;
      for (const ChatToolCall& c : m.tool_calls) {
        if (!content.empty()) content += "\n";
        content += HermesCall(c);
      }
      out.push_back({"assistant", std::move(content)});
    } else {
      out.push_back({m.role, m.content});
    }
  }
  return out;
}

}  // namespace tinyserve::protocol
