// A byte trie of a vocabulary's token bytes, in depth-first preorder, so a mask walk is one pass
// over an array that skips a whole subtree (every token with a rejected prefix) in one jump.
// Built once per Vocabulary; immutable, shared across threads.
#pragma once

#include <cstdint>
#include <vector>

#include "structured/grammar.h"

namespace tinyserve::structured {

class TokenTrie {
 public:
  struct Node {
    uint8_t byte = 0;          // the byte on the edge into this node
    int32_t depth = 0;         // 1 for the first byte of a token
    int32_t subtree_end = 0;   // the preorder index just past this node's subtree
    int32_t tokens_begin = 0;  // [tokens_begin, tokens_end) of token_ids(): the ids ending here
    int32_t tokens_end = 0;
  };

  // Tokens with empty bytes are left out (they are never allowed by bytes).
  explicit TokenTrie(const Vocabulary& vocabulary);

  const std::vector<Node>& nodes() const { return nodes_; }       // preorder
  const std::vector<int32_t>& token_ids() const { return ids_; }  // grouped by node
  int32_t max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  int32_t max_depth_ = 0;
};

}  // namespace tinyserve::structured
