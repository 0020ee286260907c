#include "server/protocol/responses.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "models/tokenizer/llama2c_tokenizer.h"
#include "server/protocol/logprobs_json.h"
#include "tests/protocol/fake_tokenizer.h"

namespace tinyserve::protocol {
namespace {

const ResponseMeta kCmpl{"cmpl-1", 1700000000, "stories"};
const ResponseMeta kChat{"chatcmpl-1", 1700000000, "stories"};

TEST(ResponsesTest, RequestIds) {
  std::string a = NewRequestId("cmpl-");
  std::string b = NewRequestId("cmpl-");
  EXPECT_EQ(a.size(), 5u + 32u);
  EXPECT_EQ(a.rfind("cmpl-", 0), 0u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef", 5), std::string::npos);
  EXPECT_NE(a, b);
  EXPECT_EQ(NewRequestId("chatcmpl-").rfind("chatcmpl-", 0), 0u);
}

// Ids made on many threads at once (a burst's handler threads, each with its own generator)
// never repeat: the engine refuses a second live request of the same id.
TEST(ResponsesTest, RequestIdsFromManyThreadsAreDistinct) {
  constexpr int kThreads = 64, kEach = 200;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&ids, t] {
      for (int i = 0; i < kEach; ++i) ids[t].push_back(NewRequestId("cmpl-"));
    });
  }
  for (std::thread& th : threads) th.join();
  std::set<std::string> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads) * kEach);
}

TEST(ResponsesTest, ChoiceIndexIsPromptMajor) {
  EXPECT_EQ(ChoiceIndex(0, 3, 0), 0);
  EXPECT_EQ(ChoiceIndex(0, 3, 2), 2);
  EXPECT_EQ(ChoiceIndex(1, 3, 0), 3);
  EXPECT_EQ(ChoiceIndex(2, 3, 1), 7);
}

TEST(ResponsesTest, ReasonsJson) {
  EXPECT_EQ(FinishReasonJson(FinishReason::kNone).dump(), "null");
  EXPECT_EQ(FinishReasonJson(FinishReason::kStop).dump(), "\"stop\"");
  EXPECT_EQ(FinishReasonJson(FinishReason::kLength).dump(), "\"length\"");
  EXPECT_EQ(FinishReasonJson(FinishReason::kAbort).dump(), "\"abort\"");
  EXPECT_EQ(StopReasonJson(StopReason{}).dump(), "null");
  EXPECT_EQ(StopReasonJson(StopReason{int32_t{2}}).dump(), "2");
  EXPECT_EQ(StopReasonJson(StopReason{std::string("\n")}).dump(), "\"\\n\"");
}

TEST(ResponsesTest, TextCompletion) {
  std::vector<CompletionChoice> choices(2);
  choices[0].index = 0;
  choices[0].text = " there";
  choices[0].finish_reason = FinishReason::kLength;
  choices[1].index = 1;
  choices[1].text = "!";
  choices[1].finish_reason = FinishReason::kStop;
  choices[1].stop_reason = std::string("\n");
  EXPECT_EQ(CompletionResponseJson(kCmpl, choices, {5, 7}).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":0,"text":" there","logprobs":null,"finish_reason":"length",)"
            R"("stop_reason":null},{"index":1,"text":"!","logprobs":null,"finish_reason":"stop",)"
            R"("stop_reason":"\n"}],"usage":{"prompt_tokens":5,"total_tokens":12,)"
            R"("completion_tokens":7}})");
}

TEST(ResponsesTest, CompletionStreamChunks) {
  CompletionChoice running{3, "Hel", nullptr, FinishReason::kNone, {}};
  EXPECT_EQ(CompletionChunkJson(kCmpl, running).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":3,"text":"Hel","logprobs":null,"finish_reason":null,)"
            R"("stop_reason":null}]})");
  CompletionChoice last{3, "", nullptr, FinishReason::kStop, int32_t{2}};
  EXPECT_EQ(CompletionChunkJson(kCmpl, last, Usage{1, 2}).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":3,"text":"","logprobs":null,"finish_reason":"stop",)"
            R"("stop_reason":2}],"usage":{"prompt_tokens":1,"total_tokens":3,)"
            R"("completion_tokens":2}})");
  EXPECT_EQ(CompletionUsageChunkJson(kCmpl, {4, 6}).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[],"usage":{"prompt_tokens":4,"total_tokens":10,"completion_tokens":6}})");
}

TEST(ResponsesTest, ChatCompletion) {
  std::vector<ChatChoice> choices(1);
  choices[0].content = "Hi!";
  choices[0].finish_reason = FinishReason::kStop;
  EXPECT_EQ(ChatResponseJson(kChat, choices, {9, 3}).dump(),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,)"
            R"("model":"stories","choices":[{"index":0,"message":{"role":"assistant",)"
            R"("content":"Hi!"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],)"
            R"("usage":{"prompt_tokens":9,"total_tokens":12,"completion_tokens":3}})");
}

TEST(ResponsesTest, ChatStreamChunks) {
  const std::string head =
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,)"
      R"("model":"stories",)";
  EXPECT_EQ(ChatRoleChunkJson(kChat, 0).dump(),
            head + R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},)"
                   R"("logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(ChatContentChunkJson(kChat, 1, "Hel").dump(),
            head + R"("choices":[{"index":1,"delta":{"content":"Hel"},"logprobs":null,)"
                   R"("finish_reason":null}]})");
  EXPECT_EQ(ChatFinishChunkJson(kChat, 1, FinishReason::kLength, {}).dump(),
            head + R"("choices":[{"index":1,"delta":{},"logprobs":null,"finish_reason":"length",)"
                   R"("stop_reason":null}]})");
  EXPECT_EQ(ChatUsageChunkJson(kChat, {2, 3}).dump(),
            head + R"("choices":[],"usage":{"prompt_tokens":2,"total_tokens":5,)"
                   R"("completion_tokens":3}})");
  EXPECT_EQ(ChatContentChunkJson(kChat, 0, "x", nullptr, Usage{1, 1}).dump(),
            head + R"("choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,)"
                   R"("finish_reason":null}],"usage":{"prompt_tokens":1,"total_tokens":2,)"
                   R"("completion_tokens":1}})");
}

TEST(ResponsesTest, SseFraming) {
  nlohmann::ordered_json chunk = {{"a", 1}};
  EXPECT_EQ(SseData(chunk), "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  EXPECT_EQ(kSsePing, ": ping\n\n");
  // Invalid UTF-8 never throws: it is replaced.
  nlohmann::ordered_json bad = {{"t", std::string("a\xFF")}};
  EXPECT_EQ(SseData(bad), "data: {\"t\":\"a\xEF\xBF\xBD\"}\n\n");
  // Non-ASCII stays as UTF-8 (not \u-escaped), as vLLM's pydantic dump does.
  EXPECT_EQ(DumpJson(nlohmann::ordered_json("é")), "\"é\"");
}

// ---- logprobs ---------------------------------------------------------------------------------

TEST(LogprobsJsonTest, CompletionLogprobs) {
  FakeTokenizer tok({"He", "llo", " wo", "\xC3", "\xA9"});
  const int32_t he = tok.Id("He"), llo = tok.Id("llo"), wo = tok.Id(" wo");
  std::vector<TokenLogprobs> lps = {
      {he, -0.5f, 1, {{he, -0.5f}, {wo, -1.5f}}},
      {llo, -0.25f, 2, {{wo, -0.1f}, {llo, -0.25f}}},
      {tok.Id("\xC3"), -std::numeric_limits<float>::infinity(), 9, {}},
  };
  size_t next = 0;
  EXPECT_EQ(CompletionLogprobsJson(tok, 1, lps, 4, &next).dump(),
            R"({"text_offset":[4,6,9],"token_logprobs":[-0.5,-0.25,-9999.0],)"
            R"("tokens":["He","llo","�"],)"
            R"("top_logprobs":[{"He":-0.5," wo":-1.5},{"llo":-0.25," wo":-0.1},)"
            R"({"�":-9999.0}]})");
  EXPECT_EQ(next, 10u);
}

TEST(LogprobsJsonTest, CompletionPromptLogprobsThenGeneratedOnes) {
  FakeTokenizer tok({"He", "llo", " wo", "\xC3\xA9"});
  const int32_t he = tok.Id("He"), llo = tok.Id("llo"), wo = tok.Id(" wo"), e = tok.Id("\xC3\xA9");
  // Prompt [BOS, He, llo]: BOS has no text, no logprob and no alternatives.
  const std::vector<int32_t> prompt = {1, he, llo};
  const std::vector<TokenLogprobs> prompt_lps = {
      {he, -2.0f, 3, {{wo, -0.5f}}},
      {llo, -std::numeric_limits<float>::infinity(), 9, {{llo, -1e5f}, {he, -0.75f}}},
  };
  nlohmann::ordered_json all = CompletionPromptLogprobsJson(tok, prompt, prompt_lps);
  EXPECT_EQ(all.dump(),
            R"({"text_offset":[0,0,2],"token_logprobs":[null,-2.0,-9999.0],)"
            R"("tokens":["","He","llo"],)"
            R"("top_logprobs":[null,{"He":-2.0," wo":-0.5},{"llo":-9999.0,"He":-0.75}]})");
  // Generated tokens continue at the end of the echoed text (5 code points: "Hello").
  ConcatCompletionLogprobs(&all, CompletionLogprobsJson(tok, llo, {{e, -0.125f, 1, {}}}, 5));
  EXPECT_EQ(all.dump(), R"({"text_offset":[0,0,2,5],"token_logprobs":[null,-2.0,-9999.0,-0.125],)"
                        R"("tokens":["","He","llo","é"],)"
                        R"("top_logprobs":[null,{"He":-2.0," wo":-0.5},{"llo":-9999.0,"He":-0.75},)"
                        R"({"é":-0.125}]})");
  // Only the first prompt token (a one-token prompt, or none arrived).
  EXPECT_EQ(CompletionPromptLogprobsJson(tok, {wo}, {}).dump(),
            R"({"text_offset":[0],"token_logprobs":[null],"tokens":[" wo"],)"
            R"("top_logprobs":[null]})");
}

TEST(LogprobsJsonTest, PromptLogprobsAreVllmsListOfDictsByTokenId) {
  FakeTokenizer tok({"He", "llo", " wo"});
  const int32_t he = tok.Id("He"), llo = tok.Id("llo"), wo = tok.Id(" wo");
  ASSERT_EQ(he, 3);
  ASSERT_EQ(wo, 5);
  const std::vector<TokenLogprobs> prompt_lps = {
      {he, -2.0f, 3, {{wo, -0.5f}}},
      // The prompt token is also the top alternative: its key keeps its place, takes rank 1.
      {llo, -std::numeric_limits<float>::infinity(), 9, {{llo, -1e5f}, {he, -0.75f}}},
  };
  EXPECT_EQ(PromptLogprobsJson(tok, {1, he, llo}, prompt_lps).dump(),
            R"([null,{"3":{"logprob":-2.0,"rank":3,"decoded_token":"He"},)"
            R"("5":{"logprob":-0.5,"rank":1,"decoded_token":" wo"}},)"
            R"({"4":{"logprob":-9999.0,"rank":1,"decoded_token":"llo"},)"
            R"("3":{"logprob":-0.75,"rank":2,"decoded_token":"He"}}])");
  EXPECT_EQ(PromptLogprobsJson(tok, {wo}, {}).dump(), "[null]");
  // A completion choice carries them after stop_reason; a chat response after usage.
  CompletionChoice choice;
  choice.text = "x";
  choice.prompt_logprobs = PromptLogprobsJson(tok, {wo}, {});
  EXPECT_EQ(CompletionResponseJson(kCmpl, {choice}, {1, 1}).dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":null,)"
            R"("stop_reason":null,"prompt_logprobs":[null]}],"usage":{"prompt_tokens":1,)"
            R"("total_tokens":2,"completion_tokens":1}})");
  EXPECT_EQ(ChatResponseJson(kChat, {}, {1, 0}, choice.prompt_logprobs).dump(),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,)"
            R"("model":"stories","choices":[],"usage":{"prompt_tokens":1,"total_tokens":1,)"
            R"("completion_tokens":0},"prompt_logprobs":[null]})");
}

TEST(LogprobsJsonTest, ChatLogprobs) {
  FakeTokenizer tok({"Hi", "\xC3", "!"});
  const int32_t hi = tok.Id("Hi"), c3 = tok.Id("\xC3"), bang = tok.Id("!");
  std::vector<TokenLogprobs> lps = {
      {hi, -0.5f, 1, {{hi, -0.5f}, {bang, -2.0f}}},
      {c3, -1.0f, 1, {}},
  };
  EXPECT_EQ(ChatLogprobsJson(tok, 1, lps).dump(),
            R"({"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],"top_logprobs":[)"
            R"({"token":"Hi","logprob":-0.5,"bytes":[72,105]},)"
            R"({"token":"!","logprob":-2.0,"bytes":[33]}]},)"
            R"({"token":"�","logprob":-1.0,"bytes":[195],"top_logprobs":[]}]})");
}

TEST(LogprobsJsonTest, ClampLogprob) {
  EXPECT_EQ(ClampLogprob(-1.0f), -1.0f);
  EXPECT_EQ(ClampLogprob(-1e9f), kMinLogprob);
  EXPECT_EQ(ClampLogprob(std::numeric_limits<float>::quiet_NaN()), kMinLogprob);
}

}  // namespace
}  // namespace tinyserve::protocol
