#include "server/protocol/tool_grammar.h"

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "structured/grammar.h"

namespace tinyserve::protocol {

StatusOr<std::string> ForcedToolCallGrammar(ToolParserKind parser,
                                            const std::vector<ChatTool>& tools,
                                            const ToolChoice& choice, bool parallel_tool_calls) {
  // What comes before a call's arguments ("...": NAME, "arguments": ) and after them.
  std::string head;
  std::string tail;
  std::string separator;
  switch (parser) {
    case ToolParserKind::kHermes:
      head = "<tool_call>\n{\"name\": \"";
      tail = "}\n</tool_call>";
      separator = "\n";
      break;
    case ToolParserKind::kLlama3Json:
      head = "{\"name\": \"";
      tail = "}";
      separator = "; ";
      break;
    case ToolParserKind::kMistral:
      head = "{\"name\": \"";
      tail = "}";
      separator = ", ";
      break;
  }
  const std::string args_key =
      parser == ToolParserKind::kLlama3Json ? "\", \"parameters\": " : "\", \"arguments\": ";

  std::string calls;  // the alternatives of one call
  std::string rules;  // every tool's argument rules
  for (size_t i = 0; i < tools.size(); ++i) {
    const ChatTool& tool = tools[i];
    if (choice.kind == ToolChoice::Kind::kFunction && tool.name != choice.function) continue;
    nlohmann::ordered_json schema = tool.parameters;
    if (!schema.is_object()) schema = nlohmann::ordered_json::object();
    if (!schema.contains("type")) schema["type"] = "object";
    const std::string prefix = "tool" + std::to_string(i) + "-";
    StatusOr<std::string> args = structured::JsonSchemaToGbnf(schema.dump(), prefix);
    if (!args.ok()) {
      return InvalidArgument("the parameters of tool '" + tool.name +
                             "' cannot constrain its calls: " + args.status().message());
    }
    rules += *args;
    if (!rules.empty() && rules.back() != '\n') rules += '\n';
    if (!calls.empty()) calls += " | ";
    calls += structured::GbnfLiteral(head + tool.name + args_key) + " " + prefix + "root " +
             structured::GbnfLiteral(tail);
  }
  if (calls.empty()) return InvalidArgument("tool_choice names no listed tool");

  std::string grammar = "root ::= ";
  const std::string repeat =
      parallel_tool_calls ? " ( " + structured::GbnfLiteral(separator) + " call )*" : "";
  if (parser == ToolParserKind::kMistral) {
    grammar += "\"[\" call" + repeat + " \"]\"\n";
  } else {
    grammar += "call" + repeat + "\n";
  }
  grammar += "call ::= " + calls + "\n" + rules;
  return grammar;
}

}  // namespace tinyserve::protocol
