#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  int32_t prev_id = -1;
  for (int32_t id : ids) {
    text += DecodePiece(prev_id, id);
    prev_id = id;
  }
  return text;
}

}  // namespace tinyserve
