// Matcher: one request's parse state over a CompiledGrammar (the contract is in grammar.h).
#include <algorithm>

#include "structured/compiled_grammar.h"
#include "structured/mask_cache.h"
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
  std::vector<int32_t> key;  // scratch: a mask-cache key
  StackSet a, b;             // scratch of Consumes

  // True iff the single stack `stack` consumes all of `bytes`.
  bool Consumes(int32_t stack, const std::string& bytes) {
    a.stacks.assign(1, stack);
    a.can_end = a.popped_outside = false;
    for (char c : bytes) {
      machine.Advance(a, static_cast<uint8_t>(c), &b);
      if (b.is_dead()) return false;
      std::swap(a, b);
    }
    return true;
  }
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
  const auto& ids = vocab.trie().token_ids();
  const MaskCache& cache = s.grammar->mask_cache();
  // The mask of a set is the union of its stacks' masks.
  for (int32_t stack : s.current.stacks) {
    s.key.clear();
    int32_t node = stack;
    while (node >= 0 && static_cast<int>(s.key.size()) < MaskCache::kMaxFrames) {
      s.key.push_back(s.machine.pos(node));
      node = s.machine.below(node);
    }
    s.key.push_back(node < 0 ? -1 : kOutside);
    const std::shared_ptr<const MaskCache::Entry> entry = cache.Get(s.key);
    for (size_t w = 0; w < bitmask.size(); ++w) bitmask[w] |= entry->accepted[w];
    // The uncertain tokens, against the whole stack.
    for (const auto& [begin, end] : entry->uncertain) {
      for (int32_t k = begin; k < end; ++k) {
        const int32_t id = ids[k];
        const uint32_t bit = uint32_t{1} << (id & 31);
        if (bitmask[id >> 5] & bit) continue;
        if (s.Consumes(stack, vocab.token_bytes(id))) bitmask[id >> 5] |= bit;
      }
    }
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
