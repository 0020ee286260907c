#include "server/protocol/choice_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/utf8.h"
#include "tests/protocol/fake_tokenizer.h"

namespace tinyserve::protocol {
namespace {

RequestOutput Tokens(std::vector<int32_t> ids) {
  RequestOutput out;
  out.token_ids = std::move(ids);
  out.token_ts.assign(out.token_ids.size(), 0.0);
  return out;
}

RequestOutput Finished(std::vector<int32_t> ids, FinishReason reason,
                       std::optional<int32_t> stop_token_id = std::nullopt) {
  RequestOutput out = Tokens(std::move(ids));
  out.finished = true;
  out.finish_reason = reason;
  out.stop_token_id = stop_token_id;
  return out;
}

class ChoiceStreamTest : public ::testing::Test {
 protected:
  FakeTokenizer tok_{{"Hello", " wor", "ld", "\xF0\x9F", "\x98\x80", " END", " more", "E", "ND"}};
  int32_t Id(std::string_view p) const { return tok_.Id(p); }
};

TEST_F(ChoiceStreamTest, LengthFinishReleasesEverything) {
  SamplingFields f;
  ChoiceStream s(tok_, 1, f);
  ChoiceDelta a = s.Consume(Tokens({Id("Hello"), Id("\xF0\x9F")}));
  EXPECT_EQ(a.text, "Hello");
  EXPECT_EQ(a.num_tokens, 2);
  EXPECT_FALSE(a.finished);
  ChoiceDelta b = s.Consume(Finished({Id("\x98\x80")}, FinishReason::kLength));
  EXPECT_EQ(b.text, "\xF0\x9F\x98\x80");
  EXPECT_TRUE(b.finished);
  EXPECT_EQ(b.finish_reason, FinishReason::kLength);
  EXPECT_EQ(StopReasonJson(b.stop_reason).dump(), "null");
  EXPECT_EQ(s.text(), "Hello\xF0\x9F\x98\x80");
  EXPECT_EQ(s.num_tokens(), 3);
  EXPECT_FALSE(s.stopped_by_string());
  EXPECT_TRUE(s.Consume(Tokens({Id("ld")})).text.empty());  // nothing after the finish
}

TEST_F(ChoiceStreamTest, StopStringDropsLaterTokensAndAsksForAbort) {
  SamplingFields f;
  f.stop = {"END"};
  ChoiceStream s(tok_, 1, f);
  ChoiceDelta a = s.Consume(Tokens({Id("Hello"), Id(" wor"), Id("ld"), Id(" END"), Id(" more")}));
  EXPECT_EQ(a.text, "Hello world ");
  EXPECT_EQ(a.num_tokens, 4);  // " more" came after the stop: not counted
  EXPECT_TRUE(a.finished);
  EXPECT_EQ(a.finish_reason, FinishReason::kStop);
  EXPECT_EQ(StopReasonJson(a.stop_reason).dump(), "\"END\"");
  EXPECT_TRUE(s.stopped_by_string());
  EXPECT_EQ(s.num_tokens(), 4);
}

TEST_F(ChoiceStreamTest, StopStringSplitOverDeltasIsHeldBack) {
  SamplingFields f;
  f.stop = {"END"};
  ChoiceStream s(tok_, 1, f);
  EXPECT_EQ(s.Consume(Tokens({Id("Hello"), Id("E")})).text, "Hello");
  ChoiceDelta b = s.Consume(Tokens({Id("ND")}));
  EXPECT_EQ(b.text, "");
  EXPECT_TRUE(b.finished);
  EXPECT_EQ(s.text(), "Hello");
}

TEST_F(ChoiceStreamTest, EngineStopKeepsTheStopTokenIdAndFlushesHeldText) {
  SamplingFields f;
  f.stop = {"END"};
  ChoiceStream s(tok_, 1, f);
  EXPECT_EQ(s.Consume(Tokens({Id("Hello"), Id("E")})).text, "Hello");
  ChoiceDelta b = s.Consume(Finished({2}, FinishReason::kStop, 2));
  EXPECT_EQ(b.text, "E");  // "E" never became "END": released at the end
  EXPECT_EQ(b.finish_reason, FinishReason::kStop);
  EXPECT_EQ(StopReasonJson(b.stop_reason).dump(), "2");
  EXPECT_EQ(s.num_tokens(), 3);
}

TEST_F(ChoiceStreamTest, LogprobsFollowCountedTokens) {
  SamplingFields f;
  ChoiceStream s(tok_, 7, f);
  RequestOutput out = Tokens({Id("Hello"), Id(" wor")});
  out.logprobs = {{Id("Hello"), -0.5f, 1, {}}, {Id(" wor"), -1.0f, 1, {}}};
  ChoiceDelta a = s.Consume(out);
  EXPECT_EQ(a.logprobs_prev_id, 7);
  ASSERT_EQ(a.logprobs.size(), 2u);
  EXPECT_EQ(a.logprobs[1].token_id, Id(" wor"));
  ChoiceDelta b = s.Consume(Tokens({Id("ld")}));
  EXPECT_EQ(b.logprobs_prev_id, Id(" wor"));
  EXPECT_TRUE(b.logprobs.empty());
}

}  // namespace
}  // namespace tinyserve::protocol
