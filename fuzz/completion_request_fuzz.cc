// POST /v1/completions bodies: parse and validate arbitrary bytes, then run what the route does
// with a valid request (tokenize each prompt, echo text, the engine's SamplingParams).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/utf8.h"
#include "fuzz/fuzz_util.h"
#include "server/protocol/completion_request.h"
#include "server/protocol/responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  const Tokenizer& tokenizer = fuzz::LoadLlama2cTokenizerOnce("models/tok512.bin", 512);
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  protocol::ApiErrorOr<protocol::CompletionRequest> request =
      protocol::ParseCompletionRequestBody(body, tokenizer.vocab_size());
  if (!request.ok()) {
    FUZZ_CHECK(request.error().http_status == 400);
    FUZZ_CHECK(!request.error().message.empty());
    // The body the server sends (messages may quote invalid UTF-8 from the input).
    FUZZ_CHECK(IsValidUtf8(protocol::DumpJson(request.error().ToJson())));
    return 0;
  }
  FUZZ_CHECK(!request->prompts.empty());
  for (const protocol::CompletionPrompt& prompt : request->prompts) {
    if (!prompt.is_text) {
      FUZZ_CHECK(!prompt.token_ids.empty());
      for (int32_t id : prompt.token_ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
    }
    const std::vector<int32_t> tokenized = protocol::TokenizePrompt(prompt, tokenizer);
    (void)protocol::EchoText(prompt, tokenizer);
    if (tokenized.empty()) continue;
    for (int32_t max_model_len : {1, 256}) {
      std::vector<int32_t> ids = tokenized;
      if (protocol::TruncatePromptTokens(request->sampling, max_model_len, &ids)) continue;
      FUZZ_CHECK(!ids.empty() && ids.size() <= tokenized.size());
      if (request->sampling.truncate_prompt_tokens) {
        FUZZ_CHECK(ids.size() <= static_cast<size_t>(max_model_len));
      }
      protocol::ApiErrorOr<SamplingParams> params = protocol::ToSamplingParams(
          request->sampling, static_cast<int32_t>(ids.size()), max_model_len);
      if (params.ok()) FUZZ_CHECK(params->Validate(tokenizer.vocab_size()).ok());
    }
  }
  return 0;
}
