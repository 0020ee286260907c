// POST /v1/completions with echo + logprobs on the real stories260K model: the choice's logprobs
// cover the prompt tokens (vLLM's prompt logprobs: the first token null) and then the generated
// ones; the values equal the log-softmax of llama2.c's logits
// (../shared/golden/stories260K_logits_once_upon_a_time.json). Streaming and non-streaming agree,
// with n > 1 and several prompts, chunked prefill and a warm prefix cache; max_tokens 0 with echo
// scores the prompt alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/utf8.h"
#include "server/protocol/logprobs_json.h"
#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::SseEvents;
using testing::TestServerOptions;

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};  // "Once upon a time"
const std::string kLongPrompt =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park.";

json PostLogprobsOk(const OpenAiTestServer& server, const json& body) {
  auto res = server.Post("/v1/completions", body);
  EXPECT_TRUE(res);
  if (!res) return json();
  EXPECT_EQ(res->status, 200) << res->body;
  return json::parse(res->body);
}

// A streamed completion folded into one choice per index: text, logprobs (arrays concatenated
// over the chunks that carry logprobs), finish_reason; and the usage chunk's usage.
struct Streamed {
  std::map<int, json> choices;
  json usage;
  std::vector<json> chunks;  // every choice chunk, in order
};

Streamed PostStream(const OpenAiTestServer& server, json body) {
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Streamed out;
  auto res = server.Post("/v1/completions", body);
  EXPECT_TRUE(res);
  if (!res) return out;
  EXPECT_EQ(res->status, 200) << res->body;
  const std::vector<std::string> events = SseEvents(res->body);
  EXPECT_FALSE(events.empty());
  if (events.empty()) return out;
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    const json chunk = json::parse(events[e]);
    if (chunk["choices"].empty()) {
      out.usage = chunk["usage"];
      continue;
    }
    const json& c = chunk["choices"][0];
    out.chunks.push_back(c);
    json& acc = out.choices[c["index"].get<int>()];
    if (acc.is_null()) acc = {{"text", ""}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    acc["text"] = acc["text"].get<std::string>() + c["text"].get<std::string>();
    if (!c["logprobs"].is_null()) {
      if (acc["logprobs"].is_null()) {
        acc["logprobs"] = c["logprobs"];
      } else {
        for (const char* key : {"text_offset", "token_logprobs", "tokens", "top_logprobs"}) {
          for (const auto& v : c["logprobs"][key]) acc["logprobs"][key].push_back(v);
        }
      }
    }
    if (!c["finish_reason"].is_null()) acc["finish_reason"] = c["finish_reason"];
  }
  return out;
}

// The log-softmax of the golden logits at each prompt position.
std::vector<std::vector<double>> GoldenLogprobs() {
  std::ifstream in(std::string(TINYSERVE_SHARED_DIR) +
                   "/golden/stories260K_logits_once_upon_a_time.json");
  const json g = json::parse(in);
  EXPECT_EQ(g["prompt_token_ids"].get<std::vector<int32_t>>(), kPrompt);
  std::vector<std::vector<double>> out;
  for (size_t p = 0; p < kPrompt.size(); ++p) {
    const std::vector<double> logits = g["steps"][p]["logits"].get<std::vector<double>>();
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0.0;
    for (double x : logits) sum += std::exp(x - max);
    std::vector<double> lp;
    for (double x : logits) lp.push_back(x - max - std::log(sum));
    out.push_back(std::move(lp));
  }
  return out;
}

// The ids of the n largest entries (ties: lower id first).
std::vector<int32_t> TopIds(const std::vector<double>& lp, size_t n) {
  std::vector<int32_t> ids(lp.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
  ids.resize(n);
  return ids;
}

// The logprobs objects agree: same tokens, offsets and dict keys; numbers within `tol`.
void ExpectSameLogprobs(const json& a, const json& b, double tol) {
  ASSERT_TRUE(a.is_object() && b.is_object()) << a << "\n" << b;
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(a["text_offset"], b["text_offset"]);
  ASSERT_EQ(a["token_logprobs"].size(), b["token_logprobs"].size());
  for (size_t i = 0; i < a["token_logprobs"].size(); ++i) {
    const json &x = a["token_logprobs"][i], &y = b["token_logprobs"][i];
    ASSERT_EQ(x.is_null(), y.is_null()) << i;
    if (!x.is_null()) {
      EXPECT_NEAR(x.get<double>(), y.get<double>(), tol) << i;
    }
    const json &tx = a["top_logprobs"][i], &ty = b["top_logprobs"][i];
    ASSERT_EQ(tx.is_null(), ty.is_null()) << i;
    if (tx.is_null()) continue;
    ASSERT_EQ(tx.size(), ty.size()) << i;
    for (const auto& [token, lp] : tx.items()) {
      ASSERT_TRUE(ty.contains(token)) << token;
      EXPECT_NEAR(lp.get<double>(), ty[token].get<double>(), tol) << token;
    }
  }
}

class PromptLogprobsHttpTest : public ::testing::Test {
 protected:
  const Tokenizer& tok() const { return server_.tokenizer(); }
  OpenAiTestServer server_;
};

TEST_F(PromptLogprobsHttpTest, EchoWithLogprobsScoresThePromptAsTheReference) {
  const std::vector<std::vector<double>> golden = GoldenLogprobs();
  const json r = PostLogprobsOk(server_, {{"prompt", kPrompt},
                                          {"max_tokens", 1},
                                          {"temperature", 0},
                                          {"echo", true},
                                          {"logprobs", 5}});
  const json& c = r["choices"][0];
  const std::string echo = tok().Decode(kPrompt);
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), kPrompt.size() + 1);
  ASSERT_EQ(lp["token_logprobs"].size(), kPrompt.size() + 1);
  ASSERT_EQ(lp["top_logprobs"].size(), kPrompt.size() + 1);
  ASSERT_EQ(lp["text_offset"].size(), kPrompt.size() + 1);
  // The first prompt token has no context.
  EXPECT_EQ(lp["tokens"][0], protocol::LogprobTokenText(tok(), -1, kPrompt[0]));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  std::string joined = lp["tokens"][0];
  for (size_t i = 1; i < kPrompt.size(); ++i) {
    const std::string text = protocol::LogprobTokenText(tok(), kPrompt[i - 1], kPrompt[i]);
    EXPECT_EQ(lp["tokens"][i], text);
    EXPECT_EQ(lp["text_offset"][i], Utf8Length(joined));
    joined += text;
    const std::vector<double>& ref = golden[i - 1];
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), ref[kPrompt[i]], 1e-4) << i;
    // The dict: the prompt token (here also the most likely one) and the top 5.
    const json& top = lp["top_logprobs"][i];
    std::vector<int32_t> ids = TopIds(ref, 5);
    ASSERT_EQ(ids[0], kPrompt[i]);
    ASSERT_EQ(top.size(), 5u) << top;
    for (int32_t id : ids) {
      const std::string t = protocol::LogprobTokenText(tok(), kPrompt[i - 1], id);
      ASSERT_TRUE(top.contains(t)) << t << " in " << top;
      EXPECT_NEAR(top[t].get<double>(), ref[id], 1e-4) << t;
    }
  }
  EXPECT_EQ(joined, echo);
  // Then the generated token, at the end of the echo: the golden argmax at position 4.
  const std::string gen = protocol::LogprobTokenText(tok(), kPrompt.back(), 432);
  EXPECT_EQ(lp["tokens"][kPrompt.size()], gen);
  EXPECT_EQ(lp["text_offset"][kPrompt.size()], Utf8Length(echo));
  EXPECT_NEAR(lp["token_logprobs"][kPrompt.size()].get<double>(), golden[4][432], 1e-4);
  EXPECT_EQ(c["text"], echo + gen);
  EXPECT_EQ(r["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(r["usage"]["completion_tokens"], 1);
}

TEST_F(PromptLogprobsHttpTest, StreamingAgreesWithNonStreamingForNAndSeveralPrompts) {
  const json body = {{"prompt", json::array({"Once upon a time", kLongPrompt})},
                     {"max_tokens", 4},
                     {"temperature", 0},
                     {"n", 2},
                     {"echo", true},
                     {"logprobs", 2}};
  const json r = PostLogprobsOk(server_, body);
  const Streamed s = PostStream(server_, body);
  ASSERT_EQ(r["choices"].size(), 4u);
  ASSERT_EQ(s.choices.size(), 4u);
  for (const json& c : r["choices"]) {
    const int index = c["index"];
    const std::string prompt = index < 2 ? "Once upon a time" : kLongPrompt;
    const size_t num_prompt = tok().Encode(prompt, true).size();
    EXPECT_EQ(c["text"].get<std::string>().rfind(prompt, 0), 0u) << index;
    ASSERT_EQ(c["logprobs"]["tokens"].size(), num_prompt + 4) << index;
    EXPECT_TRUE(c["logprobs"]["token_logprobs"][0].is_null());
    const json& sc = s.choices.at(index);
    EXPECT_EQ(sc["text"], c["text"]) << index;
    EXPECT_EQ(sc["finish_reason"], c["finish_reason"]);
    // fp32 rounding differs with the batch's shape (which rows share a GEMM), hence 1e-4
    // (the golden tolerance of the logits).
    ExpectSameLogprobs(sc["logprobs"], c["logprobs"], 1e-4);
    // The samples of one prompt score it alike.
    ExpectSameLogprobs(r["choices"][index ^ 1]["logprobs"], c["logprobs"], 1e-4);
  }
  // Each choice's first chunk is its echo with all of its prompt logprobs.
  std::map<int, bool> seen;
  for (const json& c : s.chunks) {
    const int index = c["index"];
    if (seen[index]) continue;
    seen[index] = true;
    const std::string prompt = index < 2 ? "Once upon a time" : kLongPrompt;
    EXPECT_EQ(c["text"], prompt);
    EXPECT_EQ(c["logprobs"]["tokens"].size(), tok().Encode(prompt, true).size());
  }
  EXPECT_EQ(s.usage, r["usage"]);
}

// Issue 16: each of the n choices scored its prompt again. Now the prompt's first choice scores
// it and the others show the same values, streaming or not.
TEST_F(PromptLogprobsHttpTest, EachPromptIsScoredOnceForAllItsChoices) {
  const json body = {{"prompt", json::array({"Once upon a time", kLongPrompt})},
                     {"max_tokens", 3},
                     {"temperature", 1.0},
                     {"seed", 5},
                     {"n", 3},
                     {"echo", true},
                     {"logprobs", 1}};
  const int64_t before = server_.num_scoring_prompts();
  const json r = PostLogprobsOk(server_, body);
  EXPECT_EQ(server_.num_scoring_prompts() - before, 2);
  const Streamed s = PostStream(server_, body);
  EXPECT_EQ(server_.num_scoring_prompts() - before, 4);
  ASSERT_EQ(r["choices"].size(), 6u);
  ASSERT_EQ(s.choices.size(), 6u);
  for (const json& c : r["choices"]) {
    const int index = c["index"];
    const std::string prompt = index < 3 ? "Once upon a time" : kLongPrompt;
    const size_t num_prompt = tok().Encode(prompt, true).size();
    const json& first = r["choices"][index - index % 3]["logprobs"];
    ASSERT_EQ(c["logprobs"]["token_logprobs"].size(), num_prompt + 3) << index;
    for (size_t t = 1; t < num_prompt; ++t) {
      EXPECT_EQ(c["logprobs"]["token_logprobs"][t], first["token_logprobs"][t]) << index;
      EXPECT_EQ(c["logprobs"]["top_logprobs"][t], first["top_logprobs"][t]) << index;
    }
    const json& sc = s.choices.at(index);
    EXPECT_EQ(sc["text"], c["text"]) << index;
    ExpectSameLogprobs(sc["logprobs"], c["logprobs"], 1e-4);
  }
  // Each streamed choice's first chunk is its echo, with all of its prompt's logprobs.
  std::map<int, bool> seen;
  for (const json& c : s.chunks) {
    const int index = c["index"];
    if (seen[index]) continue;
    seen[index] = true;
    const std::string prompt = index < 3 ? "Once upon a time" : kLongPrompt;
    EXPECT_EQ(c["text"], prompt) << index;
    EXPECT_EQ(c["logprobs"]["tokens"].size(), tok().Encode(prompt, true).size()) << index;
  }
  // prompt_logprobs (not echo): every choice carries the list, scored once.
  const int64_t before_list = server_.num_scoring_prompts();
  const json l = PostLogprobsOk(
      server_, {{"prompt", kPrompt}, {"max_tokens", 1}, {"n", 3}, {"prompt_logprobs", 2}});
  EXPECT_EQ(server_.num_scoring_prompts() - before_list, 1);
  ASSERT_EQ(l["choices"].size(), 3u);
  for (const json& c : l["choices"]) {
    ASSERT_EQ(c["prompt_logprobs"].size(), kPrompt.size());
    EXPECT_EQ(c["prompt_logprobs"], l["choices"][0]["prompt_logprobs"]);
  }
}

TEST_F(PromptLogprobsHttpTest, EchoAloneAndLogprobsAloneAreUnchanged) {
  const json echo_only = PostLogprobsOk(
      server_,
      {{"prompt", "Once upon a time"}, {"max_tokens", 3}, {"temperature", 0}, {"echo", true}});
  EXPECT_TRUE(echo_only["choices"][0]["logprobs"].is_null());
  const json lp_only = PostLogprobsOk(
      server_,
      {{"prompt", "Once upon a time"}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 1}});
  const json& lp = lp_only["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_FALSE(lp["token_logprobs"][0].is_null());
  EXPECT_EQ(echo_only["choices"][0]["text"],
            "Once upon a time" + lp_only["choices"][0]["text"].get<std::string>());
  const Streamed s = PostStream(
      server_,
      {{"prompt", "Once upon a time"}, {"max_tokens", 3}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(s.chunks.front()["text"], "Once upon a time");  // sent before any token
  EXPECT_TRUE(s.chunks.front()["logprobs"].is_null());
}

TEST_F(PromptLogprobsHttpTest, MaxTokensZeroWithEchoScoresThePromptAlone) {
  const json body = {{"prompt", kPrompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}};
  const json r = PostLogprobsOk(server_, body);
  const json& c = r["choices"][0];
  const std::string echo = tok().Decode(kPrompt);
  EXPECT_EQ(c["text"], echo);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(c["logprobs"]["tokens"].size(), kPrompt.size());
  EXPECT_EQ(r["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  const std::vector<std::vector<double>> golden = GoldenLogprobs();
  EXPECT_NEAR(c["logprobs"]["token_logprobs"][4].get<double>(), golden[3][kPrompt[4]], 1e-4);

  const Streamed s = PostStream(server_, body);
  ASSERT_EQ(s.choices.size(), 1u);
  EXPECT_EQ(s.choices.at(0)["text"], echo);
  EXPECT_EQ(s.choices.at(0)["finish_reason"], "length");
  ExpectSameLogprobs(s.choices.at(0)["logprobs"], c["logprobs"], 1e-4);
  EXPECT_EQ(s.usage["completion_tokens"], 0);

  // Without echo, max_tokens 0 is still an error.
  auto res = server_.Post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 0}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
}

TEST_F(PromptLogprobsHttpTest, WarmPrefixCacheAndChunkedPrefillGiveTheSameValues) {
  const json body = {{"prompt", kLongPrompt},
                     {"max_tokens", 2},
                     {"temperature", 0},
                     {"echo", true},
                     {"logprobs", 3}};
  ASSERT_GT(tok().Encode(kLongPrompt, true).size(), 32u);  // spans two full 16-token blocks
  const json cold = PostLogprobsOk(server_, body)["choices"][0];
  // The same prompt again, now in the prefix cache: every position is still scored.
  const json warm = PostLogprobsOk(server_, body)["choices"][0];
  EXPECT_EQ(warm["logprobs"], cold["logprobs"]);
  // Prefill in chunks of 7 tokens on another server.
  TestServerOptions options;
  options.max_num_batched_tokens = 7;
  OpenAiTestServer chunked(options);
  const json c7 = PostLogprobsOk(chunked, body)["choices"][0];
  EXPECT_EQ(c7["text"], cold["text"]);
  ExpectSameLogprobs(c7["logprobs"], cold["logprobs"], 1e-4);
  // Streamed, the echo chunk waits for the last chunk's prompt logprobs and carries them all.
  const Streamed s7 = PostStream(chunked, body);
  ASSERT_FALSE(s7.chunks.empty());
  EXPECT_EQ(s7.chunks.front()["text"], kLongPrompt);
  EXPECT_EQ(s7.chunks.front()["logprobs"]["tokens"].size(), tok().Encode(kLongPrompt, true).size());
  EXPECT_EQ(s7.choices.at(0)["text"], cold["text"]);
  ExpectSameLogprobs(s7.choices.at(0)["logprobs"], cold["logprobs"], 1e-4);
}

// vLLM's `prompt_logprobs` request field: a list per completion choice (null first, then dicts by
// token id of {logprob, rank, decoded_token}), at the top of a chat response; not with stream.
TEST_F(PromptLogprobsHttpTest, PromptLogprobsFieldIsVllmsListForCompletionsAndChat) {
  const std::vector<std::vector<double>> golden = GoldenLogprobs();
  const json r = PostLogprobsOk(
      server_,
      {{"prompt", kPrompt}, {"max_tokens", 2}, {"temperature", 0}, {"prompt_logprobs", 2}});
  const json& c = r["choices"][0];
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["text"].get<std::string>().rfind(tok().Decode(kPrompt), 0), std::string::npos);
  const json& pl = c["prompt_logprobs"];
  ASSERT_EQ(pl.size(), kPrompt.size()) << pl;
  EXPECT_TRUE(pl[0].is_null());
  for (size_t i = 1; i < kPrompt.size(); ++i) {
    const std::vector<double>& ref = golden[i - 1];
    const std::vector<int32_t> top = TopIds(ref, 2);
    ASSERT_EQ(top[0], kPrompt[i]);  // the prompt token is the most likely: 2 entries, not 3
    ASSERT_EQ(pl[i].size(), 2u) << pl[i];
    for (size_t k = 0; k < top.size(); ++k) {
      const json& e = pl[i][std::to_string(top[k])];
      EXPECT_NEAR(e["logprob"].get<double>(), ref[top[k]], 1e-4) << i;
      EXPECT_EQ(e["rank"], k + 1);
      EXPECT_EQ(e["decoded_token"], protocol::LogprobTokenText(tok(), kPrompt[i - 1], top[k]));
    }
  }

  // Echo with logprobs computes them too, and vLLM sends them: the same values as the echo's.
  const json echo = PostLogprobsOk(server_, {{"prompt", kPrompt},
                                             {"max_tokens", 1},
                                             {"temperature", 0},
                                             {"echo", true},
                                             {"logprobs", 1}})["choices"][0];
  ASSERT_EQ(echo["prompt_logprobs"].size(), kPrompt.size());
  for (size_t i = 1; i < kPrompt.size(); ++i) {
    EXPECT_EQ(echo["prompt_logprobs"][i][std::to_string(kPrompt[i])]["logprob"],
              echo["logprobs"]["token_logprobs"][i]);
  }
  // Without either, no prompt_logprobs key (vLLM's null is left out).
  EXPECT_FALSE(
      PostLogprobsOk(server_, {{"prompt", kPrompt}, {"max_tokens", 1}})["choices"][0].contains(
          "prompt_logprobs"));

  // Chat: one list for the one prompt, at the top level, with n = 2; top-0 keeps the token alone.
  auto chat = server_.Post("/v1/chat/completions",
                           {{"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}},
                            {"max_tokens", 2},
                            {"n", 2},
                            {"prompt_logprobs", 0}});
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  const json cr = json::parse(chat->body);
  const json& cpl = cr["prompt_logprobs"];
  ASSERT_EQ(cpl.size(), cr["usage"]["prompt_tokens"].get<size_t>()) << cpl;
  EXPECT_TRUE(cpl[0].is_null());
  for (size_t i = 1; i < cpl.size(); ++i) {
    ASSERT_EQ(cpl[i].size(), 1u) << cpl[i];
    EXPECT_LE(cpl[i].begin().value()["logprob"].get<double>(), 0.0);
    EXPECT_GE(cpl[i].begin().value()["rank"].get<int>(), 1);
  }
  ASSERT_EQ(cr["choices"].size(), 2u);
  EXPECT_FALSE(cr["choices"][0].contains("prompt_logprobs"));

  // Streaming cannot carry them (vLLM's error), for either endpoint.
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    auto res = server_.Post(path, {{"prompt", "x"},
                                   {"messages", {{{"role", "user"}, {"content", "x"}}}},
                                   {"stream", true},
                                   {"prompt_logprobs", 1}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << path;
    EXPECT_EQ(json::parse(res->body)["error"]["param"], "prompt_logprobs") << res->body;
  }
}

}  // namespace
}  // namespace tinyserve
