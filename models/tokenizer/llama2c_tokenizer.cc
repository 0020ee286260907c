#include "models/tokenizer/llama2c_tokenizer.h"

#include <utility>

#include "models/tokenizer/byte_reader.h"
#include "models/tokenizer/mapped_file.h"
#include "models/tokenizer/sentencepiece_bpe.h"

namespace tinyserve {
namespace {

constexpr int32_t kUnkId = 0;
constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kFirstByteId = 3;  // byte b is id b + 3
constexpr int32_t kMinVocabSize = kFirstByteId + 256;

}  // namespace

StatusOr<SentencePieceVocab> ReadLlama2cVocab(const std::string& path, int32_t vocab_size) {
  if (vocab_size < kMinVocabSize) {
    return InvalidArgument(path + ": vocab_size " + std::to_string(vocab_size) +
                           " is too small: a llama2.c tokenizer holds 3 special and 256 byte "
                           "tokens, so at least " +
                           std::to_string(kMinVocabSize));
  }
  StatusOr<MappedFile> file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  ByteReader reader(file->data(), file->size());

  uint32_t max_token_length = 0;
  if (!reader.Read(&max_token_length)) {
    return InvalidArgument(path + ": truncated: file is " + std::to_string(file->size()) +
                           " bytes, too short for the 4-byte max_token_length header");
  }
  // Each record is at least 8 bytes: check before allocating for a (maybe absurd) vocab_size.
  const uint64_t min_size = 4 + 8 * static_cast<uint64_t>(vocab_size);
  if (file->size() < min_size) {
    return InvalidArgument(path + ": truncated: file is " + std::to_string(file->size()) +
                           " bytes, but " + std::to_string(vocab_size) +
                           " token records need at least " + std::to_string(min_size));
  }
  SentencePieceVocab vocab;
  vocab.pieces.resize(vocab_size);
  vocab.scores.resize(vocab_size);
  vocab.kinds.resize(vocab_size, TokenKind::kNormal);
  for (int32_t id = 0; id < vocab_size; ++id) {
    const std::string where = path + ": token " + std::to_string(id) + " of " +
                              std::to_string(vocab_size) + " (offset " +
                              std::to_string(reader.offset()) + ")";
    int32_t length = 0;
    if (!reader.Read(&vocab.scores[id]) || !reader.Read(&length)) {
      return InvalidArgument(where + ": truncated record: needs 8 bytes of score and length, " +
                             std::to_string(reader.remaining()) + " left in the file");
    }
    if (length < 0) {
      return InvalidArgument(where + ": negative length " + std::to_string(length));
    }
    if (static_cast<uint32_t>(length) > max_token_length) {
      return InvalidArgument(where + ": length " + std::to_string(length) +
                             " exceeds max_token_length " + std::to_string(max_token_length));
    }
    if (!reader.ReadBytes(static_cast<uint64_t>(length), &vocab.pieces[id])) {
      return InvalidArgument(where + ": truncated record: needs " + std::to_string(length) +
                             " bytes of text, " + std::to_string(reader.remaining()) +
                             " left in the file");
    }
  }
  if (reader.remaining() != 0) {
    return InvalidArgument(path + ": " + std::to_string(reader.remaining()) +
                           " trailing bytes after " + std::to_string(vocab_size) +
                           " tokens (is vocab_size right?)");
  }

  vocab.kinds[kUnkId] = TokenKind::kUnknown;
  vocab.kinds[kBosId] = TokenKind::kControl;
  vocab.kinds[kEosId] = TokenKind::kControl;
  for (int32_t id = kFirstByteId; id < vocab_size; ++id) {
    if (ParseBytePiece(vocab.pieces[id]) >= 0) vocab.kinds[id] = TokenKind::kByte;
  }
  for (int b = 0; b < 256; ++b) vocab.byte_ids[b] = kFirstByteId + b;
  vocab.bos_id = kBosId;
  vocab.eos_id = kEosId;
  vocab.unk_id = kUnkId;
  vocab.add_bos_by_default = true;
  vocab.match_all_pieces = true;  // run.c looks up every piece
  return vocab;
}

StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path,
                                                          int32_t vocab_size) {
  StatusOr<SentencePieceVocab> vocab = ReadLlama2cVocab(path, vocab_size);
  if (!vocab.ok()) return vocab.status();
  StatusOr<std::unique_ptr<SentencePieceBpe>> tokenizer =
      SentencePieceBpe::Create(std::move(vocab).value(), path);
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<Tokenizer>(std::move(tokenizer).value());
}

}  // namespace tinyserve
