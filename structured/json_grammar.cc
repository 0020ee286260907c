#include "structured/json_grammar.h"

#include "structured/regex.h"

namespace tinyserve::structured {

StatusOr<std::string> WhitespaceRule(const std::string& name,
                                     const std::optional<std::string>& pattern) {
  if (!pattern.has_value()) return name + " ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";
  StatusOr<std::string> rules = RegexToGbnf(*pattern, name);
  if (!rules.ok()) {
    return InvalidArgument("whitespace_pattern: " + rules.status().message());
  }
  return *rules;
}

std::string JsonValueRules(std::string_view prefix, std::string_view ws_rule) {
  const std::string p(prefix), ws(ws_rule);
  std::string g;
  g += p + "value ::= " + p + "object | " + p + "array | " + p + "string | " + p +
       "number | \"true\" | \"false\" | \"null\"\n";
  g += p + "object ::= \"{\" " + ws + " ( " + p + "string " + ws + " \":\" " + ws + " " + p +
       "value " + ws + " ( \",\" " + ws + " " + p + "string " + ws + " \":\" " + ws + " " + p +
       "value " + ws + " )* )? \"}\"\n";
  g += p + "array ::= \"[\" " + ws + " ( " + p + "value " + ws + " ( \",\" " + ws + " " + p +
       "value " + ws + " )* )? \"]\"\n";
  g += p + "string ::= \"\\\"\" " + p + "char* \"\\\"\"\n";
  g += p + "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" " + p + "hex4 )\n";
  // \uXXXX escapes leave out the surrogates: a pair would count as two chars in minLength.
  g += p + "hex4 ::= ( [0-9a-cA-CeEfF] [0-9a-fA-F] | [dD] [0-7] ) [0-9a-fA-F] [0-9a-fA-F]\n";
  // Bounded as llama.cpp bounds them (at most 16 integer and 16 fraction digits; here also 2
  // exponent digits), so a small model cannot loop on digits and every number fits a double.
  g += p +
       "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? "
       "[0-9]{1,2} )?\n";
  return g;
}

StatusOr<std::string> JsonObjectGbnf(const std::optional<std::string>& whitespace_pattern) {
  StatusOr<std::string> ws = WhitespaceRule("ws", whitespace_pattern);
  if (!ws.ok()) return ws.status();
  return "root ::= object\n" + JsonValueRules("", "ws") + *ws;
}

}  // namespace tinyserve::structured
