// The tokenizer.json loader on arbitrary files: every input loads or gives an error naming the
// file; a tokenizer that loads is exercised on a short text (encode, decode, detokenize).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "models/tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  const std::string& path =
      fuzz::WriteScratchFile(std::string_view(reinterpret_cast<const char*>(data), size));
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadHfTokenizerJson(path);
  if (!tokenizer.ok()) {
    FUZZ_CHECK(tokenizer.status().message().find(path) != std::string::npos);
    return 0;
  }
  static const uint8_t kText[] = "Hello w\xc3\xb6rld \xe2\x96\x81 <s>\xff";
  fuzz::ExerciseTokenizer(**tokenizer, kText, sizeof(kText) - 1);
  return 0;
}
