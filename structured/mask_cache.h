// MaskCache: the context-independent part of token masks, shared by every Matcher of one
// CompiledGrammar (the adaptive token mask cache of xgrammar, keyed by a truncated stack).
//
// The key is a stack's top kMaxFrames positions (top first) and then -1 when that is the whole
// stack, or kOutside when frames below were cut off. For a key, one walk of the vocabulary trie
// sorts every token into: accepted (its bytes are consumed within the key's frames, or end
// exactly where they run out: true whatever lies below), rejected (refused within the frames),
// or uncertain (the frames can end before the token does, so the cut-off stack decides). A
// Matcher ORs the accepted bits and checks only the uncertain tokens against its real stack; for
// a whole stack (the common case in JSON schemas) nothing is uncertain. Entries are computed on
// first use (outside the lock; an equal concurrent computation is dropped) and kept up to a byte
// budget (per grammar), past which they are computed and not stored. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "structured/grammar.h"
#include "structured/grammar_ir.h"

namespace tinyserve::structured {

class MaskCache {
 public:
  static constexpr int kMaxFrames = 16;
  static constexpr size_t kMaxBytes = size_t{32} << 20;  // ~2000 entries at 128k tokens

  struct Entry {
    std::vector<uint32_t> accepted;  // [bitmask words]
    // [begin, end) ranges of indices into TokenTrie::token_ids() (trie order).
    std::vector<std::pair<int32_t, int32_t>> uncertain;
  };

  MaskCache(const Grammar* grammar, const Vocabulary* vocabulary)
      : grammar_(grammar), vocabulary_(vocabulary) {}

  std::shared_ptr<const Entry> Get(const std::vector<int32_t>& key) const;
  size_t num_entries() const;
  // How many stored entries have uncertain tokens (keys of cut-off stacks, mostly).
  size_t num_entries_with_uncertain() const;

 private:
  struct KeyHash {
    size_t operator()(const std::vector<int32_t>& key) const;
  };
  std::shared_ptr<const Entry> Compute(const std::vector<int32_t>& key) const;

  const Grammar* grammar_;
  const Vocabulary* vocabulary_;
  mutable Mutex mu_;
  mutable std::unordered_map<std::vector<int32_t>, std::shared_ptr<const Entry>, KeyHash> entries_
      TS_GUARDED_BY(mu_);
  mutable size_t num_bytes_ TS_GUARDED_BY(mu_) = 0;
};

}  // namespace tinyserve::structured
