// Building the tokenizer a GGUF file describes (vocab-only files, or the metadata of a model file).
//
// tokenizer.ggml.model selects the algorithm:
//   "llama": SentencePieceBpe (scores + byte fallback, run.c's algorithm). tokenizer.ggml.tokens
//            store U+2581 for spaces; it is replaced by ' '. Only normal and user-defined tokens
//            match text; byte fallback uses the "<0xHH>" tokens, or <unk> when one is missing.
//   "gpt2":  ByteLevelBpe with tokenizer.ggml.merges and the GPT-2 pre-tokenizer regex.
// Other keys: tokenizer.ggml.scores (llama; default 0), tokenizer.ggml.token_type (1 normal,
// 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; default normal), bos/eos/unknown_token_id
// (llama defaults 1/2/0; gpt2 none), add_bos_token (llama default true, gpt2 false),
// add_space_prefix (llama, default true), tokenizer.ggml.pre (gpt2: only "default"/"gpt-2").
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "models/tokenizer/gguf.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

// Opens `path` and builds its tokenizer. Errors name the file and the missing or malformed key.
StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path);

// The same, from an already opened GGUF file (a model file's metadata).
StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& gguf);

}  // namespace tinyserve
