// The llama2.c tok512 tokenizer: encode arbitrary bytes, decode arbitrary ids, stream them
// through the incremental detokenizer (fuzz_util.h lists the properties checked).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tinyserve::Tokenizer& tokenizer =
      tinyserve::fuzz::LoadLlama2cTokenizerOnce("models/tok512.bin", 512);
  tinyserve::fuzz::ExerciseTokenizer(tokenizer, data, size);
  return 0;
}
