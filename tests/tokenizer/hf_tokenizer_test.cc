// Hugging Face tokenizer.json files: the real Llama-2 and GPT-2 files against llama.cpp's vocab
// test vectors (made by HF tokenizers), decoding, the model-directory config files and errors.
#include "models/tokenizer/hf_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/tokenizer/llama2c_tokenizer.h"
#include "tests/tokenizer/test_data.h"

namespace tinyserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using tinyserve::testing::ReadVocabInputs;
using tinyserve::testing::ReadVocabOutputs;
using tinyserve::testing::SharedPath;

const std::string kHfVocabDir = "models/llamacpp_vocab/";

std::unique_ptr<Tokenizer> LoadJson(const std::string& relative) {
  StatusOr<std::unique_ptr<Tokenizer>> tok = LoadHfTokenizerJson(SharedPath(relative));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

void ExpectAllLines(const Tokenizer& tok, const std::string& out_file) {
  const auto inputs = ReadVocabInputs(SharedPath(kHfVocabDir + "ggml-vocab-llama-spm.gguf.inp"));
  const auto outputs = ReadVocabOutputs(SharedPath(kHfVocabDir + out_file));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(outputs.size(), 46u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = tok.Encode(inputs[i], /*add_bos=*/false);
    EXPECT_EQ(ids, outputs[i]) << out_file << " line " << i + 1 << ": '" << inputs[i] << "'";
    // Both tokenizers are lossless on these (valid UTF-8) inputs.
    EXPECT_EQ(tok.Decode(ids), inputs[i]) << "line " << i + 1;
    EXPECT_EQ(tok.Decode(tok.Encode(inputs[i], /*add_bos=*/true)), inputs[i]) << "line " << i + 1;
  }
}

TEST(HfTokenizerJsonTest, Llama2ReproducesEveryLlamaCppLine) {
  auto tok = LoadJson("models/hf_tokenizers/llama2/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->add_bos_by_default());
  EXPECT_TRUE(tok->is_special(0));
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(3));
  ExpectAllLines(*tok, "ggml-vocab-llama-spm.gguf.out");
}

TEST(HfTokenizerJsonTest, Gpt2ReproducesEveryLlamaCppLine) {
  auto tok = LoadJson("models/hf_tokenizers/gpt2/tokenizer.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos_by_default());
  ExpectAllLines(*tok, "ggml-vocab-gpt-2.gguf.out");
}

}  // namespace
}  // namespace tinyserve

namespace tinyserve {
namespace {

using tinyserve::testing::ReadFileBytes;

// A fresh temporary directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tinyserve_hf_XXXXXX").string();
    const char* dir = mkdtemp(pattern.data());
    path_ = dir != nullptr ? dir : "";
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(File(name), std::ios::binary | std::ios::trunc) << text;
  }

 private:
  std::string path_;
};

// The llama2.c tokenizer and its tokenizer.json conversion encode every text the same way.
void ExpectSameAsLlama2c(const std::string& bin, int32_t vocab_size,
                         const std::vector<std::string>& texts) {
  auto llama2c = LoadLlama2cTokenizer(SharedPath(bin), vocab_size);
  ASSERT_TRUE(llama2c.ok()) << llama2c.status().ToString();
  TempDir dir;
  Status written = WriteHfTokenizerFromLlama2c(SharedPath(bin), vocab_size, dir.path());
  ASSERT_TRUE(written.ok()) << written.ToString();
  StatusOr<HfTokenizerFiles> hf = LoadHfTokenizer(dir.path());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->bos_token_id, 1);
  EXPECT_THAT(hf->eos_token_ids, ElementsAre(2));
  EXPECT_TRUE(hf->add_bos_token);
  EXPECT_EQ(hf->chat_template_name, "");
  const Tokenizer& tok = *hf->tokenizer;
  EXPECT_EQ(tok.vocab_size(), vocab_size);
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = (*llama2c)->Encode(text, /*add_bos=*/true);
    EXPECT_EQ(tok.Encode(text, /*add_bos=*/true), ids) << bin << ": '" << text << "'";
    EXPECT_EQ(tok.Decode(ids), text) << bin << ": '" << text << "'";
  }
}

std::vector<std::string> GoldenAndVectorTexts() {
  std::vector<std::string> texts =
      ReadVocabInputs(SharedPath(kHfVocabDir + "ggml-vocab-llama-spm.gguf.inp"));
  const auto golden =
      nlohmann::json::parse(ReadFileBytes(SharedPath("golden/stories260K_greedy.json")));
  for (const auto& c : golden["cases"]) texts.push_back(c["prompt"]);
  const auto vectors =
      nlohmann::json::parse(ReadFileBytes(SharedPath("models/tokenizer_llama2_vectors.json")));
  for (const auto& v : vectors["cases"]) texts.push_back(v["text"]);
  texts.push_back("Once upon a time, there was a little girl named Lily. She loved to play.");
  texts.push_back("naïve café — 日本語 🦙 \t\n  x");
  return texts;
}

TEST(HfTokenizerWriterTest, Llama2cTok512ConvertsExactly) {
  ExpectSameAsLlama2c("models/tok512.bin", 512, GoldenAndVectorTexts());
}

TEST(HfTokenizerWriterTest, Llama2cTokenizerBinConvertsExactly) {
  ExpectSameAsLlama2c("models/tokenizer.bin", 32000, GoldenAndVectorTexts());
}

TEST(HfTokenizerWriterTest, Llama2cConvertedMatchesVectorIds) {
  TempDir dir;
  ASSERT_TRUE(
      WriteHfTokenizerFromLlama2c(SharedPath("models/tokenizer.bin"), 32000, dir.path()).ok());
  StatusOr<HfTokenizerFiles> hf = LoadHfTokenizer(dir.path());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  const auto vectors =
      nlohmann::json::parse(ReadFileBytes(SharedPath("models/tokenizer_llama2_vectors.json")));
  ASSERT_EQ(vectors["cases"].size(), 5u);
  for (const auto& v : vectors["cases"]) {
    const std::vector<int32_t> expected = v["ids"];
    EXPECT_EQ(hf->tokenizer->Encode(v["text"].get<std::string>(), true), expected);
  }
}

TEST(HfTokenizerWriterTest, Llama2cMissingFileIsAnError) {
  TempDir dir;
  Status s = WriteHfTokenizerFromLlama2c(dir.File("nope.bin"), 512, dir.path());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("nope.bin"));
}

struct StyleCase {
  HfTokenizerStyle style;
  int32_t vocab_size;
  int32_t bos;  // -1: none
  bool add_bos;
  int32_t eos;
  const char* chat_template;
  const char* special_text;  // a special token and its id
  int32_t special_id;
};

class SyntheticTokenizerTest : public ::testing::TestWithParam<StyleCase> {};

TEST_P(SyntheticTokenizerTest, LoadsWithExactSizeIdsAndRoundTrips) {
  const StyleCase& c = GetParam();
  TempDir dir;
  Status written = WriteSyntheticHfTokenizer(c.vocab_size, c.style, dir.path());
  ASSERT_TRUE(written.ok()) << written.ToString();
  StatusOr<HfTokenizerFiles> hf = LoadHfTokenizer(dir.path());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  const Tokenizer& tok = *hf->tokenizer;
  EXPECT_EQ(tok.vocab_size(), c.vocab_size);
  EXPECT_EQ(hf->bos_token_id, c.bos);
  EXPECT_EQ(hf->add_bos_token, c.add_bos);
  EXPECT_THAT(hf->eos_token_ids, ElementsAre(c.eos));
  EXPECT_EQ(hf->chat_template_name, c.chat_template);
  EXPECT_TRUE(tok.is_special(c.special_id));
  bool listed = false;
  for (const auto& [text, id] : tok.special_tokens())
    listed |= text == c.special_text && id == c.special_id;
  EXPECT_TRUE(listed) << c.special_text;
  // Special-token text is plain text to Encode; every id is in range; decoding is lossless.
  for (const std::string& text :
       {std::string("the quick brown fox, 12345 times!\n\tnaïve 日本 🦙"),
        std::string(c.special_text), std::string("\xFF\xFE invalid \xC3"), std::string("")}) {
    const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/false);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, c.vocab_size);
      EXPECT_NE(id, c.special_id);
    }
    EXPECT_EQ(tok.Decode(ids), text);
  }
  // Merges apply: a common word is fewer tokens than bytes.
  EXPECT_LT(tok.Encode(" the", false).size(), 4u);
  const std::vector<int32_t> with_bos = tok.Encode("hi", /*add_bos=*/true);
  if (c.add_bos) {
    EXPECT_EQ(with_bos.front(), c.bos);
  }
}

TEST_P(SyntheticTokenizerTest, IsDeterministic) {
  const StyleCase& c = GetParam();
  TempDir a, b;
  ASSERT_TRUE(WriteSyntheticHfTokenizer(c.vocab_size, c.style, a.path()).ok());
  ASSERT_TRUE(WriteSyntheticHfTokenizer(c.vocab_size, c.style, b.path()).ok());
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_EQ(ReadFileBytes(a.File(file)), ReadFileBytes(b.File(file))) << file;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Styles, SyntheticTokenizerTest,
    ::testing::Values(
        StyleCase{HfTokenizerStyle::kSmolLM, 300, 1, false, 2, "chatml", "<|im_start|>", 1},
        StyleCase{HfTokenizerStyle::kSmolLM, 49152, 1, false, 2, "chatml", "<|im_end|>", 2},
        StyleCase{HfTokenizerStyle::kTinyLlama, 1000, 1, true, 2, "zephyr", "</s>", 2},
        StyleCase{HfTokenizerStyle::kLlama3, 128256, 128000, true, 128009, "llama-3",
                  "<|start_header_id|>", 128006},
        StyleCase{HfTokenizerStyle::kQwen2, 151936, -1, false, 151645, "qwen2.5", "<|im_start|>",
                  151644}));

TEST(SyntheticTokenizerTest, TooSmallVocabIsAnError) {
  TempDir dir;
  Status s = WriteSyntheticHfTokenizer(258, HfTokenizerStyle::kSmolLM, dir.path());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("vocab_size 258 is too small"));
  EXPECT_FALSE(WriteSyntheticHfTokenizer(128000, HfTokenizerStyle::kLlama3, dir.path()).ok());
  EXPECT_TRUE(ParseHfTokenizerStyle("qwen2").ok());
  EXPECT_FALSE(ParseHfTokenizerStyle("gpt-5").ok());
}

// --- Model-directory config files. ---

class HfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(WriteSyntheticHfTokenizer(300, HfTokenizerStyle::kSmolLM, dir_.path()).ok());
  }
  StatusOr<HfTokenizerFiles> Load() { return LoadHfTokenizer(dir_.path()); }
  TempDir dir_;
};

TEST_F(HfConfigTest, GenerationConfigEosListWins) {
  dir_.Write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [2, 0]})");
  auto hf = Load();
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_THAT(hf->eos_token_ids, ElementsAre(2, 0));
  EXPECT_EQ(hf->tokenizer->eos_id(), 2);
}

TEST_F(HfConfigTest, GenerationConfigEosInt) {
  dir_.Write("generation_config.json", R"({"eos_token_id": 0})");
  auto hf = Load();
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_THAT(hf->eos_token_ids, ElementsAre(0));
}

TEST_F(HfConfigTest, GenerationConfigEosOutOfRangeIsAnError) {
  dir_.Write("generation_config.json", R"({"eos_token_id": [2, 300]})");
  auto hf = Load();
  EXPECT_EQ(hf.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(hf.status().message(), HasSubstr("generation_config.json"));
  EXPECT_THAT(hf.status().message(), HasSubstr("eos_token_id 300"));
  dir_.Write("generation_config.json", R"({"eos_token_id": 1e40})");
  EXPECT_THAT(Load().status().message(), HasSubstr("eos_token_id must be an integer"));
  dir_.Write("generation_config.json", R"({"eos_token_id": 18446744073709551615})");
  EXPECT_THAT(Load().status().message(), HasSubstr("eos_token_id 18446744073709551615 is outside"));
}

TEST_F(HfConfigTest, AddBosTokenFalseAndObjectTokens) {
  dir_.Write("tokenizer_config.json", R"({"add_bos_token": false,
      "bos_token": {"__type": "AddedToken", "content": "<|endoftext|>"},
      "eos_token": {"content": "<|im_end|>"}})");
  auto hf = Load();
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_FALSE(hf->add_bos_token);
  EXPECT_FALSE(hf->tokenizer->add_bos_by_default());
  EXPECT_EQ(hf->bos_token_id, 0);
  EXPECT_THAT(hf->eos_token_ids, ElementsAre(2));
  EXPECT_EQ(hf->chat_template_name, "");
}

TEST_F(HfConfigTest, AddBosTokenTrue) {
  dir_.Write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<|im_start|>"})");
  auto hf = Load();
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_TRUE(hf->tokenizer->add_bos_by_default());
  EXPECT_EQ(hf->tokenizer->Encode("a", true).front(), 1);
}

TEST_F(HfConfigTest, MissingTokenizerConfigFallsBackToTokenizerJson) {
  std::filesystem::remove(dir_.File("tokenizer_config.json"));
  auto hf = Load();
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->bos_token_id, -1);  // ByteLevel post_processor: no BOS
  EXPECT_FALSE(hf->add_bos_token);
  EXPECT_THAT(hf->eos_token_ids, ElementsAre(0));  // the first known name: <|endoftext|>
  EXPECT_EQ(hf->chat_template_name, "");
}

TEST_F(HfConfigTest, ChatTemplateJinjaFileIsRead) {
  std::filesystem::remove(dir_.File("tokenizer_config.json"));
  dir_.Write("chat_template.jinja", "{{ '<|user|>' + eos_token + '<|assistant|>' }}");
  auto hf = Load();
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->chat_template_name, "zephyr");
}

TEST_F(HfConfigTest, MissingTokenizerJsonIsNotFound) {
  std::filesystem::remove(dir_.File("tokenizer.json"));
  auto hf = Load();
  EXPECT_EQ(hf.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(hf.status().message(), HasSubstr("tokenizer.json"));
}

TEST_F(HfConfigTest, UnknownBosTokenIsAnError) {
  dir_.Write("tokenizer_config.json", R"({"bos_token": "<nope>"})");
  auto hf = Load();
  EXPECT_EQ(hf.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(hf.status().message(), HasSubstr("tokenizer_config.json: bos_token '<nope>'"));
}

TEST_F(HfConfigTest, UnrecognisedChatTemplateIsReportedNotFatal) {
  // The tokenizer loads (serve's --chat-template may override the template); the reason is kept.
  dir_.Write("tokenizer_config.json", R"({"chat_template": "{{ messages[0]['content'] }}"})");
  auto hf = Load();
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->chat_template_name, "");
  EXPECT_THAT(hf->chat_template_error,
              HasSubstr("tokenizer_config.json: unrecognised chat_template"));
  EXPECT_THAT(hf->chat_template_error, HasSubstr("--chat-template"));
}

TEST_F(HfConfigTest, MalformedJsonIsAnError) {
  dir_.Write("tokenizer_config.json", "{not json");
  auto hf = Load();
  EXPECT_EQ(hf.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(hf.status().message(), HasSubstr("tokenizer_config.json: not valid JSON"));
}

// tokenizer.json content errors name the field.
void ExpectJsonError(const std::string& json, const std::string& expected) {
  TempDir dir;
  dir.Write("tokenizer.json", json);
  auto tok = LoadHfTokenizerJson(dir.File("tokenizer.json"));
  EXPECT_EQ(tok.status().code(), StatusCode::kInvalidArgument) << json;
  EXPECT_THAT(tok.status().message(), HasSubstr(expected));
}

TEST(HfTokenizerJsonTest, UnsupportedPartsNameTheField) {
  const std::string model =
      R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  const std::string decoder = R"("decoder": {"type": "Fuse"})";
  ExpectJsonError(R"({"model": {"type": "Unigram", "vocab": []}})",
                  "model.type 'Unigram' is not supported");
  ExpectJsonError("{" + model + R"(, "normalizer": {"type": "NFKC"}, )" + decoder + "}",
                  "normalizer.type 'NFKC' is not supported");
  ExpectJsonError(
      "{" + model +
          R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}]}, )" +
          decoder + "}",
      "pre_tokenizer.pretokenizers[0].type 'Whitespace' is not supported");
  ExpectJsonError("{" + model + R"(, "decoder": {"type": "WordPiece"}})",
                  "decoder.type 'WordPiece' is not supported");
  ExpectJsonError("{" + model + "}", "decoder is null");
  ExpectJsonError(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}, )" +
                      decoder + "}",
                  "model.merges[0] 'a b' has a part or a result that is not in the vocab");
  ExpectJsonError(
      "{" + model +
          R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"}, )" +
          decoder + "}",
      "pre_tokenizer Split pattern");
  ExpectJsonError(
      "{" + model +
          R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "MergedWithNext"}, )" +
          decoder + "}",
      "pre_tokenizer.behavior 'MergedWithNext' is not supported");
  ExpectJsonError("{" + model + R"(, "pre_tokenizer": {"type": "ByteLevel"}, )" + decoder + "}",
                  "byte-level vocabulary has no token for byte 0");
}

// Ids and Strip counts must be integers in range: a float like 1e40 used to reach nlohmann's
// get<int64_t> (undefined behaviour; the hf_tokenizer_json fuzz target found it).
TEST(HfTokenizerJsonTest, NonIntegerOrHugeNumbersNameTheField) {
  const std::string decoder = R"("decoder": {"type": "Fuse"})";
  auto with_vocab = [&](const std::string& vocab) {
    return R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}, )" + decoder +
           "}";
  };
  ExpectJsonError(with_vocab(R"({"a": 0, "b": 1.65111e+40})"),
                  "model.vocab['b'] must be an integer, got 1.65111e+40");
  ExpectJsonError(with_vocab(R"({"a": 0, "b": 1.0})"), "model.vocab['b'] must be an integer");
  ExpectJsonError(with_vocab(R"({"a": 0, "b": "1"})"), "model.vocab['b'] must be an integer");
  ExpectJsonError(with_vocab(R"({"a": 0, "b": -1})"),
                  "model.vocab['b'] = -1 is out of range [0, 2147483646]");
  ExpectJsonError(with_vocab(R"({"a": 0, "b": 18446744073709551615})"),
                  "model.vocab['b'] = 18446744073709551615 is out of range");
  ExpectJsonError(R"({"added_tokens": [{"id": -2e300, "content": "x"}], "model": {"type": "BPE",
                     "vocab": {"a": 0}, "merges": []}, )" +
                      decoder + "}",
                  "added_tokens: id must be an integer, got -2e+300");
  ExpectJsonError(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                     "decoder": {"type": "Strip", "content": " ", "start": 1e40, "stop": 0}})",
                  "decoder.start must be an integer, got 1e+40");
}

TEST(HfTokenizerJsonTest, AddedTokensAndMetaspace) {
  // A SentencePiece-style file with the Metaspace pre-tokenizer (prepend_scheme first), byte
  // fallback and a non-special added token that is matched before the model.
  TempDir dir;
  dir.Write("tokenizer.json", R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                     {"id": 1, "content": "<s>", "special": true},
                     {"id": 6, "content": "[X]", "special": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                      "split": false},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
                       {"Sequence": {"id": "A"}}]},
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"},
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true,
              "vocab": {"<unk>": 0, "<s>": 1, "▁": 2, "h": 3, "i": 4, "▁h": 5, "<0x21>": 7,
                        "▁hi": 8},
              "merges": ["▁ h", "▁h i"]}})");
  auto loaded = LoadHfTokenizerJson(dir.File("tokenizer.json"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Tokenizer& tok = **loaded;
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_TRUE(tok.add_bos_by_default());
  EXPECT_THAT(tok.Encode("hi hi!", true), ElementsAre(1, 8, 8, 7));
  // "[X]" is matched as its id; the span after it is not at the start: no ▁ prepended.
  EXPECT_THAT(tok.Encode("hi[X]hi", false), ElementsAre(8, 6, 3, 4));
  // "<s>" is special: plain text here ("▁" prepended at the start; no '<', 's' or '>' token and
  // no byte token for them: one fused <unk>).
  EXPECT_THAT(tok.Encode("<s>", false), ElementsAre(2, 0));
  EXPECT_THAT(tok.EncodeSpan("hi", /*at_start=*/false), ElementsAre(3, 4));
  EXPECT_EQ(tok.Decode({1, 8, 8, 7}), "hi hi!");
  EXPECT_EQ(tok.Decode({8, 6, 3, 4}), "hi[X]hi");
  ASSERT_EQ(tok.special_tokens().size(), 2u);
  EXPECT_EQ(tok.special_tokens()[1], (std::pair<std::string, int32_t>{"<s>", 1}));
}

// Published templates (tokenizer_config.json chat_template strings, JSON-decoded).
constexpr const char* kLlama2Jinja =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] "
    "== 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != "
    "false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + "
    "message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% "
    "endfor %}";
constexpr const char* kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
    "%}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
constexpr const char* kSmolLMJinja =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";
constexpr const char* kQwen2Jinja =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif "
    "%}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
constexpr const char* kQwen25Fragment =
    "{%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You "
    "are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}{{- '<|im_start|>' + message.role "
    "+ '\\n' + message.content + '<|im_end|>' + '\\n' }}";
constexpr const char* kTinyLlamaJinja =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' "
    "+ message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

// The distinctive lines of Llama 3.2's and Llama 3.1's (and 3.3's) templates.
constexpr const char* kLlama32Fragment =
    "{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set "
    "date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n        {%- set date_string = "
    "\"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n{{- "
    "\"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{{- \"Cutting Knowledge Date: "
    "December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{{- "
    "\"<|eot_id|>\" }}";
constexpr const char* kLlama31Fragment =
    "{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif "
    "%}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{%- if builtin_tools is "
    "defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n{{- "
    "\"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + "
    "\"\\n\\n\" }}\n{{- \"<|eot_id|>\" }}";

// The tool lines of Mistral-7B-Instruct-v0.3's template.
constexpr const char* kMistralV03Fragment =
    "{%- if tools is not none and (message == user_messages[-1]) %}\n    {{- \"[AVAILABLE_TOOLS] "
    "[\" }}\n    {%- endfor %}\n    {{- \"[/AVAILABLE_TOOLS]\" }}\n{%- endif %}\n{{- \"[INST] \" + "
    "message[\"content\"] + \"[/INST]\" }}\n{%- elif message.tool_calls is defined %}\n    {{- "
    "\"[TOOL_CALLS] [\" }}\n{%- elif message[\"role\"] == \"tool\" %}\n    {{- '[TOOL_RESULTS] "
    "{\"content\": ' + content|string + \", \" }}";

TEST(RecognizeHfChatTemplateTest, PublishedTemplates) {
  for (auto [jinja, name] : {std::pair{kLlama2Jinja, "llama-2"},
                             {kLlama3Jinja, "llama-3"},
                             {kLlama32Fragment, "llama-3.2"},
                             {kLlama31Fragment, "llama-3.1"},
                             {kSmolLMJinja, "chatml"},
                             {kQwen2Jinja, "qwen2"},
                             {kQwen25Fragment, "qwen2.5"},
                             {kTinyLlamaJinja, "zephyr"},
                             {kMistralV03Fragment, "mistral"}}) {
    StatusOr<std::string> got = RecognizeHfChatTemplate(jinja, "tokenizer_config.json");
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    EXPECT_EQ(*got, name);
  }
}

TEST(RecognizeHfChatTemplateTest, UnsupportedTemplatesAreErrors) {
  for (auto [jinja, why] :
       {std::pair{"{{ bos_token }}{% for m in messages %}{{ '[INST] ' + m['content'] + ' [/INST]' "
                  "}}{% endfor %}",
                  "Mistral"},
        {"{{- \"Cutting Knowledge Date: 2023\\n\" }}<|start_header_id|><|end_header_id|>"
         "<|eot_id|>",
         "unknown preamble"},
        {"<|im_start|>system\\nYou are a pirate.<|im_end|>", "unknown default system message"},
        {"{% for m in messages %}{{ m['content'] }}{% endfor %}", "no known markers"}}) {
    StatusOr<std::string> got = RecognizeHfChatTemplate(jinja, "dir/tokenizer_config.json");
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(got.status().message(), HasSubstr("dir/tokenizer_config.json: unrecognised"));
    EXPECT_THAT(got.status().message(), HasSubstr(why));
  }
}

}  // namespace
}  // namespace tinyserve
