#include "server/protocol/chat_template.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "models/tokenizer/llama2c_tokenizer.h"

namespace tinyserve::protocol {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Bye"},
};

std::string Render(std::string_view name, const std::vector<ChatMessage>& messages,
                   bool add_generation_prompt = true) {
  auto r = RenderChatTemplate(name, messages, add_generation_prompt);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

TEST(ChatTemplateTest, Plain) {
  EXPECT_EQ(Render("plain", kConversation),
            "System: Be brief.\nUser: Hi\nAssistant: Hello!\nUser: Bye\nAssistant:");
  EXPECT_EQ(Render("plain", {{"user", "Hi"}}, false), "User: Hi\n");
}

TEST(ChatTemplateTest, Chatml) {
  EXPECT_EQ(Render("chatml", kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(Render("chatml", {{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplateTest, Zephyr) {
  EXPECT_EQ(Render("zephyr", kConversation),
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n"
            "<|user|>\nBye</s>\n<|assistant|>\n");
}

TEST(ChatTemplateTest, Llama2WithSystem) {
  EXPECT_EQ(Render("llama-2", kConversation),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
            "<s>[INST] Bye [/INST]");
}

TEST(ChatTemplateTest, Llama2WithoutSystemStripsContent) {
  EXPECT_EQ(Render("llama-2", {{"user", "  Hi \n"}}), "<s>[INST] Hi [/INST]");
  // The generation prompt flag changes nothing: the text already ends with [/INST].
  EXPECT_EQ(Render("llama-2", {{"user", "Hi"}}, false), "<s>[INST] Hi [/INST]");
}

TEST(ChatTemplateTest, Llama2RolesMustAlternate) {
  for (const auto& messages : std::vector<std::vector<ChatMessage>>{
           {{"assistant", "x"}},
           {{"user", "a"}, {"user", "b"}},
           {{"system", "s"}, {"assistant", "x"}},
           {{"user", "a"}, {"assistant", "b"}, {"system", "c"}},
       }) {
    auto r = RenderChatTemplate("llama-2", messages, true);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(),
              "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplateTest, UnknownNameIsNotFound) {
  EXPECT_FALSE(IsKnownChatTemplate("vicuna"));
  EXPECT_TRUE(IsKnownChatTemplate("plain"));
  EXPECT_TRUE(IsKnownChatTemplate("llama-2"));
  auto r = RenderChatTemplate("vicuna", kConversation, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "unknown chat template 'vicuna' (known: plain, chatml, zephyr, llama-2)");
}

class Llama2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = LoadLlama2cTokenizer(TINYSERVE_SHARED_DIR "/models/tokenizer.bin", 32000);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = std::move(tok).value();
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Llama2TokenizerTest, EncodeLlama2PromptMapsSpecialTokens) {
  const std::string rendered =
      Render("llama-2", {{"user", "Hi"}, {"assistant", "Yo"}, {"user", "Bye"}});
  std::vector<int32_t> ids = EncodeChatPrompt("llama-2", rendered, *tokenizer_);
  std::vector<int32_t> expected = {1};
  auto add = [&](std::string_view text) {
    auto part = tokenizer_->Encode(text, false);
    expected.insert(expected.end(), part.begin(), part.end());
  };
  add("[INST] Hi [/INST] Yo ");
  expected.push_back(2);
  expected.push_back(1);
  add("[INST] Bye [/INST]");
  EXPECT_EQ(ids, expected);
}

TEST_F(Llama2TokenizerTest, EncodePlainPromptAddsBos) {
  const std::string rendered = Render("plain", {{"user", "Hi"}});
  std::vector<int32_t> ids = EncodeChatPrompt("plain", rendered, *tokenizer_);
  EXPECT_EQ(ids, tokenizer_->Encode(rendered, true));
  EXPECT_EQ(ids.front(), 1);
}

TEST_F(Llama2TokenizerTest, EncodeWithSpecialTokensPrefersEarliestThenLongest) {
  std::vector<std::pair<std::string, int32_t>> special = {{"<a>", 7}, {"<a><b>", 8}, {"<b>", 9}};
  std::vector<int32_t> ids = EncodeWithSpecialTokens("<a><b><b>", *tokenizer_, special, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{8, 9}));
  std::vector<int32_t> with_text = EncodeWithSpecialTokens("x<b>", *tokenizer_, special, true);
  std::vector<int32_t> expected = {1};
  auto x = tokenizer_->Encode("x", false);
  expected.insert(expected.end(), x.begin(), x.end());
  expected.push_back(9);
  EXPECT_EQ(with_text, expected);
}

}  // namespace
}  // namespace tinyserve::protocol
