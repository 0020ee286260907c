#include "server/protocol/detokenizer.h"

#include "base/utf8.h"

namespace tinyserve::protocol {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, int32_t prev_id,
                                               bool skip_special_tokens)
    : tokenizer_(tokenizer), prev_id_(prev_id), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Add(int32_t id) {
  const int32_t prev = prev_id_;
  prev_id_ = id;
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};
  pending_ += tokenizer_.DecodePiece(prev, id);
  std::string out;
  size_t consumed = AppendUtf8Lossy(pending_, /*final=*/false, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  AppendUtf8Lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace tinyserve::protocol
