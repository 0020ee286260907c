// The GGUF reader on arbitrary files; a file that parses is then read through every getter and
// handed to the GGUF tokenizer builder, and a tokenizer that builds is exercised on a short text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "models/tokenizer/gguf.h"
#include "models/tokenizer/gguf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tinyserve;
  StatusOr<GgufFile> gguf = GgufFile::Parse(
      MappedFile::FromBytes("fuzz.gguf", std::string(reinterpret_cast<const char*>(data), size)));
  if (!gguf.ok()) {
    FUZZ_CHECK(gguf.status().message().find("fuzz.gguf") != std::string::npos);
    return 0;
  }
  for (const std::string& key : gguf->keys()) {
    FUZZ_CHECK(gguf->Find(key) != nullptr);
    (void)gguf->GetString(key);
    (void)gguf->GetUint(key);
    (void)gguf->GetInt(key);
    (void)gguf->GetFloat(key);
    (void)gguf->GetBool(key);
    (void)gguf->GetStringArray(key);
    (void)gguf->GetIntArray(key);
    (void)gguf->GetFloatArray(key);
  }
  for (const GgufTensorInfo& tensor : gguf->tensors()) {
    FUZZ_CHECK(gguf->FindTensor(tensor.name) != nullptr);
    if (tensor.num_bytes > 0) {
      // The tensor's bytes lie inside the file.
      FUZZ_CHECK(gguf->data_offset() + tensor.offset + tensor.num_bytes <= size);
      const uint8_t* bytes = gguf->tensor_data(tensor);
      volatile uint8_t sink = bytes[0] ^ bytes[tensor.num_bytes - 1];
      (void)sink;
    }
  }
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadGgufTokenizer(*gguf);
  if (tokenizer.ok()) {
    static const uint8_t kText[] = "Hello w\xc3\xb6rld \xe2\x96\x81 <s>\xff";
    fuzz::ExerciseTokenizer(**tokenizer, kText, sizeof(kText) - 1);
  }
  return 0;
}
