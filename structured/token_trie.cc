#include "structured/token_trie.h"

#include <algorithm>

namespace tinyserve::structured {

TokenTrie::TokenTrie(const Vocabulary& vocabulary) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocabulary.size(); ++id) {
    if (!vocabulary.token_bytes(id).empty()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return vocabulary.token_bytes(a) < vocabulary.token_bytes(b);
  });
  ids_ = order;
  // Sorted order is preorder: each token adds the nodes of the bytes past its common prefix with
  // the previous token; `open` holds the node index of each depth on the current path.
  std::vector<int32_t> open;
  const std::string* prev = nullptr;
  auto close_to = [&](size_t depth) {
    while (open.size() > depth) {
      nodes_[open.back()].subtree_end = static_cast<int32_t>(nodes_.size());
      open.pop_back();
    }
  };
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& bytes = vocabulary.token_bytes(order[i]);
    size_t common = 0;
    if (prev != nullptr) {
      while (common < prev->size() && common < bytes.size() && (*prev)[common] == bytes[common]) {
        ++common;
      }
    }
    close_to(common);
    for (size_t d = common; d < bytes.size(); ++d) {
      Node node;
      node.byte = static_cast<uint8_t>(bytes[d]);
      node.depth = static_cast<int32_t>(d + 1);
      node.tokens_begin = node.tokens_end = static_cast<int32_t>(i);
      open.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(node);
    }
    Node& last = nodes_[open.back()];
    // A node on the path of an earlier token never ends a later one (a prefix sorts first), so
    // the ids of one node are consecutive in `order`.
    last.tokens_end = static_cast<int32_t>(i + 1);
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(bytes.size()));
    prev = &bytes;
  }
  close_to(0);
}

}  // namespace tinyserve::structured
