// The llama2.c tokenizer.bin loader on arbitrary files. Input: a little-endian int32 vocab_size,
// then the file's bytes. A tokenizer that loads is exercised on a short text and a few ids.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "models/tokenizer/llama2c_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  if (size < sizeof(int32_t)) return 0;
  int32_t vocab_size = 0;
  std::memcpy(&vocab_size, data, sizeof(vocab_size));
  const std::string_view file(reinterpret_cast<const char*>(data) + 4, size - 4);
  const std::string& path = fuzz::WriteScratchFile(file);
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadLlama2cTokenizer(path, vocab_size);
  if (!tokenizer.ok()) {
    FUZZ_CHECK(tokenizer.status().message().find(path) != std::string::npos);
    return 0;
  }
  FUZZ_CHECK((*tokenizer)->vocab_size() == vocab_size);
  static const uint8_t kText[] = "Hello w\xc3\xb6rld <s>\xff\x01\x02\x03\x04\x05\x06\x07\x08";
  fuzz::ExerciseTokenizer(**tokenizer, kText, sizeof(kText) - 1);
  return 0;
}
