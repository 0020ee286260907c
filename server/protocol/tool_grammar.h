// The grammar that forces tool calls: chat requests with tool_choice "required" or a named
// function are decoded under a GBNF grammar (structured/grammar.h) whose strings are exactly the
// calls the request's tool parser (tool_parser.h) reads, with each call's arguments constrained
// by its tool's `parameters` schema (JsonSchemaToGbnf; a schema without "type" is taken as an
// object schema, since arguments are an object):
//
//   hermes       <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, calls joined by
//                "\n"
//   llama3_json  {"name": "NAME", "parameters": ARGS}, calls joined by "; "
//   mistral      [{"name": "NAME", "arguments": ARGS}, ...] (the array without the [TOOL_CALLS]
//                special token, which constrained output cannot hold; the parser reads the array
//                alone at the start of the output)
//
// "required" allows any listed tool per call; a named function only that one. With
// parallel_tool_calls false exactly one call, else one or more.
// Pure function; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "server/protocol/tool_parser.h"
#include "server/protocol/tool_spec.h"

namespace tinyserve::protocol {

// REQUIRES: choice.kind is kRequired or kFunction (naming one of `tools`), `tools` non-empty.
// InvalidArgument naming the tool when its parameters schema cannot be compiled.
StatusOr<std::string> ForcedToolCallGrammar(ToolParserKind parser,
                                            const std::vector<ChatTool>& tools,
                                            const ToolChoice& choice, bool parallel_tool_calls);

}  // namespace tinyserve::protocol
