#include "server/structured_vocabulary.h"

#include <algorithm>
#include <string>
#include <utility>

namespace tinyserve {

std::shared_ptr<const structured::Vocabulary> BuildStructuredVocabulary(
    const Tokenizer& tokenizer, int32_t model_vocab_size,
    const std::vector<int32_t>& stop_token_ids) {
  const int32_t n = tokenizer.vocab_size();
  int32_t prev = -1;
  for (int32_t id = 0; id < n && prev < 0; ++id) {
    if (!tokenizer.is_special(id) && id != tokenizer.bos_id()) prev = id;
  }
  std::vector<std::string> bytes(static_cast<size_t>(std::max(model_vocab_size, n)));
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_special(id) || id == tokenizer.bos_id() || id == tokenizer.eos_id()) continue;
    bytes[id] = tokenizer.DecodePiece(prev, id);
  }
  std::vector<int32_t> stops;
  for (int32_t id : stop_token_ids) {
    if (id >= 0 && id < static_cast<int32_t>(bytes.size())) {
      bytes[id].clear();  // a stop token ends the output; it adds no text to it
      stops.push_back(id);
    }
  }
  return std::make_shared<const structured::Vocabulary>(std::move(bytes), std::move(stops));
}

}  // namespace tinyserve
