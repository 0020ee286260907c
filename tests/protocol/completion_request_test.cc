#include "server/protocol/completion_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/protocol/fake_tokenizer.h"

namespace tinyserve::protocol {
namespace {

constexpr int32_t kCompletionVocab = 512;

CompletionRequest ParseCompletionOk(const std::string& body) {
  auto r = ParseCompletionRequestBody(body, kCompletionVocab);
  EXPECT_TRUE(r.ok()) << body << " -> " << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : CompletionRequest{};
}

TEST(CompletionRequestTest, Defaults) {
  CompletionRequest req = ParseCompletionOk(R"({"model": "m", "prompt": "Hello"})");
  EXPECT_EQ(req.model, "m");
  ASSERT_EQ(req.prompts.size(), 1u);
  EXPECT_TRUE(req.prompts[0].is_text);
  EXPECT_EQ(req.prompts[0].text, "Hello");
  EXPECT_FALSE(req.echo);
  const SamplingFields& s = req.sampling;
  EXPECT_EQ(s.max_tokens, 16);
  EXPECT_EQ(s.temperature, 1.0f);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_EQ(s.min_p, 0.0f);
  EXPECT_EQ(s.presence_penalty, 0.0f);
  EXPECT_EQ(s.frequency_penalty, 0.0f);
  EXPECT_EQ(s.repetition_penalty, 1.0f);
  EXPECT_EQ(s.n, 1);
  EXPECT_FALSE(s.seed.has_value());
  EXPECT_TRUE(s.stop.empty());
  EXPECT_TRUE(s.stop_token_ids.empty());
  EXPECT_FALSE(s.include_stop_str_in_output);
  EXPECT_FALSE(s.ignore_eos);
  EXPECT_EQ(s.min_tokens, 0);
  EXPECT_TRUE(s.skip_special_tokens);
  EXPECT_EQ(s.priority, 0);
  EXPECT_FALSE(s.stream);
  EXPECT_FALSE(s.stream_options.has_value());
  EXPECT_FALSE(s.include_usage());
  EXPECT_FALSE(s.logprobs.has_value());
}

TEST(CompletionRequestTest, ModelIsOptional) {
  EXPECT_FALSE(ParseCompletionOk(R"({"prompt": "x"})").model.has_value());
}

TEST(CompletionRequestTest, NullMeansDefaultAndNullMaxTokensMeansRestOfContext) {
  CompletionRequest req =
      ParseCompletionOk(R"({"prompt": "x", "temperature": null, "n": null, "max_tokens": null})");
  EXPECT_EQ(req.sampling.temperature, 1.0f);
  EXPECT_EQ(req.sampling.n, 1);
  EXPECT_FALSE(req.sampling.max_tokens.has_value());
}

TEST(CompletionRequestTest, MaxTokensZeroWithEchoIsPureScoring) {
  // vLLM: the prompt alone comes back; the engine is asked for one token nobody sees.
  CompletionRequest req =
      ParseCompletionOk(R"({"prompt": "x", "max_tokens": 0, "echo": true, "logprobs": 2})");
  EXPECT_TRUE(req.echo);
  EXPECT_TRUE(req.echo_only);
  EXPECT_EQ(req.sampling.max_tokens, 0);
  EXPECT_EQ(req.sampling.logprobs, 2);
  EXPECT_FALSE(ParseCompletionOk(R"({"prompt": "x", "max_tokens": 1, "echo": true})").echo_only);
  EXPECT_FALSE(ParseCompletionOk(R"({"prompt": "x", "echo": true})").echo_only);
}

TEST(CompletionRequestTest, AllFieldsParsed) {
  CompletionRequest req = ParseCompletionOk(R"({
    "model": "m", "prompt": "x", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 40,
    "min_p": 0.1, "n": 3, "stop": ["a", "bc"], "stop_token_ids": [2, 5], "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": 5, "echo": true, "seed": -1,
    "ignore_eos": true, "min_tokens": 2, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.2, "priority": -3, "user": "u", "best_of": 1, "whatever": {}})");
  const SamplingFields& s = req.sampling;
  EXPECT_EQ(s.max_tokens, 7);
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, 0.5f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{2, 5}));
  EXPECT_TRUE(s.stream);
  EXPECT_TRUE(s.include_usage());
  EXPECT_EQ(s.logprobs, 5);
  EXPECT_TRUE(req.echo);
  EXPECT_EQ(s.seed, UINT64_MAX);
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.min_tokens, 2);
  EXPECT_EQ(s.presence_penalty, 0.5f);
  EXPECT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.2f);
  EXPECT_EQ(s.priority, -3);
}

TEST(CompletionRequestTest, StopAsAString) {
  EXPECT_EQ(ParseCompletionOk(R"({"prompt": "x", "stop": "\n"})").sampling.stop,
            std::vector<std::string>{"\n"});
}

TEST(CompletionRequestTest, PromptForms) {
  CompletionRequest one = ParseCompletionOk(R"({"prompt": "abc"})");
  EXPECT_EQ(one.prompts, (std::vector<CompletionPrompt>{{true, "abc", {}}}));
  CompletionRequest strings = ParseCompletionOk(R"({"prompt": ["a", "b"]})");
  EXPECT_EQ(strings.prompts, (std::vector<CompletionPrompt>{{true, "a", {}}, {true, "b", {}}}));
  CompletionRequest ids = ParseCompletionOk(R"({"prompt": [1, 2, 511]})");
  EXPECT_EQ(ids.prompts, (std::vector<CompletionPrompt>{{false, "", {1, 2, 511}}}));
  CompletionRequest lists = ParseCompletionOk(R"({"prompt": [[1, 2], [3]]})");
  EXPECT_EQ(lists.prompts, (std::vector<CompletionPrompt>{{false, "", {1, 2}}, {false, "", {3}}}));
}

struct CompletionBadCase {
  const char* body;
  const char* param;    // nullptr: no param
  const char* message;  // exact message, or nullptr to skip
};

void ExpectBad(const CompletionBadCase& c) {
  auto r = ParseCompletionRequestBody(c.body, kCompletionVocab);
  ASSERT_FALSE(r.ok()) << c.body;
  EXPECT_EQ(r.error().http_status, 400) << c.body;
  EXPECT_EQ(r.error().type, "BadRequestError") << c.body;
  if (c.param == nullptr) {
    EXPECT_FALSE(r.error().param.has_value()) << c.body;
  } else {
    EXPECT_EQ(r.error().param, std::string(c.param)) << c.body;
  }
  if (c.message != nullptr) {
    EXPECT_EQ(r.error().message, c.message) << c.body;
  }
}

TEST(CompletionRequestTest, BadInputsGive400NamingTheField) {
  const CompletionBadCase cases[] = {
      {"{", nullptr, nullptr},
      {"[1, 2]", nullptr, "The request body must be a JSON object"},
      {R"({})", "prompt", "`prompt` is required"},
      {R"({"prompt": null})", "prompt", "`prompt` is required"},
      {R"({"prompt": ""})", "prompt", "`prompt` must not be empty"},
      {R"({"prompt": []})", "prompt", "`prompt` must not be empty"},
      {R"({"prompt": [[]]})", "prompt", "`prompt` must not be empty"},
      {R"({"prompt": ["a", ""]})", "prompt", "`prompt` must not contain an empty string"},
      {R"({"prompt": 5})", "prompt", nullptr},
      {R"({"prompt": {"a": 1}})", "prompt", nullptr},
      {R"({"prompt": ["a", 1]})", "prompt", nullptr},
      {R"({"prompt": [1, "a"]})", "prompt", nullptr},
      {R"({"prompt": [[1], 2]})", "prompt", nullptr},
      {R"({"prompt": [1.5]})", "prompt", nullptr},
      {R"({"prompt": [512]})", "prompt", "Token id 512 is out of vocabulary"},
      {R"({"prompt": [[1], [-1]]})", "prompt", "Token id -1 is out of vocabulary"},
      {R"({"prompt": "x", "model": 3})", "model", "`model` must be a string, got an integer"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens",
       "max_tokens must be at least 1, got 0."},
      {R"({"prompt": "x", "max_tokens": 0, "echo": false})", "max_tokens",
       "max_tokens must be at least 1, got 0."},
      {R"({"prompt": "x", "max_tokens": -1, "echo": true})", "max_tokens",
       "max_tokens must be at least 1, got -1."},
      {R"({"prompt": "x", "max_tokens": -5})", "max_tokens", nullptr},
      {R"({"prompt": "x", "max_tokens": "16"})", "max_tokens",
       "`max_tokens` must be an integer, got a string"},
      {R"({"prompt": "x", "max_tokens": 1e12})", "max_tokens",
       "`max_tokens` must be a 32-bit integer"},
      {R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens", nullptr},
      {R"({"prompt": "x", "temperature": -0.5})", "temperature",
       "temperature must be non-negative, got -0.5."},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature",
       "`temperature` must be a number, got a string"},
      {R"({"prompt": "x", "temperature": 1e300})", "temperature",
       "`temperature` must be a finite number"},
      {R"({"prompt": "x", "top_p": 0})", "top_p", "top_p must be in (0, 1], got 0.0."},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p", "top_p must be in (0, 1], got 1.5."},
      {R"({"prompt": "x", "top_k": -2})", "top_k", nullptr},
      {R"({"prompt": "x", "min_p": 2})", "min_p", "min_p must be in [0, 1], got 2.0."},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty", nullptr},
      {R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty", nullptr},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty",
       "repetition_penalty must be greater than zero, got 0.0."},
      {R"({"prompt": "x", "n": 0})", "n", "n must be at least 1, got 0."},
      {R"({"prompt": "x", "n": 1000})", "n", "n must be at most 128, got 1000."},
      {R"({"prompt": "x", "n": true})", "n", nullptr},
      {R"({"prompt": "x", "stop": 3})", "stop", nullptr},
      {R"({"prompt": "x", "stop": ["a", 3]})", "stop", nullptr},
      {R"({"prompt": "x", "stop": ""})", "stop", "stop cannot contain an empty string."},
      {R"({"prompt": "x", "stop": ["a", ""]})", "stop", nullptr},
      {R"({"prompt": "x", "stop_token_ids": 2})", "stop_token_ids", nullptr},
      {R"({"prompt": "x", "stop_token_ids": ["2"]})", "stop_token_ids", nullptr},
      {R"({"prompt": "x", "stop_token_ids": [9999]})", "stop_token_ids",
       "Token id 9999 is out of vocabulary"},
      {R"({"prompt": "x", "stream": "yes"})", "stream", "`stream` must be a boolean, got a string"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options",
       "Stream options can only be defined when `stream=True`."},
      {R"({"prompt": "x", "stream": true, "stream_options": 1})", "stream_options", nullptr},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage",
       "`stream_options.include_usage` must be a boolean, got an integer"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs",
       "Requested sample logprobs of 21, which is greater than max allowed: 20"},
      {R"({"prompt": "x", "logprobs": -1})", "logprobs", "`logprobs` must be a positive value."},
      {R"({"prompt": "x", "logprobs": true})", "logprobs", nullptr},
      {R"({"prompt": "x", "echo": 1})", "echo", nullptr},
      {R"({"prompt": "x", "suffix": "end"})", "suffix", "suffix is not currently supported"},
      {R"({"prompt": "x", "truncate_prompt_tokens": 0})", "truncate_prompt_tokens",
       "truncate_prompt_tokens must be -1 (the model's context) or at least 1, got 0."},
      {R"({"prompt": "x", "truncate_prompt_tokens": -2})", "truncate_prompt_tokens", nullptr},
      {R"({"prompt": "x", "truncate_prompt_tokens": "3"})", "truncate_prompt_tokens", nullptr},
      {R"({"prompt": "x", "allowed_token_ids": []})", "allowed_token_ids",
       "allowed_token_ids is not None and empty!"},
      {R"({"prompt": "x", "allowed_token_ids": [1, 512]})", "allowed_token_ids",
       "allowed_token_ids contains out-of-vocab token id!"},
      {R"({"prompt": "x", "allowed_token_ids": ["1"]})", "allowed_token_ids", nullptr},
      {R"({"prompt": "x", "allowed_token_ids": 1})", "allowed_token_ids", nullptr},
      {R"({"prompt": "x", "use_beam_search": true})", "use_beam_search",
       "Beam search is not supported by this server."},
      {R"({"prompt": "x", "best_of": 3})", "best_of",
       "best_of is not supported by this server; use n."},
      {R"({"prompt": "x", "best_of": "1"})", "best_of",
       "`best_of` must be an integer, got a string"},
      {R"({"prompt": "x", "use_beam_search": 1})", "use_beam_search",
       "`use_beam_search` must be a boolean, got an integer"},
      {R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format.type", nullptr},
      {R"({"prompt": "x", "response_format": "text"})", "response_format",
       "`response_format` must be an object, got a string."},
      {R"({"prompt": "x", "guided_choice": []})", "guided_choice",
       "`guided_choice` must be a non-empty array of strings, got an empty array."},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias",
       "`logit_bias` must be an object, got an array"},
      {R"({"prompt": "x", "logit_bias": {"a": 1}})", "logit_bias",
       "Found token_id `a` in logit_bias but token_id must be an integer or string representing an "
       "integer"},
      {R"({"prompt": "x", "logit_bias": {"1.5": 1}})", "logit_bias", nullptr},
      {R"({"prompt": "x", "logit_bias": {"": 1}})", "logit_bias", nullptr},
      {R"({"prompt": "x", "logit_bias": {"5": "up"}})", "logit_bias",
       "`logit_bias` values must be numbers, got a string for 5"},
      {R"({"prompt": "x", "logit_bias": {"512": 1, "3": 1, "-1": 2}})", "logit_bias",
       "token_id(s) [-1, 512] in logit_bias contain out-of-vocab token ids. Vocabulary size: 512"},
      {R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs",
       "Requested prompt logprobs of 21, which is greater than max allowed: 20"},
      {R"({"prompt": "x", "prompt_logprobs": -1})", "prompt_logprobs",  // -1: all 512 tokens
       "Requested prompt logprobs of 512, which is greater than max allowed: 20"},
      {R"({"prompt": "x", "prompt_logprobs": -2})", "prompt_logprobs",
       "`prompt_logprobs` must be a positive value or -1."},
      {R"({"prompt": "x", "prompt_logprobs": "1"})", "prompt_logprobs", nullptr},
      {R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})", "prompt_logprobs",
       "`prompt_logprobs` are not available when `stream=True`."},
      {R"({"prompt": "x", "seed": "1"})", "seed", "`seed` must be an integer, got a string"},
      {R"({"prompt": "x", "seed": 1.5})", "seed", nullptr},
      {R"({"prompt": "x", "ignore_eos": "no"})", "ignore_eos", nullptr},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens",
       "min_tokens must be greater than or equal to 0, got -1."},
      {R"({"prompt": "x", "priority": "high"})", "priority", nullptr},
      {R"({"prompt": "x", "user": 5})", "user", nullptr},
      {R"({"prompt": "x", "include_stop_str_in_output": 0})", "include_stop_str_in_output",
       nullptr},
  };
  for (const CompletionBadCase& c : cases) ExpectBad(c);
}

TEST(CompletionRequestTest, TokenizePromptAddsBosForTextOnly) {
  // Exercised against a real tokenizer in chat_template_test; here the ids pass through.
  CompletionPrompt ids{false, "", {5, 6}};
  struct NoTokenizer : Tokenizer {
    std::vector<int32_t> Encode(std::string_view, bool add_bos) const override {
      return add_bos ? std::vector<int32_t>{1, 9} : std::vector<int32_t>{9};
    }
    std::string DecodePiece(int32_t, int32_t) const override { return ""; }
    int32_t vocab_size() const override { return 10; }
    int32_t bos_id() const override { return 1; }
    int32_t eos_id() const override { return 2; }
    bool add_bos_by_default() const override { return true; }
    bool is_special(int32_t id) const override { return id < 3; }
  } tok;
  EXPECT_EQ(TokenizePrompt(ids, tok), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(TokenizePrompt({true, "x", {}}, tok), (std::vector<int32_t>{1, 9}));
}

TEST(CompletionRequestTest, EchoText) {
  FakeTokenizer tok({"Once", " upon", "\xC3"});
  EXPECT_EQ(EchoText({true, "as given", {}}, tok), "as given");
  EXPECT_EQ(EchoText({false, "", {1, tok.Id("Once"), tok.Id(" upon"), tok.Id("\xC3")}}, tok),
            "Once upon\xEF\xBF\xBD");
}

TEST(CompletionRequestTest, SeedAcceptsIntegralFloats) {
  EXPECT_EQ(ParseCompletionOk(R"({"prompt": "x", "seed": 7.0})").sampling.seed, 7u);
  EXPECT_EQ(ParseCompletionOk(R"({"prompt": "x", "seed": 18446744073709551615})").sampling.seed,
            UINT64_MAX);
}

TEST(CompletionRequestTest, HostileBodiesGive400WithoutCrashing) {
  const std::string deep_open(100000, '[');
  auto r = ParseCompletionRequestBody(deep_open, kCompletionVocab);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 400);
  // Deeper than kMaxJsonDepth: refused before parsing (issue 16); below it, by the prompt parser.
  const std::string deep_prompt =
      R"({"prompt": )" + std::string(20000, '[') + std::string(20000, ']') + "}";
  auto d = ParseCompletionRequestBody(deep_prompt, kCompletionVocab);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("limit of 64 levels"), std::string::npos) << d.error().message;
  const std::string nested_prompt =
      R"({"prompt": )" + std::string(60, '[') + std::string(60, ']') + "}";
  auto n = ParseCompletionRequestBody(nested_prompt, kCompletionVocab);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().param, "prompt");
  for (const char* body : {R"({"prompt": "x", "max_tokens": 1e400})", "{\"prompt\": \"\xC3\"}",
                           R"({"prompt": "x", "temperature": NaN})", "\xEF\xBB\xBF{}", "{} {}"}) {
    auto e = ParseCompletionRequestBody(body, kCompletionVocab);
    ASSERT_FALSE(e.ok()) << body;
    EXPECT_EQ(e.error().http_status, 400) << body;
  }
}

// ---- ToSamplingParams: the context check and the engine's params ----------------------------

TEST(ToSamplingParamsTest, CopiesEveryField) {
  CompletionRequest req = ParseCompletionOk(R"({"prompt": "x", "max_tokens": 7, "temperature": 0.5,
    "top_p": 0.9, "top_k": 5, "min_p": 0.05, "seed": 42, "stop_token_ids": [3], "ignore_eos": true,
    "min_tokens": 2, "presence_penalty": 0.1, "frequency_penalty": 0.2, "repetition_penalty": 1.1,
    "logprobs": 3, "prompt_logprobs": 4})");
  auto p = ToSamplingParams(req.sampling, 10, 100);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->max_tokens, 7);
  EXPECT_EQ(p->temperature, 0.5f);
  EXPECT_FLOAT_EQ(p->top_p, 0.9f);
  EXPECT_EQ(p->top_k, 5);
  EXPECT_FLOAT_EQ(p->min_p, 0.05f);
  EXPECT_EQ(p->seed, 42u);
  EXPECT_EQ(p->stop_token_ids, std::vector<int32_t>{3});
  EXPECT_TRUE(p->ignore_eos);
  EXPECT_EQ(p->min_tokens, 2);
  EXPECT_FLOAT_EQ(p->presence_penalty, 0.1f);
  EXPECT_FLOAT_EQ(p->frequency_penalty, 0.2f);
  EXPECT_FLOAT_EQ(p->repetition_penalty, 1.1f);
  EXPECT_EQ(p->logprobs, 3);
  EXPECT_EQ(p->prompt_logprobs, 4);
  // The harmless forms of refused fields pass.
  EXPECT_TRUE(ParseCompletionRequestBody(R"({"prompt": "x", "use_beam_search": false, "best_of": 1,
    "response_format": {"type": "text"}, "suffix": null, "guided_json": null})",
                                         512)
                  .ok());
  // logit_bias: clamped to [-100, 100], sorted by id; "07" and "+7" are id 7, and the key that
  // sorts last ("07" > "+7") wins, whatever the body's order.
  CompletionRequest biased = ParseCompletionOk(
      R"({"prompt": "x", "logit_bias": {"8": -3, "07": 2.5, "5": 1e300, "+7": 0.5, "6": -1000}})");
  auto b = ToSamplingParams(biased.sampling, 10, 100);
  ASSERT_TRUE(b.ok());
  using Bias = std::vector<std::pair<int32_t, float>>;
  EXPECT_EQ(b->logit_bias, (Bias{{5, 100.0f}, {6, -100.0f}, {7, 2.5f}, {8, -3.0f}}));
  auto allowed = ToSamplingParams(
      ParseCompletionOk(R"({"prompt": "x", "allowed_token_ids": [4, 2]})").sampling, 10, 100);
  ASSERT_TRUE(allowed.ok());
  EXPECT_EQ(allowed->allowed_token_ids, (std::vector<int32_t>{4, 2}));
  EXPECT_EQ(ParseCompletionOk(R"({"prompt": "x", "prompt_logprobs": 0, "stream": true})")
                .sampling.prompt_logprobs,
            0);  // 0 is allowed with stream (vLLM), and unused there
}

TEST(ToSamplingParamsTest, OverContextLengthUsesVllmMessage) {
  SamplingFields f;
  f.max_tokens = 20;
  auto p = ToSamplingParams(f, 90, 100);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().http_status, 400);
  EXPECT_EQ(p.error().param, "max_tokens");
  EXPECT_EQ(p.error().message,
            "This model's maximum context length is 100 tokens. However, you requested 110 "
            "tokens (90 in the messages, 20 in the completion). Please reduce the length of the "
            "messages or completion.");
  f.max_tokens = 10;
  ASSERT_TRUE(ToSamplingParams(f, 90, 100).ok());  // exactly full is allowed
}

TEST(ToSamplingParamsTest, NullMaxTokensFillsTheContext) {
  SamplingFields f;
  auto p = ToSamplingParams(f, 30, 100);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->max_tokens, 70);
  auto full = ToSamplingParams(f, 100, 100);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().param, "messages");
  EXPECT_EQ(full.error().message,
            "This model's maximum context length is 100 tokens. However, your request has 100 "
            "input tokens. Please reduce the length of the input messages.");
}

TEST(ToSamplingParamsTest, EchoScoringIsCheckedAsZeroTokensAndAsksTheEngineForOne) {
  SamplingFields f =
      ParseCompletionOk(R"({"prompt": "x", "max_tokens": 0, "echo": true})").sampling;
  auto p = ToSamplingParams(f, 99, 100);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->max_tokens, 1);
  auto full = ToSamplingParams(f, 100, 100);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().param, "prompt");
  EXPECT_EQ(full.error().message,
            "This model's maximum context length is 100 tokens. However, your prompt has 100 "
            "tokens, and scoring a prompt (echo with max_tokens 0) needs it to be at most 99 "
            "tokens.");
  f.min_tokens = 2;
  auto min = ToSamplingParams(f, 10, 100);
  ASSERT_FALSE(min.ok());
  EXPECT_EQ(min.error().param, "min_tokens");
  EXPECT_EQ(min.error().message, "min_tokens must be less than or equal to max_tokens=0, got 2.");
}

TEST(TruncatePromptTokensTest, KeepsTheLastKTokens) {
  std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  SamplingFields f;
  ASSERT_FALSE(TruncatePromptTokens(f, 100, &ids).has_value());  // not set: unchanged
  EXPECT_EQ(ids.size(), 5u);
  f.truncate_prompt_tokens = 3;
  ASSERT_FALSE(TruncatePromptTokens(f, 100, &ids).has_value());
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 4, 5}));
  f.truncate_prompt_tokens = 10;  // longer than the prompt: unchanged
  ASSERT_FALSE(TruncatePromptTokens(f, 100, &ids).has_value());
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 4, 5}));
  f.truncate_prompt_tokens = -1;  // the model's context
  ASSERT_FALSE(TruncatePromptTokens(f, 2, &ids).has_value());
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 5}));
  f.truncate_prompt_tokens = 101;
  std::optional<ApiError> e = TruncatePromptTokens(f, 100, &ids);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "truncate_prompt_tokens");
  EXPECT_EQ(e->message,
            "truncate_prompt_tokens value (101) is greater than max_model_len (100). Please, "
            "select a smaller truncation size.");
}

TEST(ToSamplingParamsTest, MinTokensOverMaxTokens) {
  SamplingFields f;
  f.max_tokens = 4;
  f.min_tokens = 5;
  auto p = ToSamplingParams(f, 1, 100);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().param, "min_tokens");
  EXPECT_EQ(p.error().message, "min_tokens must be less than or equal to max_tokens=4, got 5.");
}

}  // namespace
}  // namespace tinyserve::protocol
