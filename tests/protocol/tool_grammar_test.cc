// ForcedToolCallGrammar: each parser's grammar accepts exactly the calls that parser reads (with
// arguments valid under the tool's schema), and the parser reads every call the grammar ends on.
#include "server/protocol/tool_grammar.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/protocol/tool_parser.h"
#include "structured/grammar.h"

namespace tinyserve::protocol {
namespace {

using structured::ConstraintKind;
using structured::ConstraintSpec;
using structured::Matcher;
using structured::Vocabulary;

std::vector<ChatTool> Tools() {
  ChatTool weather;
  weather.name = "get_weather";
  weather.parameters = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": false})");
  ChatTool time;
  time.name = "get-time";
  time.parameters = nlohmann::ordered_json::parse(
      R"({"properties": {"hours": {"type": "integer", "minimum": 0, "maximum": 23}}})");
  return {weather, time};
}

enum class Verdict { kComplete, kPrefix, kRejected };

// Compiles the grammar against a one-byte-per-token vocabulary (256 = the stop token) and feeds
// `text` byte by byte.
Verdict Feed(const std::string& grammar, const std::string& text) {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  auto vocab = std::make_shared<const Vocabulary>(std::move(bytes), std::vector<int32_t>{256});
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kGrammar;
  spec.text = grammar;
  auto compiled = structured::Compile(spec, vocab);
  EXPECT_TRUE(compiled.ok()) << compiled.status().ToString() << "\n" << grammar;
  if (!compiled.ok()) return Verdict::kRejected;
  Matcher m(*compiled);
  for (unsigned char c : text) {
    if (!m.AcceptToken(c)) return Verdict::kRejected;
  }
  return m.CanTerminate() ? Verdict::kComplete : Verdict::kPrefix;
}

std::string Grammar(ToolParserKind parser, ToolChoice choice, bool parallel) {
  StatusOr<std::string> g = ForcedToolCallGrammar(parser, Tools(), choice, parallel);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? *g : std::string();
}

const ToolChoice kRequired{ToolChoice::Kind::kRequired, ""};

TEST(ToolGrammarTest, HermesCallsAreForcedAndParsed) {
  const std::string g = Grammar(ToolParserKind::kHermes, kRequired, /*parallel=*/true);
  const std::string one =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>";
  const std::string two = one + "\n<tool_call>\n{\"name\": \"get-time\", \"arguments\": " +
                          "{\"hours\": 7}}\n</tool_call>";
  EXPECT_EQ(Feed(g, one), Verdict::kComplete);
  EXPECT_EQ(Feed(g, two), Verdict::kComplete);
  EXPECT_EQ(Feed(g, one.substr(0, 30)), Verdict::kPrefix);
  // Content before the call, an unknown tool, arguments against the schema: rejected.
  EXPECT_EQ(Feed(g, "Sure. " + one), Verdict::kRejected);
  EXPECT_EQ(Feed(g, "<tool_call>\n{\"name\": \"get_news\""), Verdict::kRejected);
  EXPECT_EQ(Feed(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\""),
            Verdict::kRejected);
  EXPECT_EQ(Feed(g, "<tool_call>\n{\"name\": \"get-time\", \"arguments\": {\"hours\": 24}"),
            Verdict::kRejected);

  const ToolParseDelta parsed = ParseToolCalls(ToolParserKind::kHermes, true, "req", two);
  ASSERT_EQ(parsed.calls.size(), 2u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(parsed.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(parsed.calls[1].name, "get-time");
  EXPECT_EQ(parsed.calls[1].arguments, "{\"hours\":7}");
  EXPECT_EQ(parsed.content, "");  // whitespace around a call is part of the call
}

TEST(ToolGrammarTest, OneCallUnlessParallelAndANamedFunctionOnly) {
  const std::string call = "<tool_call>\n{\"name\": \"get-time\", \"arguments\": {}}\n</tool_call>";
  const std::string single = Grammar(ToolParserKind::kHermes, kRequired, /*parallel=*/false);
  EXPECT_EQ(Feed(single, call), Verdict::kComplete);
  EXPECT_EQ(Feed(single, call + "\n"), Verdict::kRejected);
  const std::string named =
      Grammar(ToolParserKind::kHermes, {ToolChoice::Kind::kFunction, "get-time"}, true);
  EXPECT_EQ(Feed(named, call), Verdict::kComplete);
  EXPECT_EQ(Feed(named, "<tool_call>\n{\"name\": \"get_weather\""), Verdict::kRejected);
}

TEST(ToolGrammarTest, Llama3JsonAndMistralSyntax) {
  const std::string llama = Grammar(ToolParserKind::kLlama3Json, kRequired, true);
  const std::string l1 = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
  const std::string l2 = l1 + "; {\"name\": \"get-time\", \"parameters\": {\"hours\": 0}}";
  EXPECT_EQ(Feed(llama, l1), Verdict::kComplete);
  EXPECT_EQ(Feed(llama, l2), Verdict::kComplete);
  const ToolParseDelta lp = ParseToolCalls(ToolParserKind::kLlama3Json, true, "req", l2);
  ASSERT_EQ(lp.calls.size(), 2u);
  EXPECT_EQ(lp.calls[1].name, "get-time");
  EXPECT_EQ(lp.calls[1].arguments, "{\"hours\":0}");

  const std::string mistral = Grammar(ToolParserKind::kMistral, kRequired, true);
  const std::string m2 =
      "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, {\"name\": "
      "\"get-time\", \"arguments\": {}}]";
  EXPECT_EQ(Feed(mistral, m2), Verdict::kComplete);
  EXPECT_EQ(Feed(mistral, m2.substr(0, m2.size() - 1)), Verdict::kPrefix);
  const ToolParseDelta mp = ParseToolCalls(ToolParserKind::kMistral, true, "req", m2);
  ASSERT_EQ(mp.calls.size(), 2u);
  EXPECT_EQ(mp.calls[0].arguments, "{\"city\":\"Rome\"}");
  EXPECT_EQ(mp.content, "");
}

TEST(ToolGrammarTest, AnUnsupportedParametersSchemaNamesTheTool) {
  std::vector<ChatTool> tools = Tools();
  tools[1].parameters = nlohmann::ordered_json::parse(R"({"type": "object", "not": {}})");
  StatusOr<std::string> g = ForcedToolCallGrammar(ToolParserKind::kHermes, tools, kRequired, true);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("the parameters of tool 'get-time'"), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("not"), std::string::npos) << g.status().message();
  // Named: only the named tool's schema is compiled.
  EXPECT_TRUE(ForcedToolCallGrammar(ToolParserKind::kHermes, tools,
                                    {ToolChoice::Kind::kFunction, "get_weather"}, true)
                  .ok());
}

}  // namespace
}  // namespace tinyserve::protocol
