// Shared helpers for the libFuzzer targets in fuzz/ (see fuzz/README.md).
//
// Each target defines LLVMFuzzerTestOneInput. A property that fails is reported through
// FUZZ_CHECK, which prints the condition and aborts, so libFuzzer records the input as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/tokenizer.h"

#define FUZZ_CHECK(cond)                                                    \
  do {                                                                      \
    if (!(cond)) ::tinyserve::fuzz::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace tinyserve::fuzz {

[[noreturn]] void CheckFailed(const char* condition, const char* file, int line);

// A path under TINYSERVE_SHARED_DIR (the read-only models and test data).
std::string SharedPath(std::string_view relative);

// Writes `bytes` to this process' scratch file (under $TMPDIR, /tmp by default; one per process,
// overwritten by each call, removed at exit) and returns its path. For loaders that take a path.
const std::string& WriteScratchFile(std::string_view bytes);

// Loads a tokenizer once for the whole run; aborts with the loader's message if it fails.
const Tokenizer& LoadLlama2cTokenizerOnce(std::string_view relative_path, int32_t vocab_size);
const Tokenizer& LoadGgufTokenizerOnce(std::string_view relative_path);

// `data` read as little-endian int32 token ids (a trailing partial id is dropped).
std::vector<int32_t> BytesToIds(const uint8_t* data, size_t size);

// Runs everything a tokenizer offers on `data` and checks the contracts of tokenizer.h and
// server/protocol/detokenizer.h: Encode of the bytes (ids in range, BOS first iff asked), Decode
// and DecodePiece of the bytes read as ids (Decode is the concatenation of the pieces), and the
// IncrementalDetokenizer (its deltas are valid UTF-8 and join to ToValidUtf8 of the decoding).
void ExerciseTokenizer(const Tokenizer& tokenizer, const uint8_t* data, size_t size);

}  // namespace tinyserve::fuzz
