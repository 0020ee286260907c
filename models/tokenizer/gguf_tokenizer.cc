#include "models/tokenizer/gguf_tokenizer.h"

#include <utility>

#include "models/tokenizer/byte_level_bpe.h"
#include "models/tokenizer/sentencepiece_bpe.h"

namespace tinyserve {
namespace {

constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";  // U+2581

std::string ReplaceSentencePieceSpaces(const std::string& piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSentencePieceSpace.size(), kSentencePieceSpace) == 0) {
      out += ' ';
      i += kSentencePieceSpace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

// An optional integer key: `fallback` when missing.
StatusOr<int64_t> OptionalInt(const GgufFile& gguf, std::string_view key, int64_t fallback) {
  if (!gguf.Has(key)) return fallback;
  return gguf.GetInt(key);
}

StatusOr<bool> OptionalBool(const GgufFile& gguf, std::string_view key, bool fallback) {
  if (!gguf.Has(key)) return fallback;
  return gguf.GetBool(key);
}

// A token id key: `fallback` when missing; out-of-range ids are caught by the tokenizers.
Status ReadTokenId(const GgufFile& gguf, std::string_view key, int32_t fallback, int32_t* id) {
  StatusOr<int64_t> value = OptionalInt(gguf, key, fallback);
  if (!value.ok()) return value.status();
  if (*value < -1 || *value > INT32_MAX) {
    return InvalidArgument(gguf.path() + ": GGUF key '" + std::string(key) + "' is " +
                           std::to_string(*value) + ", not a token id");
  }
  *id = static_cast<int32_t>(*value);
  return Status::Ok();
}

// tokenizer.ggml.token_type, or all-normal when missing.
Status ReadTokenKinds(const GgufFile& gguf, size_t num_tokens, std::vector<TokenKind>* kinds) {
  kinds->assign(num_tokens, TokenKind::kNormal);
  if (!gguf.Has("tokenizer.ggml.token_type")) return Status::Ok();
  StatusOr<std::vector<int64_t>> types = gguf.GetIntArray("tokenizer.ggml.token_type");
  if (!types.ok()) return types.status();
  if (types->size() != num_tokens) {
    return InvalidArgument(gguf.path() + ": tokenizer.ggml.token_type has " +
                           std::to_string(types->size()) + " entries for " +
                           std::to_string(num_tokens) + " tokens");
  }
  for (size_t i = 0; i < num_tokens; ++i) {
    const int64_t t = (*types)[i];
    if (t < 1 || t > 6) {
      return InvalidArgument(gguf.path() + ": tokenizer.ggml.token_type of token " +
                             std::to_string(i) + " is " + std::to_string(t) + " (expected 1..6)");
    }
    (*kinds)[i] = static_cast<TokenKind>(t);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const GgufFile& gguf,
                                                       std::vector<std::string> tokens) {
  SentencePieceVocab vocab;
  const size_t n = tokens.size();
  vocab.pieces.reserve(n);
  for (const std::string& token : tokens) vocab.pieces.push_back(ReplaceSentencePieceSpaces(token));
  if (gguf.Has("tokenizer.ggml.scores")) {
    StatusOr<std::vector<double>> scores = gguf.GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    if (scores->size() != n) {
      return InvalidArgument(gguf.path() + ": tokenizer.ggml.scores has " +
                             std::to_string(scores->size()) + " entries for " + std::to_string(n) +
                             " tokens");
    }
    vocab.scores.assign(scores->begin(), scores->end());
  } else {
    vocab.scores.assign(n, 0.0f);
  }
  TS_RETURN_IF_ERROR(ReadTokenKinds(gguf, n, &vocab.kinds));
  TS_RETURN_IF_ERROR(ReadTokenId(gguf, "tokenizer.ggml.bos_token_id", 1, &vocab.bos_id));
  TS_RETURN_IF_ERROR(ReadTokenId(gguf, "tokenizer.ggml.eos_token_id", 2, &vocab.eos_id));
  TS_RETURN_IF_ERROR(ReadTokenId(gguf, "tokenizer.ggml.unknown_token_id", 0, &vocab.unk_id));
  StatusOr<bool> add_bos = OptionalBool(gguf, "tokenizer.ggml.add_bos_token", true);
  if (!add_bos.ok()) return add_bos.status();
  vocab.add_bos_by_default = *add_bos;
  StatusOr<bool> add_space = OptionalBool(gguf, "tokenizer.ggml.add_space_prefix", true);
  if (!add_space.ok()) return add_space.status();
  vocab.add_dummy_prefix = *add_space;
  vocab.match_all_pieces = false;
  vocab.text_u2581_is_space = true;

  vocab.byte_ids.fill(-1);
  for (size_t id = 0; id < n; ++id) {
    if (vocab.kinds[id] != TokenKind::kByte) continue;
    const int byte = ParseBytePiece(vocab.pieces[id]);
    if (byte >= 0 && vocab.byte_ids[byte] < 0) vocab.byte_ids[byte] = static_cast<int32_t>(id);
  }
  for (int32_t& id : vocab.byte_ids) {
    if (id < 0) id = vocab.unk_id;
  }
  StatusOr<std::unique_ptr<SentencePieceBpe>> tokenizer =
      SentencePieceBpe::Create(std::move(vocab), gguf.path());
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<Tokenizer>(std::move(tokenizer).value());
}

StatusOr<std::unique_ptr<Tokenizer>> LoadByteLevel(const GgufFile& gguf,
                                                   std::vector<std::string> tokens) {
  if (gguf.Has("tokenizer.ggml.pre")) {
    StatusOr<std::string> pre = gguf.GetString("tokenizer.ggml.pre");
    if (!pre.ok()) return pre.status();
    if (*pre != "default" && *pre != "gpt-2" && *pre != "gpt2") {
      return InvalidArgument(gguf.path() + ": pre-tokenizer tokenizer.ggml.pre = '" + *pre +
                             "' is not supported (only GPT-2's: 'default', 'gpt-2')");
    }
  }
  ByteLevelVocab vocab;
  TS_RETURN_IF_ERROR(ReadTokenKinds(gguf, tokens.size(), &vocab.kinds));
  vocab.tokens = std::move(tokens);
  StatusOr<std::vector<std::string>> merges = gguf.GetStringArray("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  vocab.merges = std::move(merges).value();
  TS_RETURN_IF_ERROR(ReadTokenId(gguf, "tokenizer.ggml.bos_token_id", -1, &vocab.bos_id));
  TS_RETURN_IF_ERROR(ReadTokenId(gguf, "tokenizer.ggml.eos_token_id", -1, &vocab.eos_id));
  StatusOr<bool> add_bos = OptionalBool(gguf, "tokenizer.ggml.add_bos_token", false);
  if (!add_bos.ok()) return add_bos.status();
  vocab.add_bos_by_default = *add_bos;
  StatusOr<std::unique_ptr<ByteLevelBpe>> tokenizer =
      ByteLevelBpe::Create(std::move(vocab), gguf.path());
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<Tokenizer>(std::move(tokenizer).value());
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const GgufFile& gguf) {
  StatusOr<std::string> model = gguf.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  StatusOr<std::vector<std::string>> tokens = gguf.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  if (*model == "llama") return LoadSentencePiece(gguf, std::move(tokens).value());
  if (*model == "gpt2") return LoadByteLevel(gguf, std::move(tokens).value());
  return InvalidArgument(gguf.path() + ": tokenizer.ggml.model '" + *model +
                         "' is not supported (only 'llama' and 'gpt2')");
}

StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path) {
  StatusOr<GgufFile> gguf = GgufFile::Open(path);
  if (!gguf.ok()) return gguf.status();
  return LoadGgufTokenizer(*gguf);
}

}  // namespace tinyserve
