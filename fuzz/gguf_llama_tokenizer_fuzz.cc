// The GGUF "llama" (SentencePiece BPE) tokenizer of llama.cpp's vocab test file: encode arbitrary
// bytes, decode arbitrary ids, incremental detokenization (fuzz_util.h lists the properties).
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tinyserve::Tokenizer& tokenizer =
      tinyserve::fuzz::LoadGgufTokenizerOnce("models/llamacpp_vocab/ggml-vocab-llama-spm.gguf");
  tinyserve::fuzz::ExerciseTokenizer(tokenizer, data, size);
  return 0;
}
