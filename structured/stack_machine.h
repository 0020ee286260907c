// The pushdown automaton over bytes that a Matcher runs (llama.cpp's grammar-sampler idea: a set
// of stacks of grammar positions, deduplicated). A stack is a node id in a StackPool: the node
// holds the top position and the id of the stack below it (hash-consed, so equal stacks are equal
// ids and a set of stacks is a sorted vector of ints). The top of every stack in a StackSet is a
// kBytes element; `can_end` says the empty stack was reached (the input so far is complete).
// Returns into a rule whose next element is kEnd are not pushed (tail calls), so right-recursive
// repetitions (`x*`) do not grow the stack. Not thread-safe: one pool per Matcher.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "structured/grammar_ir.h"

namespace tinyserve::structured {

// The bottom of a truncated stack (the mask cache's key): what lies below is unknown.
inline constexpr int32_t kOutside = -2;

struct StackSet {
  std::vector<int32_t> stacks;  // sorted, unique node ids
  bool can_end = false;
  bool popped_outside = false;  // a stack returned into kOutside (the context decides what's next)

  bool is_dead() const { return stacks.empty() && !can_end; }
  bool operator==(const StackSet&) const = default;
};

class StackMachine {
 public:
  explicit StackMachine(const Grammar* grammar) : grammar_(grammar) {}

  // The set at the start of the grammar (before any byte).
  StackSet Initial();
  // *out = the stacks after consuming `byte` from `in` (dead if none accepts it).
  void Advance(const StackSet& in, uint8_t byte, StackSet* out);

  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  // The node of the stack `pos` on top of `below` (-1: the bottom; kOutside: unknown below).
  int32_t Push(int32_t pos, int32_t below) { return Intern(pos, below); }
  int32_t pos(int32_t node) const { return nodes_[node].pos; }
  int32_t below(int32_t node) const { return nodes_[node].below; }
  // Drops every node not reachable from `*keep`, renumbering its stacks (bounds the pool's
  // growth over a long request).
  void Compact(StackSet* keep);

 private:
  struct Node {
    int32_t pos;
    int32_t below;  // -1: the bottom
  };
  int32_t Intern(int32_t pos, int32_t below);
  // Adds to *out what (pos, below) reaches without consuming a byte: the stacks whose top is a
  // kBytes element, can_end, popped_outside. Iterative (work_, seen_: scratch).
  void Expand(int32_t pos, int32_t below, StackSet* out);
  static void Finish(StackSet* out);
  // The set after stack `id` consumes a byte its top accepts: the same for every such byte, so
  // it is computed once per node and kept.
  const StackSet& After(int32_t id);

  std::vector<std::pair<int32_t, int32_t>> work_;  // Expand's (pos, below) still to visit
  std::unordered_set<uint64_t> seen_;              // Expand's visited (pos, below) pairs
  const Grammar* grammar_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<StackSet> after_;  // [node] memo of After()
  std::vector<char> has_after_;  // [node]
};

}  // namespace tinyserve::structured
