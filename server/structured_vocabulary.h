// The structured-output Vocabulary (structured/grammar.h) of a tokenizer, built once at server
// start: what each token id appends to the output text, and which ids end a request.
//
// token_bytes[id] = tokenizer.DecodePiece(prev, id) with `prev` an ordinary token (the first id
// that is neither special nor BOS), so SentencePiece's leading-space rule for the first piece
// does not apply; special and control tokens (is_special) have no bytes, so a grammar never allows
// them, except the stop ids, which the grammar allows where it can end. Ids from the tokenizer's
// vocab_size() up to `model_vocab_size` (a model's padded embedding rows) have no bytes either.
// Pure function; the result is immutable and shared across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/tokenizer/tokenizer.h"
#include "structured/grammar.h"

namespace tinyserve {

// `stop_token_ids`: the engine's EOS ids (EngineCore::eos_token_ids()); ids outside
// [0, model_vocab_size) are dropped. REQUIRES: model_vocab_size >= tokenizer.vocab_size().
std::shared_ptr<const structured::Vocabulary> BuildStructuredVocabulary(
    const Tokenizer& tokenizer, int32_t model_vocab_size,
    const std::vector<int32_t>& stop_token_ids);

}  // namespace tinyserve
