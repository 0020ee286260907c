#include "fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "base/utf8.h"
#include "models/tokenizer/gguf_tokenizer.h"
#include "models/tokenizer/llama2c_tokenizer.h"
#include "server/protocol/detokenizer.h"

namespace tinyserve::fuzz {
namespace {

std::unique_ptr<Tokenizer> CheckLoaded(StatusOr<std::unique_ptr<Tokenizer>> tokenizer) {
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "fuzz: cannot load the tokenizer: %s\n",
                 tokenizer.status().ToString().c_str());
    std::abort();
  }
  return std::move(tokenizer).value();
}

}  // namespace

void CheckFailed(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", file, line, condition);
  std::abort();
}

std::string SharedPath(std::string_view relative) {
  return std::string(TINYSERVE_SHARED_DIR) + "/" + std::string(relative);
}

const std::string& WriteScratchFile(std::string_view bytes) {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") +
                    "/tinyserve_fuzz_" + std::to_string(getpid()) + ".bin";
    static std::string to_remove;
    to_remove = p;
    std::atexit([] { std::remove(to_remove.c_str()); });
    return p;
  }();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  FUZZ_CHECK(out.good());
  return path;
}

const Tokenizer& LoadLlama2cTokenizerOnce(std::string_view relative_path, int32_t vocab_size) {
  static const std::unique_ptr<Tokenizer> tokenizer =
      CheckLoaded(LoadLlama2cTokenizer(SharedPath(relative_path), vocab_size));
  return *tokenizer;
}

const Tokenizer& LoadGgufTokenizerOnce(std::string_view relative_path) {
  static const std::unique_ptr<Tokenizer> tokenizer =
      CheckLoaded(LoadGgufTokenizer(SharedPath(relative_path)));
  return *tokenizer;
}

std::vector<int32_t> BytesToIds(const uint8_t* data, size_t size) {
  std::vector<int32_t> ids(size / sizeof(int32_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int32_t));
  return ids;
}

void ExerciseTokenizer(const Tokenizer& tokenizer, const uint8_t* data, size_t size) {
  const int32_t vocab = tokenizer.vocab_size();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool add_bos : {false, true}) {
    const std::vector<int32_t> ids = tokenizer.Encode(text, add_bos);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < vocab);
    if (add_bos && tokenizer.bos_id() >= 0)
      FUZZ_CHECK(!ids.empty() && ids[0] == tokenizer.bos_id());
    (void)tokenizer.Decode(ids);
  }

  // The same bytes as ids; ids outside the vocabulary are allowed and decode to nothing. Half the
  // time they are folded into the vocabulary so that most ids are real tokens.
  std::vector<int32_t> ids = BytesToIds(data, size);
  if (size % 2 == 1) {
    for (int32_t& id : ids) id = static_cast<int32_t>(static_cast<uint32_t>(id) % vocab);
  }
  const std::string decoded = tokenizer.Decode(ids);
  std::string pieces;
  int32_t prev = -1;
  for (int32_t id : ids) {
    pieces += tokenizer.DecodePiece(prev, id);
    prev = id;
  }
  FUZZ_CHECK(pieces == decoded);
  for (int32_t id : ids) (void)tokenizer.is_special(id);

  // Incremental detokenization after a "prompt" token (the first id, if any).
  const int32_t prompt_last = ids.empty() ? -1 : ids[0];
  protocol::IncrementalDetokenizer detok(tokenizer, prompt_last);
  std::string streamed;
  std::string expected_bytes;
  prev = prompt_last;
  for (size_t i = 1; i < ids.size(); ++i) {
    const std::string delta = detok.Add(ids[i]);
    FUZZ_CHECK(IsValidUtf8(delta));
    streamed += delta;
    expected_bytes += tokenizer.DecodePiece(prev, ids[i]);
    prev = ids[i];
  }
  const std::string tail = detok.Flush();
  FUZZ_CHECK(IsValidUtf8(tail));
  FUZZ_CHECK(!detok.has_pending());
  streamed += tail;
  FUZZ_CHECK(streamed == ToValidUtf8(expected_bytes));
}

}  // namespace tinyserve::fuzz
