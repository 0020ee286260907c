// Matcher: one request's parse state over a CompiledGrammar (the contract is in grammar.h).
#include <algorithm>

#include "structured/compiled_grammar.h"
#include "structured/stack_machine.h"
#include "structured/token_trie.h"

namespace tinyserve::structured {
namespace {

// Past this many stack nodes an accepted token compacts the pool to the live stacks.
constexpr int32_t kCompactAbove = 1 << 20;

}  // namespace

struct Matcher::State {
  explicit State(std::shared_ptr<const CompiledGrammar> g)
      : grammar(std::move(g)), machine(&grammar->grammar()) {
    current = machine.Initial();
  }

  std::shared_ptr<const CompiledGrammar> grammar;
  StackMachine machine;  // mutated by const FillNextTokenBitmask (its pool is a cache)
  StackSet current;
  bool terminated = false;
  std::vector<StackSet> levels;  // scratch of the mask walk, one per trie depth
};

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : state_(std::make_unique<State>(std::move(grammar))) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

int32_t Matcher::vocab_size() const { return state_->grammar->vocabulary().size(); }

void Matcher::FillNextTokenBitmask(std::span<uint32_t> bitmask) const {
  State& s = *state_;
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  const Vocabulary& vocab = s.grammar->vocabulary();
  const TokenTrie& trie = vocab.trie();
  const auto& nodes = trie.nodes();
  const auto& ids = trie.token_ids();
  if (s.levels.size() < static_cast<size_t>(trie.max_depth()) + 1) {
    s.levels.resize(trie.max_depth() + 1);
  }
  s.levels[0] = s.current;
  const int32_t n = static_cast<int32_t>(nodes.size());
  for (int32_t i = 0; i < n;) {
    const TokenTrie::Node& node = nodes[i];
    StackSet& here = s.levels[node.depth];
    s.machine.Advance(s.levels[node.depth - 1], node.byte, &here);
    if (here.is_dead()) {
      i = node.subtree_end;
      continue;
    }
    for (int32_t k = node.tokens_begin; k < node.tokens_end; ++k) {
      const int32_t id = ids[k];
      bitmask[id >> 5] |= uint32_t{1} << (id & 31);
    }
    ++i;
  }
  for (int32_t id : vocab.stop_token_ids()) {
    if (id < 0 || id >= vocab.size()) continue;
    const uint32_t bit = uint32_t{1} << (id & 31);
    if (s.current.can_end) {
      bitmask[id >> 5] |= bit;
    } else {
      bitmask[id >> 5] &= ~bit;
    }
  }
}

bool Matcher::AcceptToken(int32_t token) {
  State& s = *state_;
  const Vocabulary& vocab = s.grammar->vocabulary();
  if (s.terminated || token < 0 || token >= vocab.size()) return false;
  if (vocab.is_stop_token(token)) {
    if (!s.current.can_end) return false;
    s.terminated = true;
    return true;
  }
  const std::string& bytes = vocab.token_bytes(token);
  if (bytes.empty()) return false;
  StackSet a = s.current, b;
  for (char c : bytes) {
    s.machine.Advance(a, static_cast<uint8_t>(c), &b);
    if (b.is_dead()) return false;
    std::swap(a, b);
  }
  s.current = std::move(a);
  if (s.machine.num_nodes() > kCompactAbove) s.machine.Compact(&s.current);
  return true;
}

bool Matcher::CanTerminate() const { return state_->current.can_end; }

bool Matcher::IsClosed() const { return state_->current.can_end && state_->current.stacks.empty(); }

bool Matcher::is_terminated() const { return state_->terminated; }

void Matcher::Reset() {
  State& s = *state_;
  s.terminated = false;
  s.current = s.machine.Initial();
}

}  // namespace tinyserve::structured
