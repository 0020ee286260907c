// A Tokenizer with a table of raw byte pieces, for exact protocol tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/tokenizer.h"

namespace tinyserve::protocol {

// Ids 0 <unk>, 1 BOS, 2 EOS (special, no text); then one id per entry of `pieces`, from 3.
// Encode splits nothing: it returns [BOS?] + the id of `text` if it is a piece, else nothing.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(1);
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i] == text) ids.push_back(static_cast<int32_t>(i + 3));
    }
    return ids;
  }
  std::string DecodePiece(int32_t /*prev_id*/, int32_t id) const override {
    if (id < 3 || id >= vocab_size()) return {};
    return pieces_[id - 3];
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()) + 3; }
  int32_t bos_id() const override { return 1; }
  int32_t eos_id() const override { return 2; }
  bool add_bos_by_default() const override { return true; }
  bool is_special(int32_t id) const override { return id >= 0 && id < 3; }

  // The id of piece `p`. REQUIRES: p is one of the pieces.
  int32_t Id(std::string_view p) const {
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i] == p) return static_cast<int32_t>(i + 3);
    }
    return -1;
  }

 private:
  std::vector<std::string> pieces_;
};

}  // namespace tinyserve::protocol
