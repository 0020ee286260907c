// POST /v1/completions on the real stories260K model: greedy output equals llama2.c's golden text,
// streaming deltas concatenate to the same text, every prompt form, n with seeds, echo, stop
// strings, logprobs and usage.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::SseEvents;
using testing::TestServerOptions;

struct GoldenCase {
  std::string prompt;
  std::string continuation;  // output_text without the prompt
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
};

GoldenCase Golden(size_t i) {
  std::ifstream in(std::string(TINYSERVE_SHARED_DIR) + "/golden/stories260K_greedy.json");
  const json golden = json::parse(in);
  const json& c = golden["cases"][i];
  GoldenCase out;
  out.prompt = c["prompt"];
  // run.c prints a newline after the generated text; it is not part of the output tokens.
  std::string text = c["output_text"];
  EXPECT_EQ(text.back(), '\n');
  text.pop_back();
  out.continuation = text.substr(out.prompt.size());
  out.num_prompt_tokens = static_cast<int32_t>(c["prompt_token_ids"].size());
  out.num_output_tokens = static_cast<int32_t>(c["output_token_ids"].size());
  return out;
}

json PostOk(const OpenAiTestServer& server, const json& body) {
  auto res = server.Post("/v1/completions", body);
  EXPECT_TRUE(res);
  if (!res) return json();
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  return json::parse(res->body);
}

class CompletionsTest : public ::testing::Test {
 protected:
  OpenAiTestServer server_;
};

TEST_F(CompletionsTest, GreedyEqualsTheGoldenText) {
  const GoldenCase g = Golden(0);
  const json r = PostOk(server_, {{"model", "stories"},
                                  {"prompt", g.prompt},
                                  {"max_tokens", g.num_output_tokens},
                                  {"temperature", 0}});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["model"], "stories");
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& c = r["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], g.continuation);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_TRUE(c["stop_reason"].is_null());
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(r["usage"]["prompt_tokens"], g.num_prompt_tokens);
  EXPECT_EQ(r["usage"]["completion_tokens"], g.num_output_tokens);
  EXPECT_EQ(r["usage"]["total_tokens"], g.num_prompt_tokens + g.num_output_tokens);
}

TEST_F(CompletionsTest, EchoPutsThePromptFirst) {
  const GoldenCase g = Golden(1);
  const json r = PostOk(server_, {{"prompt", g.prompt},
                                  {"max_tokens", g.num_output_tokens},
                                  {"temperature", 0},
                                  {"echo", true}});
  EXPECT_EQ(r["choices"][0]["text"], g.prompt + g.continuation);
}

TEST_F(CompletionsTest, StreamDeltasConcatenateToTheText) {
  const GoldenCase g = Golden(0);
  auto res = server_.Post("/v1/completions", {{"prompt", g.prompt},
                                              {"max_tokens", g.num_output_tokens},
                                              {"temperature", 0},
                                              {"stream", true},
                                              {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = SseEvents(res->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int num_finish = 0;
  std::string id;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    if (id.empty()) id = chunk["id"];
    EXPECT_EQ(chunk["id"], id);
    ASSERT_EQ(chunk["choices"].size(), 1u);
    text += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) {
      ++num_finish;
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
    }
    EXPECT_FALSE(chunk.contains("usage"));
  }
  EXPECT_EQ(text, g.continuation);
  EXPECT_EQ(num_finish, 1);
  const json usage_chunk = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], g.num_prompt_tokens);
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], g.num_output_tokens);
}

TEST_F(CompletionsTest, EveryPromptFormAndNGiveOneChoicePerPromptAndSample) {
  const GoldenCase a = Golden(0);
  const GoldenCase b = Golden(1);
  const std::vector<int> a_ids = {1, 403, 407, 261, 378};
  for (const json& prompt : {json::array({a.prompt, b.prompt}), json::array({a_ids})}) {
    const json r =
        PostOk(server_, {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}});
    const size_t num_prompts = prompt.size();
    ASSERT_EQ(r["choices"].size(), 2 * num_prompts);
    for (size_t i = 0; i < r["choices"].size(); ++i) {
      const json& c = r["choices"][i];
      EXPECT_EQ(c["index"], static_cast<int>(i));
      const GoldenCase& g = i / 2 == 0 ? a : b;
      EXPECT_EQ(g.continuation.rfind(c["text"].get<std::string>(), 0), 0u) << c["text"];
      EXPECT_EQ(c["finish_reason"], "length");
    }
    EXPECT_EQ(r["usage"]["completion_tokens"], static_cast<int>(24 * num_prompts));
  }
  // Token ids as the prompt give the same text as the string.
  const json ids = PostOk(server_, {{"prompt", a_ids}, {"max_tokens", 12}, {"temperature", 0}});
  const json text = PostOk(server_, {{"prompt", a.prompt}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(ids["choices"][0]["text"], text["choices"][0]["text"]);
  EXPECT_EQ(ids["usage"]["prompt_tokens"], 5);
}

TEST_F(CompletionsTest, SeededSamplesAreReproducibleAndUseSeedPlusJ) {
  const json body = {{"prompt", "Once upon a time"},
                     {"max_tokens", 24},
                     {"temperature", 1.0},
                     {"n", 2},
                     {"seed", 1234}};
  const json first = PostOk(server_, body);
  const json again = PostOk(server_, body);
  ASSERT_EQ(first["choices"].size(), 2u);
  EXPECT_EQ(first["choices"], again["choices"]);
  EXPECT_NE(first["choices"][0]["text"], first["choices"][1]["text"]);
  json single = body;
  single["n"] = 1;
  single["seed"] = 1235;
  EXPECT_EQ(PostOk(server_, single)["choices"][0]["text"], first["choices"][1]["text"]);
}

TEST(CompletionsStopTest, StopStringEndsTheChoiceAndTheEngineRequest) {
  // The stop string is found by the HTTP side, which then aborts the engine request with reason
  // stop; an engine that runs unhindered may reach max_tokens (reason length) before that abort
  // arrives when the CPUs are busy. A 2 ms step leaves the HTTP side ~100 ms to react.
  TestServerOptions options;
  options.step_delay_s = 0.002;
  OpenAiTestServer server_(options);
  const GoldenCase g = Golden(0);
  const json r = PostOk(server_, {{"prompt", g.prompt},
                                  {"max_tokens", 100},
                                  {"temperature", 0},
                                  {"stop", json::array({"Lily", "zebra"})}});
  const json& c = r["choices"][0];
  EXPECT_EQ(c["text"], g.continuation.substr(0, g.continuation.find("Lily")));
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_EQ(c["stop_reason"], "Lily");
  EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 100);
  // The engine request finished with reason stop and freed its blocks.
  const std::string request_id = r["id"].get<std::string>() + "-0";
  for (int i = 0; i < 200 && server_.recorder().finishes().count(request_id) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server_.recorder().finishes().count(request_id), 1u);
  EXPECT_EQ(server_.recorder().finishes().at(request_id).reason, FinishReason::kStop);

  // Streamed, the same text arrives and the finish chunk says stop.
  auto res = server_.Post("/v1/completions", {{"prompt", g.prompt},
                                              {"max_tokens", 100},
                                              {"temperature", 0},
                                              {"stop", "Lily"},
                                              {"stream", true}});
  ASSERT_TRUE(res);
  std::string text;
  json last;
  for (const std::string& e : SseEvents(res->body)) {
    if (e == "[DONE]") break;
    last = json::parse(e);
    text += last["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, c["text"]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["choices"][0]["stop_reason"], "Lily");
}

TEST_F(CompletionsTest, LogprobsHaveOneEntryPerToken) {
  const json r = PostOk(
      server_,
      {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 3}});
  const json& c = r["choices"][0];
  const json& lp = c["logprobs"];
  ASSERT_TRUE(lp.is_object());
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["text_offset"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  std::string joined;
  for (size_t i = 0; i < 6; ++i) {
    joined += lp["tokens"][i].get<std::string>();
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 3u);
    EXPECT_LE(lp["top_logprobs"][i].size(), 4u);
    // Greedy: the sampled token is the most likely one.
    double best = -1e9;
    for (const auto& [token, logprob] : lp["top_logprobs"][i].items()) {
      best = std::max(best, logprob.get<double>());
    }
    EXPECT_DOUBLE_EQ(best, lp["token_logprobs"][i].get<double>());
  }
  EXPECT_EQ(joined, c["text"]);
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(CompletionsTest, LogitBiasAndAllowedTokenIdsSteerDecoding) {
  const Tokenizer& tok = server_.tokenizer();
  const std::vector<int32_t> prompt = tok.Encode("Once upon a time", true);
  const int32_t lily = tok.Encode(" Lily", false).back();
  const json forced = PostOk(server_, {{"prompt", prompt},
                                       {"max_tokens", 4},
                                       {"temperature", 0},
                                       {"logit_bias", {{std::to_string(lily), 100}}}});
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), 4, lily);
  EXPECT_EQ(forced["choices"][0]["text"], tok.Decode(all).substr(tok.Decode(prompt).size()));
  // Banning the golden first token changes the continuation.
  const GoldenCase g = Golden(0);
  const std::string golden = PostOk(
      server_, {{"prompt", g.prompt}, {"max_tokens", 1}, {"temperature", 0}})["choices"][0]["text"];
  const int32_t first = tok.Encode(g.prompt + golden, true).back();
  const json banned = PostOk(server_, {{"prompt", g.prompt},
                                       {"max_tokens", 1},
                                       {"temperature", 0},
                                       {"logit_bias", {{std::to_string(first), -100}}}});
  EXPECT_NE(banned["choices"][0]["text"], golden);
  // allowed_token_ids: sampled (not greedy) tokens all come from the list.
  const std::vector<int32_t> allowed = {lily, tok.Encode(" cat", false).back()};
  const json sampled = PostOk(server_, {{"prompt", prompt},
                                        {"max_tokens", 8},
                                        {"temperature", 1.0},
                                        {"seed", 3},
                                        {"logprobs", 0},
                                        {"allowed_token_ids", allowed}});
  const json& tokens = sampled["choices"][0]["logprobs"]["tokens"];
  ASSERT_EQ(tokens.size(), 8u);
  for (const json& t : tokens) {
    EXPECT_TRUE(t == tok.DecodePiece(prompt.back(), allowed[0]) ||
                t == tok.DecodePiece(allowed[0], allowed[0]) ||
                t == tok.DecodePiece(allowed[0], allowed[1]) ||
                t == tok.DecodePiece(prompt.back(), allowed[1]) ||
                t == tok.DecodePiece(allowed[1], allowed[1]) ||
                t == tok.DecodePiece(allowed[1], allowed[0]))
        << t;
  }
  // Out-of-vocabulary ids are a 400 naming them.
  auto bad = server_.Post("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"99999", 1}}}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "logit_bias");
}

// Every token a stop id, with min_tokens: nothing could be sampled under the mask (the engine
// used to draw token -1); the first min_tokens steps go unmasked and the server serves on.
TEST_F(CompletionsTest, StopIdsCoveringTheVocabularyWithMinTokens) {
  std::vector<int32_t> every(static_cast<size_t>(server_.tokenizer().vocab_size()));
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<int32_t>(i);
  for (double temperature : {0.0, 1.0}) {
    const json r = PostOk(server_, {{"prompt", "Once upon a time"},
                                    {"max_tokens", 5},
                                    {"min_tokens", 2},
                                    {"temperature", temperature},
                                    {"stop_token_ids", every}});
    // The second token (a stop id, like all) ends it once min_tokens are out.
    EXPECT_EQ(r["usage"]["completion_tokens"], 2) << temperature;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  }
  auto health = server_.Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(CompletionsTest, TruncatePromptTokensKeepsTheLastTokens) {
  const Tokenizer& tok = server_.tokenizer();
  const std::string text = "Once upon a time, there was a little girl named Lily.";
  const std::vector<int32_t> ids = tok.Encode(text, true);
  ASSERT_GT(ids.size(), 6u);
  const std::vector<int32_t> last(ids.end() - 4, ids.end());
  const json truncated = PostOk(server_, {{"prompt", text},
                                          {"max_tokens", 5},
                                          {"temperature", 0},
                                          {"echo", true},
                                          {"truncate_prompt_tokens", 4}});
  const json alone =
      PostOk(server_, {{"prompt", last}, {"max_tokens", 5}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(truncated["choices"][0]["text"], alone["choices"][0]["text"]);
  EXPECT_EQ(truncated["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(truncated["choices"][0]["text"].get<std::string>().rfind(tok.Decode(last), 0), 0u);
  // Chat truncates the rendered conversation; -1 keeps up to the whole context.
  auto chat =
      server_.Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", text}}}},
                                            {"max_tokens", 1},
                                            {"truncate_prompt_tokens", 5}});
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(json::parse(chat->body)["usage"]["prompt_tokens"], 5);
  const json whole =
      PostOk(server_, {{"prompt", text}, {"max_tokens", 1}, {"truncate_prompt_tokens", -1}});
  EXPECT_EQ(whole["usage"]["prompt_tokens"], ids.size());
  auto over =
      server_.Post("/v1/completions", {{"prompt", text}, {"truncate_prompt_tokens", 100000}});
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 400);
  EXPECT_EQ(json::parse(over->body)["error"]["param"], "truncate_prompt_tokens");
}

TEST_F(CompletionsTest, NullMaxTokensRunsToTheContextEnd) {
  const json r = PostOk(server_, {{"prompt", "Once upon a time"},
                                  {"max_tokens", nullptr},
                                  {"temperature", 0},
                                  {"ignore_eos", true}});
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], server_.engine().max_model_len());
}

}  // namespace
}  // namespace tinyserve
