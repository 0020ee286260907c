// Loading llama2.c's tokenizer.bin format (tok512.bin, the Llama-2 tokenizer.bin).
//
// File: uint32 max_token_length, then exactly vocab_size records {float32 score, int32 len, len
// bytes}. The vocabulary size is not stored; it comes from the model header (or is 32000 for the
// Llama-2 file). Layout: 0 <unk>, 1 BOS, 2 EOS, 3..258 byte fallback "<0x00>".."<0xFF>" (byte b is
// id b + 3), then pieces with ' ' for SentencePiece's U+2581. Encoding and decoding follow run.c
// (see SentencePieceBpe); BOS is added by default.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "models/tokenizer/sentencepiece_bpe.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

// Loads `path` holding `vocab_size` tokens. Errors (NotFound, InvalidArgument) name the file and
// the problem: missing file, truncated record, negative length, length > max_token_length,
// trailing bytes, or a vocab_size too small for the 3 special + 256 byte tokens.
StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path,
                                                          int32_t vocab_size);

// The vocabulary LoadLlama2cTokenizer builds its tokenizer from (pieces with ' ' for U+2581,
// scores, kinds: 0 unknown, 1 and 2 control, "<0xHH>" byte pieces; byte_ids b + 3; match_all_pieces
// true), for writers that convert it (WriteHfTokenizerFromLlama2c). Same errors.
StatusOr<SentencePieceVocab> ReadLlama2cVocab(const std::string& path, int32_t vocab_size);

}  // namespace tinyserve
