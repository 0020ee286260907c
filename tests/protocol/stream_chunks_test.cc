// StreamChunks and AppendCompletionLogprobsJson must write exactly the bytes of SseData(<the JSON
// builder>) / DumpJson(CompletionLogprobsJson) (their contracts): checked over catalogues and
// random inputs.
#include "server/protocol/stream_chunks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "models/tokenizer/llama2c_tokenizer.h"
#include "server/protocol/logprobs_json.h"
#include "tests/protocol/awkward_strings.h"
#include "tests/protocol/fake_tokenizer.h"

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

// Metas whose id and model need escaping too.
std::vector<ResponseMeta> Metas(const std::string& prefix) {
  return {{prefix + "0123456789abcdef0123456789abcdef", 1700000000, "stories260K"},
          {prefix + "1", 0, "odd \"model\"\n\xC3\xA9"},
          {prefix + "2", 4102444800, "bad \xFF utf8"}};
}

std::vector<std::optional<Usage>> Usages() { return {std::nullopt, Usage{0, 0}, Usage{5, 17}}; }

std::vector<StopReason> StopReasons() {
  return {StopReason{}, StopReason{int32_t{2}}, StopReason{int32_t{-1}},
          StopReason{std::string("\n\nThe")}, StopReason{std::string("\"")}};
}

const FinishReason kFinishReasons[] = {FinishReason::kNone, FinishReason::kStop,
                                       FinishReason::kLength, FinishReason::kAbort,
                                       FinishReason::kError};

Json SomeLogprobs() {
  Json out;
  out["text_offset"] = Json::array({0, 3});
  out["token_logprobs"] = Json::array({-0.25, -9999.0});
  out["tokens"] = Json::array({"Hel", "\"lo\""});
  out["top_logprobs"] = Json::array({Json{{"Hel", -0.25}}, Json{{"\"lo\"", -9999.0}}});
  return out;
}

TEST(StreamChunksTest, CompletionChunksEqualTheJsonBuilders) {
  int checked = 0;
  for (const ResponseMeta& meta : Metas("cmpl-")) {
    const StreamChunks chunks(meta, StreamChunks::Kind::kCompletion);
    for (const std::string& text : AwkwardStrings()) {
      for (const int32_t index : {0, 7, 123456}) {
        for (const FinishReason finish : kFinishReasons) {
          for (const StopReason& stop : StopReasons()) {
            for (const auto& usage : Usages()) {
              for (const bool logprobs : {false, true}) {
                CompletionChoice choice{index, text, logprobs ? SomeLogprobs() : Json(nullptr),
                                        finish, stop};
                std::string out = "kept|";
                chunks.AppendCompletionChunk(choice, usage, &out);
                ASSERT_EQ(out, "kept|" + SseData(CompletionChunkJson(meta, choice, usage)));
                ++checked;
              }
            }
          }
        }
      }
    }
    for (const auto& usage : Usages()) {
      if (!usage) continue;
      std::string out;
      chunks.AppendUsageChunk(*usage, &out);
      EXPECT_EQ(out, SseData(CompletionUsageChunkJson(meta, *usage)));
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(StreamChunksTest, ChatChunksEqualTheJsonBuilders) {
  for (const ResponseMeta& meta : Metas("chatcmpl-")) {
    const StreamChunks chunks(meta, StreamChunks::Kind::kChat);
    for (const int32_t index : {0, 3, 99999}) {
      std::string out;
      chunks.AppendChatRoleChunk(index, &out);
      ASSERT_EQ(out, SseData(ChatRoleChunkJson(meta, index)));
      for (const auto& usage : Usages()) {
        for (const std::string& text : AwkwardStrings()) {
          for (const bool logprobs : {false, true}) {
            const Json lp = logprobs ? SomeLogprobs() : Json(nullptr);
            out.clear();
            chunks.AppendChatContentChunk(index, text, lp, usage, &out);
            ASSERT_EQ(out, SseData(ChatContentChunkJson(meta, index, text, lp, usage)));
          }
        }
        for (const FinishReason finish : kFinishReasons) {
          for (const StopReason& stop : StopReasons()) {
            out.clear();
            chunks.AppendChatFinishChunk(index, finish, stop, usage, &out);
            ASSERT_EQ(out, SseData(ChatFinishChunkJson(meta, index, finish, stop, usage)));
          }
        }
        if (usage) {
          out.clear();
          chunks.AppendUsageChunk(*usage, &out);
          ASSERT_EQ(out, SseData(ChatUsageChunkJson(meta, *usage)));
        }
      }
    }
  }
}

// One exact chunk, so that a change to both sides of the equality above cannot go unnoticed.
TEST(StreamChunksTest, ExactCompletionChunk) {
  const StreamChunks chunks({"cmpl-1", 1700000000, "stories"}, StreamChunks::Kind::kCompletion);
  std::string out;
  chunks.AppendCompletionChunk({3, "Hel\"\n", nullptr, FinishReason::kNone, {}}, Usage{1, 2}, &out);
  EXPECT_EQ(out,
            "data: "
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":3,"text":"Hel\"\n","logprobs":null,"finish_reason":null,)"
            R"("stop_reason":null}],"usage":{"prompt_tokens":1,"total_tokens":3,)"
            R"("completion_tokens":2}})"
            "\n\n");
}

// A random logprobs delta over `tok`'s ids [3, vocab) (repeated alternatives included).
std::vector<TokenLogprobs> RandomLogprobs(std::mt19937* rng, int32_t vocab) {
  std::uniform_int_distribution<int32_t> id(3, vocab - 1);
  std::uniform_int_distribution<int> count(0, 4);
  std::uniform_int_distribution<int> top_n(0, 5);
  std::uniform_real_distribution<float> logprob(-30.0f, 0.0f);
  std::vector<TokenLogprobs> out(static_cast<size_t>(count(*rng)));
  for (TokenLogprobs& t : out) {
    t.token_id = id(*rng);
    t.logprob = (*rng)() % 16 == 0 ? -std::numeric_limits<float>::infinity() : logprob(*rng);
    t.rank = 1 + top_n(*rng);
    for (int k = top_n(*rng); k > 0; --k) t.top.emplace_back(id(*rng), logprob(*rng));
  }
  return out;
}

void ExpectFastLogprobsEqualTheJson(const Tokenizer& tok, int cases, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int i = 0; i < cases; ++i) {
    const std::vector<TokenLogprobs> lps = RandomLogprobs(&rng, tok.vocab_size());
    const int32_t prev = static_cast<int32_t>(rng() % static_cast<uint32_t>(tok.vocab_size()));
    const size_t offset = rng() % 1000;
    size_t next_fast = 0;
    size_t next_json = 0;
    std::string out = "kept|";
    AppendCompletionLogprobsJson(tok, prev, lps, offset, &next_fast, &out);
    ASSERT_EQ(out, "kept|" + DumpJson(CompletionLogprobsJson(tok, prev, lps, offset, &next_json)))
        << "case " << i;
    ASSERT_EQ(next_fast, next_json) << "case " << i;
  }
}

TEST(StreamChunksTest, FastCompletionLogprobsEqualTheJson) {
  // Awkward pieces: escapes, byte-fallback halves, and two ids with the same text.
  FakeTokenizer fake({"He", "llo", " wo", "\xC3", "\xA9", "\"q\"", "\n", "dup", "dup", "\x01"});
  ExpectFastLogprobsEqualTheJson(fake, 3000, 1);
  // The real Llama-2 vocabulary (pieces depend on the previous token).
  auto llama = LoadLlama2cTokenizer(TINYSERVE_SHARED_DIR "/models/tokenizer.bin", 32000);
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  ExpectFastLogprobsEqualTheJson(**llama, 3000, 2);
  // And through the chunk.
  const StreamChunks chunks({"cmpl-1", 1, "m"}, StreamChunks::Kind::kCompletion);
  std::string lp;
  AppendCompletionLogprobsJson(fake, 1, {{fake.Id("He"), -0.5f, 1, {}}}, 0, nullptr, &lp);
  std::string out;
  chunks.AppendCompletionChunk({0, "He", nullptr, FinishReason::kNone, {}}, std::nullopt, &out, lp);
  EXPECT_EQ(out, SseData(CompletionChunkJson(
                     {"cmpl-1", 1, "m"},
                     {0,
                      "He",
                      CompletionLogprobsJson(fake, 1, {{fake.Id("He"), -0.5f, 1, {}}}, 0),
                      FinishReason::kNone,
                      {}})));
}

}  // namespace
}  // namespace tinyserve::protocol
