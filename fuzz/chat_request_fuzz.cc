// POST /v1/chat/completions bodies: parse and validate arbitrary bytes, then render a valid
// request with every chat template and encode the prompt, as the route does.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/utf8.h"
#include "fuzz/fuzz_util.h"
#include "server/protocol/chat_request.h"
#include "server/protocol/chat_template.h"
#include "server/protocol/responses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  const Tokenizer& tokenizer = fuzz::LoadLlama2cTokenizerOnce("models/tok512.bin", 512);
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  protocol::ApiErrorOr<protocol::ChatRequest> request =
      protocol::ParseChatRequestBody(body, tokenizer.vocab_size());
  if (!request.ok()) {
    FUZZ_CHECK(request.error().http_status == 400);
    FUZZ_CHECK(!request.error().message.empty());
    // The body the server sends (messages may quote invalid UTF-8 from the input).
    FUZZ_CHECK(IsValidUtf8(protocol::DumpJson(request.error().ToJson())));
    return 0;
  }
  FUZZ_CHECK(!request->messages.empty());
  for (const std::string& name : protocol::KnownChatTemplates()) {
    StatusOr<protocol::RenderedChat> rendered =
        protocol::RenderChat(name, request->messages, request->add_generation_prompt);
    if (!rendered.ok()) {
      FUZZ_CHECK(rendered.status().code() == StatusCode::kInvalidArgument);
      continue;
    }
    std::vector<int32_t> ids = protocol::EncodeChatPrompt(name, *rendered, tokenizer);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
    if (ids.empty()) continue;
    if (protocol::TruncatePromptTokens(request->sampling, 4096, &ids)) continue;
    FUZZ_CHECK(!ids.empty());
    protocol::ApiErrorOr<SamplingParams> params =
        protocol::ToSamplingParams(request->sampling, static_cast<int32_t>(ids.size()), 4096);
    if (params.ok()) FUZZ_CHECK(params->Validate(tokenizer.vocab_size()).ok());
  }
  return 0;
}
