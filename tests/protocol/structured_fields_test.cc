// The structured-output request fields (server/protocol/structured_fields.h): every spelling into
// one ConstraintSpec, and each bad shape a 400 naming its field.
#include "server/protocol/structured_fields.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/protocol/chat_request.h"
#include "server/protocol/completion_request.h"

namespace tinyserve::protocol {
namespace {

using structured::ConstraintKind;

std::optional<StructuredOutput> ParseStructuredOk(const std::string& body) {
  std::optional<StructuredOutput> out;
  std::optional<ApiError> error = ParseStructuredOutput(nlohmann::json::parse(body), &out);
  EXPECT_FALSE(error.has_value()) << body << " -> " << (error ? error->message : "");
  return out;
}

TEST(StructuredFieldsTest, NoConstraintAndTextFormatAreNone) {
  EXPECT_FALSE(ParseStructuredOk(R"({})").has_value());
  EXPECT_FALSE(ParseStructuredOk(R"({"response_format": {"type": "text"}})").has_value());
  EXPECT_FALSE(ParseStructuredOk(R"({"response_format": null, "guided_json": null})").has_value());
}

TEST(StructuredFieldsTest, EverySpellingBecomesOneSpec) {
  struct Case {
    const char* body;
    ConstraintKind kind;
    const char* text;
    const char* param;
  };
  const Case cases[] = {
      {R"({"response_format": {"type": "json_object"}})", ConstraintKind::kJsonObject, "",
       "response_format"},
      {R"({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
           "schema": {"type": "integer"}}}})",
       ConstraintKind::kJsonSchema, R"({"type":"integer"})", "response_format.json_schema.schema"},
      {R"({"structured_outputs": {"json": {"type": "boolean"}}})", ConstraintKind::kJsonSchema,
       R"({"type":"boolean"})", "structured_outputs.json"},
      {R"({"structured_outputs": {"json": "{\"type\": \"null\"}"}})", ConstraintKind::kJsonSchema,
       R"({"type":"null"})", "structured_outputs.json"},
      {R"({"structured_outputs": {"regex": "[a-z]+"}})", ConstraintKind::kRegex, "[a-z]+",
       "structured_outputs.regex"},
      {R"({"structured_outputs": {"grammar": "root ::= \"a\""}})", ConstraintKind::kGrammar,
       "root ::= \"a\"", "structured_outputs.grammar"},
      {R"({"structured_outputs": {"json_object": true, "disable_fallback": true}})",
       ConstraintKind::kJsonObject, "", "structured_outputs.json_object"},
      {R"({"guided_json": {"type": "string"}})", ConstraintKind::kJsonSchema,
       R"({"type":"string"})", "guided_json"},
      {R"({"guided_regex": "\\d{3}"})", ConstraintKind::kRegex, "\\d{3}", "guided_regex"},
      {R"({"guided_grammar": "root ::= [0-9]"})", ConstraintKind::kGrammar, "root ::= [0-9]",
       "guided_grammar"},
  };
  for (const Case& c : cases) {
    std::optional<StructuredOutput> s = ParseStructuredOk(c.body);
    ASSERT_TRUE(s.has_value()) << c.body;
    EXPECT_EQ(s->spec.kind, c.kind) << c.body;
    EXPECT_EQ(s->spec.text, c.text) << c.body;
    EXPECT_EQ(s->param, c.param) << c.body;
    EXPECT_TRUE(s->spec.choices.empty()) << c.body;
    EXPECT_FALSE(s->spec.whitespace_pattern.has_value()) << c.body;
  }
}

TEST(StructuredFieldsTest, ChoicesAndWhitespace) {
  std::optional<StructuredOutput> c = ParseStructuredOk(R"({"guided_choice": ["yes", "no", ""]})");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->spec.kind, ConstraintKind::kChoice);
  EXPECT_EQ(c->spec.choices, (std::vector<std::string>{"yes", "no", ""}));
  c = ParseStructuredOk(R"({"structured_outputs": {"choice": ["a"]}})");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->spec.choices, std::vector<std::string>{"a"});
  EXPECT_EQ(c->param, "structured_outputs.choice");

  std::optional<StructuredOutput> w = ParseStructuredOk(
      R"({"structured_outputs": {"json_object": true, "whitespace_pattern": " ?"}})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->spec.whitespace_pattern, std::optional<std::string>(" ?"));
  w = ParseStructuredOk(R"({"guided_json": {}, "guided_whitespace_pattern": "[ ]*"})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->spec.whitespace_pattern, std::optional<std::string>("[ ]*"));
  w = ParseStructuredOk(R"({"structured_outputs": {"json": {}, "disable_any_whitespace": true}})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->spec.whitespace_pattern, std::optional<std::string>(""));
  w = ParseStructuredOk(R"({"response_format": {"type": "json_object"},
                  "guided_whitespace_pattern": "\n"})");
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->spec.kind, ConstraintKind::kJsonObject);
  EXPECT_EQ(w->spec.whitespace_pattern, std::optional<std::string>("\n"));
}

TEST(StructuredFieldsTest, BadShapesAre400sNamingTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {R"({"response_format": "json"})", "response_format",
       "`response_format` must be an object, got a string."},
      {R"({"response_format": {}})", "response_format.type", "`response_format.type` is required."},
      {R"({"response_format": {"type": 1}})", "response_format.type", nullptr},
      {R"({"response_format": {"type": "yaml"}})", "response_format.type",
       "`response_format.type` must be one of \"text\", \"json_object\", \"json_schema\", got "
       "\"yaml\"."},
      {R"({"response_format": {"type": "json_schema"}})", "response_format.json_schema",
       "`response_format.json_schema` is required when the type is \"json_schema\"."},
      {R"({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})",
       "response_format.json_schema.name",
       "`response_format.json_schema.name` is required (a non-empty string)."},
      {R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
       "response_format.json_schema.schema", "`response_format.json_schema.schema` is required."},
      {R"({"response_format": {"type": "json_schema",
           "json_schema": {"name": "x", "schema": [1]}}})",
       "response_format.json_schema.schema",
       "`response_format.json_schema.schema` must be an object, got an array."},
      {R"({"response_format": {"type": "json_schema",
           "json_schema": {"name": "x", "schema": {}, "strict": "yes"}}})",
       "response_format.json_schema.strict", nullptr},
      {R"({"structured_outputs": []})", "structured_outputs",
       "`structured_outputs` must be an object, got an array."},
      {R"({"structured_outputs": {}})", "structured_outputs",
       "`structured_outputs` must set one of json, regex, choice, grammar, json_object."},
      {R"({"structured_outputs": {"jsn": {}}})", "structured_outputs.jsn",
       "Unknown field `structured_outputs.jsn`."},
      {R"({"structured_outputs": {"regex": 5}})", "structured_outputs.regex",
       "`structured_outputs.regex` must be a string, got an integer."},
      {R"({"structured_outputs": {"regex": ""}})", "structured_outputs.regex",
       "`structured_outputs.regex` must not be empty."},
      {R"({"structured_outputs": {"choice": ["a", 1]}})", "structured_outputs.choice",
       "`structured_outputs.choice` must be a non-empty array of strings, got an element that is "
       "an integer."},
      {R"({"structured_outputs": {"json": "{not json"}})", "structured_outputs.json",
       "`structured_outputs.json` is not valid JSON text of a JSON Schema."},
      {R"({"structured_outputs": {"json": "[1]"}})", "structured_outputs.json",
       "`structured_outputs.json` must be a JSON Schema object, got an array."},
      {R"({"structured_outputs": {"json": 3}})", "structured_outputs.json",
       "`structured_outputs.json` must be a JSON Schema object (or its JSON text), got an "
       "integer."},
      {R"({"structured_outputs": {"structural_tag": "{}"}})", "structured_outputs.structural_tag",
       "`structured_outputs.structural_tag` is not supported by this server."},
      {R"({"structured_outputs": {"json": {}, "disable_additional_properties": true}})",
       "structured_outputs.disable_additional_properties", nullptr},
      {R"({"structured_outputs": {"json_object": "yes"}})", "structured_outputs.json_object",
       nullptr},
      {R"({"structured_outputs": {"regex": "a", "choice": ["a"]}})", "structured_outputs.choice",
       "Only one structured-output constraint may be given; got `structured_outputs.regex` and "
       "`structured_outputs.choice`."},
      {R"({"response_format": {"type": "json_object"}, "guided_regex": "a"})", "guided_regex",
       "Only one structured-output constraint may be given; got `response_format` and "
       "`guided_regex`."},
      {R"({"structured_outputs": {"json": {}}, "guided_json": {}})", "guided_json", nullptr},
      {R"({"guided_regex": "a", "guided_whitespace_pattern": " "})", "guided_whitespace_pattern",
       "`guided_whitespace_pattern` applies only to a JSON constraint (json, json_object, "
       "guided_json or response_format)."},
      {R"({"guided_whitespace_pattern": " "})", "guided_whitespace_pattern", nullptr},
      {R"({"guided_json": {}, "guided_whitespace_pattern": 1})", "guided_whitespace_pattern",
       nullptr},
      {R"({"structured_outputs": {"json": {}, "whitespace_pattern": " ",
           "disable_any_whitespace": true}})",
       "structured_outputs.disable_any_whitespace", nullptr},
      {R"({"structured_outputs": {"json": {}, "whitespace_pattern": " "},
           "guided_whitespace_pattern": " "})",
       "guided_whitespace_pattern",
       "`guided_whitespace_pattern` and `structured_outputs.whitespace_pattern` cannot both be "
       "set."},
  };
  for (const Case& c : cases) {
    std::optional<StructuredOutput> out;
    std::optional<ApiError> error = ParseStructuredOutput(nlohmann::json::parse(c.body), &out);
    ASSERT_TRUE(error.has_value()) << c.body;
    EXPECT_EQ(error->http_status, 400) << c.body;
    EXPECT_EQ(error->param, c.param) << c.body;
    if (c.message != nullptr) {
      EXPECT_EQ(error->message, c.message) << c.body;
    }
  }
}

// The schema's properties keep the request's order (nlohmann::json sorts keys; the grammar
// generates properties in spec.text's order), in every spelling and on both endpoints.
TEST(StructuredFieldsTest, SchemasKeepTheRequestsKeyOrder) {
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]})";
  const std::string expected =
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},)"
      R"("required":["name","age"]})";
  std::string escaped;  // the schema as a JSON string (vLLM also takes its text)
  for (char c : schema) {
    if (c == '"') escaped += '\\';
    if (c != '\n') escaped += c;
  }
  for (const std::string& fields :
       {R"("response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": )" +
            schema + "}}",
        R"("structured_outputs": {"json": )" + schema + "}", R"("guided_json": )" + schema,
        R"("guided_json": ")" + escaped + "\""}) {
    ApiErrorOr<CompletionRequest> completion =
        ParseCompletionRequestBody(R"({"prompt": "x", )" + fields + "}", 100);
    ASSERT_TRUE(completion.ok()) << fields << ": " << completion.error().message;
    ASSERT_TRUE(completion->sampling.structured.has_value());
    EXPECT_EQ(completion->sampling.structured->spec.text, expected) << fields;
    ApiErrorOr<ChatRequest> chat = ParseChatRequestBody(
        R"({"messages": [{"role": "user", "content": "x"}], )" + fields + "}", 100);
    ASSERT_TRUE(chat.ok()) << fields << ": " << chat.error().message;
    ASSERT_TRUE(chat->sampling.structured.has_value());
    EXPECT_EQ(chat->sampling.structured->spec.text, expected) << fields;
  }
}

}  // namespace
}  // namespace tinyserve::protocol
