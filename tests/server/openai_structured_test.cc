// Structured outputs over HTTP on the real stories260K model (issue 21): every constraint kind and
// spelling on /v1/completions and /v1/chat/completions, streaming and not, sampled at temperature 1
// with fixed seeds; outputs parse (nlohmann) and match (PCRE2), choices are one of the choices;
// seeded constrained outputs are identical alone, in a batch of 8 and under a preemption storm;
// bad constraints are 400s naming the field, before anything is queued.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::SseEvents;
using testing::TestServerOptions;

// True iff PCRE2 matches `pattern` against the whole of `text`.
bool FullMatch(const std::string& pattern, const std::string& text) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                    PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, &error, &offset, nullptr);
  EXPECT_NE(re, nullptr) << pattern;
  if (re == nullptr) return false;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  const int rc =
      pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(text.c_str()), text.size(), 0, 0, md, nullptr);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return rc >= 0;
}

const json kPersonSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "kind": {"enum": ["cat", "dog"]},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age", "kind", "ok"],
  "additionalProperties": false
})");
const char* const kRegex = "[a-z]{2,6}-[0-9]{2}";

// A person object as kPersonSchema says.
void ExpectPerson(const std::string& text) {
  const json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(v.is_discarded()) << text;
  ASSERT_TRUE(v.is_object()) << text;
  EXPECT_EQ(v.size(), 4u) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  const size_t name_chars = v["name"].get<std::string>().size();  // ASCII or more bytes per char
  EXPECT_GE(name_chars, 1u) << text;
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
  EXPECT_GE(v["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(v["age"].get<int64_t>(), 120) << text;
  ASSERT_TRUE(v.contains("kind")) << text;
  EXPECT_TRUE(v["kind"] == "cat" || v["kind"] == "dog") << text;
  ASSERT_TRUE(v.contains("ok") && v["ok"].is_boolean()) << text;
}

struct Outcome {
  std::string text;
  std::string finish_reason;
};

class StructuredOutputTest : public ::testing::Test {
 protected:
  // One choice's text and finish reason from either endpoint, streamed or not. `extra` is merged
  // into the body.
  Outcome Generate(const OpenAiTestServer& server, bool chat, bool stream, const json& extra,
                   uint64_t seed = 7) {
    json body = {{"model", "stories"},
                 {"temperature", 1.0},
                 {"seed", seed},
                 {"max_tokens", 200},
                 {"stream", stream}};
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", "Tell me about Lily."}}});
    } else {
      body["prompt"] = "Once upon a time";
    }
    body.update(extra);
    auto res = server.Post(chat ? "/v1/chat/completions" : "/v1/completions", body);
    Outcome out;
    EXPECT_TRUE(res);
    if (!res) return out;
    EXPECT_EQ(res->status, 200) << res->body;
    if (res->status != 200) return out;
    if (!stream) {
      const json r = json::parse(res->body);
      const json& c = r["choices"][0];
      out.text = chat ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
      out.finish_reason = c["finish_reason"];
      return out;
    }
    const std::vector<std::string> events = SseEvents(res->body);
    EXPECT_FALSE(events.empty());
    EXPECT_EQ(events.back(), "[DONE]");
    for (size_t e = 0; e + 1 < events.size(); ++e) {
      const json chunk = json::parse(events[e]);
      EXPECT_FALSE(chunk.contains("error")) << events[e];
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& c = chunk["choices"][0];
      if (chat) {
        if (c["delta"].contains("content")) out.text += c["delta"]["content"].get<std::string>();
      } else {
        out.text += c["text"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) out.finish_reason = c["finish_reason"];
    }
    return out;
  }

  OpenAiTestServer server_{[] {
    TestServerOptions o;
    o.with_metrics = true;
    return o;
  }()};
};

TEST_F(StructuredOutputTest, EveryKindOnBothEndpointsStreamingAndNot) {
  const json choice = json::array({"red fox", "blue bird", "green frog"});
  for (bool chat : {false, true}) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(chat ? "chat" : "completions") + (stream ? " stream" : ""));
      Outcome o = Generate(
          server_, chat, stream,
          {{"response_format",
            {{"type", "json_schema"},
             {"json_schema", {{"name", "person"}, {"schema", kPersonSchema}, {"strict", true}}}}}});
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      ExpectPerson(o.text);

      o = Generate(server_, chat, stream, {{"structured_outputs", {{"json", kPersonSchema}}}}, 8);
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      ExpectPerson(o.text);

      o = Generate(server_, chat, stream, {{"guided_json", kPersonSchema.dump()}}, 9);
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      ExpectPerson(o.text);

      o = Generate(server_, chat, stream, {{"structured_outputs", {{"regex", kRegex}}}});
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      EXPECT_TRUE(FullMatch(kRegex, o.text)) << o.text;

      o = Generate(server_, chat, stream, {{"guided_regex", "(yes|no|maybe)!"}}, 3);
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      EXPECT_TRUE(FullMatch("(yes|no|maybe)!", o.text)) << o.text;

      o = Generate(server_, chat, stream, {{"guided_choice", choice}});
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      EXPECT_TRUE(o.text == "red fox" || o.text == "blue bird" || o.text == "green frog") << o.text;

      o = Generate(server_, chat, stream, {{"structured_outputs", {{"choice", choice}}}}, 4);
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      EXPECT_TRUE(o.text == "red fox" || o.text == "blue bird" || o.text == "green frog") << o.text;

      const std::string gbnf =
          "root ::= \"The \" animal \" is \" [0-9] [0-9]?\n"
          "animal ::= \"cat\" | \"dog\" | \"bird\"\n";
      o = Generate(server_, chat, stream, {{"guided_grammar", gbnf}});
      EXPECT_EQ(o.finish_reason, "stop") << o.text;
      EXPECT_TRUE(FullMatch("The (cat|dog|bird) is [0-9][0-9]?", o.text)) << o.text;

      o = Generate(
          server_, chat, stream,
          {{"response_format", {{"type", "json_object"}}}, {"structured_outputs", nullptr}}, 5);
      if (o.finish_reason == "stop") {
        const json v = json::parse(o.text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << o.text;
        EXPECT_TRUE(v.is_object()) << o.text;
      } else {
        // A free JSON object can outgrow max_tokens; it must still be a prefix of one.
        EXPECT_EQ(o.finish_reason, "length") << o.text;
        EXPECT_EQ(o.text.substr(0, 1), "{") << o.text;
      }
    }
  }
  // Counted by kind (ConstraintKindName's labels, in kStructuredOutputKinds order).
  const PrometheusMetrics& m = *server_.metrics();
  for (int i = 0; i < kNumStructuredOutputKinds; ++i) {
    EXPECT_EQ(structured::ConstraintKindName(static_cast<structured::ConstraintKind>(i)),
              kStructuredOutputKinds[i]);
  }
  auto count = [&](structured::ConstraintKind k) {
    return m.structured_output_requests[static_cast<int>(k)]->Value();
  };
  EXPECT_EQ(count(structured::ConstraintKind::kJsonSchema), 12.0);
  EXPECT_EQ(count(structured::ConstraintKind::kRegex), 8.0);
  EXPECT_EQ(count(structured::ConstraintKind::kChoice), 8.0);
  EXPECT_EQ(count(structured::ConstraintKind::kGrammar), 4.0);
  EXPECT_EQ(count(structured::ConstraintKind::kJsonObject), 4.0);
  const std::string text = m.Render();
  EXPECT_NE(text.find("tinyserve_structured_output_requests_total{"), std::string::npos);
}

// n = 8 seeded choices (seed + j) run as one batch; each alone with its seed; and all of them
// again on a server whose KV cache forces preemptions: the same text, bit for bit.
TEST_F(StructuredOutputTest, SeededOutputsAreIdenticalAloneBatchedAndPreempted) {
  TestServerOptions small;
  small.num_kv_blocks = 16;  // 256 slots for 8 sequences of ~40-120 tokens: a preemption storm
  OpenAiTestServer storm(small);
  const std::vector<json> constraints = {
      {{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", kPersonSchema}}}}}},
      {{"guided_regex", kRegex}},
  };
  for (const json& constraint : constraints) {
    SCOPED_TRACE(constraint.dump());
    json body = {{"model", "stories"}, {"prompt", "Lily"}, {"temperature", 1.0},
                 {"seed", 1000},       {"n", 8},           {"max_tokens", 120}};
    body.update(constraint);
    auto batched = server_.Post("/v1/completions", body);
    auto stormed = storm.Post("/v1/completions", body);
    ASSERT_TRUE(batched && stormed);
    ASSERT_EQ(batched->status, 200) << batched->body;
    ASSERT_EQ(stormed->status, 200) << stormed->body;
    const json b = json::parse(batched->body), s = json::parse(stormed->body);
    for (int j = 0; j < 8; ++j) {
      json one = body;
      one["n"] = 1;
      one["seed"] = 1000 + j;
      auto alone = server_.Post("/v1/completions", one);
      ASSERT_TRUE(alone);
      ASSERT_EQ(alone->status, 200) << alone->body;
      const json a = json::parse(alone->body)["choices"][0];
      const std::string want = a["text"];
      EXPECT_EQ(a["finish_reason"], "stop") << want;
      EXPECT_EQ(b["choices"][j]["text"], want) << "choice " << j;
      EXPECT_EQ(s["choices"][j]["text"], want) << "choice " << j;
      if (constraint.contains("guided_regex")) {
        EXPECT_TRUE(FullMatch(kRegex, want)) << want;
      } else {
        ExpectPerson(want);
      }
    }
  }
  EXPECT_GT(storm.recorder().num_preemptions(), 0);
}

TEST_F(StructuredOutputTest, BadConstraintsAre400sNamingTheFieldBeforeAnythingIsQueued) {
  struct Case {
    json extra;
    std::string param;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {{{"guided_regex", "[a-"}}, "guided_regex", "Invalid structured output `guided_regex`: "},
      {{{"structured_outputs", {{"regex", "(ab"}}}},
       "structured_outputs.regex",
       "Invalid structured output `structured_outputs.regex`: "},
      {{{"guided_grammar", "root ::= undefined_rule"}},
       "guided_grammar",
       "Invalid structured output `guided_grammar`: "},
      {{{"structured_outputs", {{"grammar", "no rules here"}}}},
       "structured_outputs.grammar",
       "Invalid structured output"},
      {{{"guided_json", {{"type", "strnig"}}}}, "guided_json", "Invalid structured output"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"format", "ipv9"}}}}}}}},
       "response_format.json_schema.schema",
       "Invalid structured output `response_format.json_schema.schema`: "},
      {{{"guided_json", {{"type", "object"}, {"patternProperties", {{"a", {}}}}}}},
       "guided_json",
       "patternProperties"},
      {{{"guided_regex", "a"}, {"guided_choice", {"a"}}},
       "guided_choice",
       "Only one structured-output constraint may be given; got `guided_regex` and "
       "`guided_choice`."},
      {{{"response_format", {{"type", "json_object"}}}, {"structured_outputs", {{"regex", "a"}}}},
       "structured_outputs.regex",
       "Only one structured-output constraint may be given"},
      {{{"guided_choice", "a"}},
       "guided_choice",
       "`guided_choice` must be a non-empty array of strings, got a string."},
      {{{"guided_regex", 12}}, "guided_regex", "`guided_regex` must be a string, got an integer."},
      {{{"response_format", {{"type", "json_schema"}}}},
       "response_format.json_schema",
       "`response_format.json_schema` is required"},
      {{{"structured_outputs", {{"structural_tag", "{}"}}}},
       "structured_outputs.structural_tag",
       "not supported"},
  };
  for (bool chat : {false, true}) {
    for (const Case& c : cases) {
      json body = {{"model", "stories"}, {"max_tokens", 8}};
      if (chat) {
        body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
      } else {
        body["prompt"] = "hi";
      }
      body.update(c.extra);
      auto res = server_.Post(chat ? "/v1/chat/completions" : "/v1/completions", body);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 400) << body.dump() << " -> " << res->body;
      const json e = json::parse(res->body)["error"];
      EXPECT_EQ(e["param"], c.param) << res->body;
      EXPECT_NE(e["message"].get<std::string>().find(c.message_part), std::string::npos)
          << res->body;
      EXPECT_EQ(e["type"], "BadRequestError") << res->body;
    }
  }
  // Nothing reached the engine, and nothing was counted.
  EXPECT_TRUE(server_.recorder().prompts().empty());
  for (int i = 0; i < kNumStructuredOutputKinds; ++i) {
    EXPECT_EQ(server_.metrics()->structured_output_requests[i]->Value(), 0.0);
  }
}

}  // namespace
}  // namespace tinyserve
