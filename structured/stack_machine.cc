#include "structured/stack_machine.h"

#include <algorithm>

namespace tinyserve::structured {

int32_t StackMachine::Intern(int32_t pos, int32_t below) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(below);
  auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({pos, below});
  return it->second;
}

// Depth first over the (position, below) pairs reachable from (pos, below) without consuming a
// byte, in the order a recursive walk would take (alternatives in order, each explored before the
// next), so that nodes are interned in that order. The work list is explicit: a chain of rule
// references, or a run of empty rules, is as long as the grammar a request sent (thousands deep,
// more than a thread's stack). Each pair is taken once: its outcome does not depend on the path,
// and ambiguous empty alternatives would otherwise be walked once per path (2^n for n in a row).
void StackMachine::Expand(int32_t pos, int32_t below, StackSet* out) {
  work_.clear();
  seen_.clear();
  work_.push_back({pos, below});
  while (!work_.empty()) {
    const auto [p, b] = work_.back();
    work_.pop_back();
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(p)) << 32) | static_cast<uint32_t>(b);
    if (!seen_.insert(key).second) continue;
    const Element& e = grammar_->elements[p];
    switch (e.kind) {
      case Element::Kind::kEnd:
        if (b == -1) {
          out->can_end = true;
        } else if (b == kOutside) {
          out->popped_outside = true;
        } else {
          const Node n = nodes_[b];
          work_.push_back({n.pos, n.below});
        }
        break;
      case Element::Kind::kRuleRef: {
        const bool tail = grammar_->elements[p + 1].kind == Element::Kind::kEnd;
        const int32_t ret = tail ? b : Intern(p + 1, b);
        const std::vector<int32_t>& alts = grammar_->rule_alternatives[e.value];
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back({*it, ret});
        break;
      }
      case Element::Kind::kBytes:
        out->stacks.push_back(Intern(p, b));
        break;
    }
  }
}

void StackMachine::Finish(StackSet* out) {
  std::sort(out->stacks.begin(), out->stacks.end());
  out->stacks.erase(std::unique(out->stacks.begin(), out->stacks.end()), out->stacks.end());
}

StackSet StackMachine::Initial() {
  StackSet out;
  for (int32_t alt : grammar_->rule_alternatives[grammar_->root]) Expand(alt, -1, &out);
  Finish(&out);
  return out;
}

const StackSet& StackMachine::After(int32_t id) {
  if (static_cast<size_t>(id) >= has_after_.size() || !has_after_[id]) {
    StackSet next;
    const Node n = nodes_[id];
    Expand(n.pos + 1, n.below, &next);
    Finish(&next);
    if (has_after_.size() < nodes_.size()) {
      has_after_.resize(nodes_.size(), 0);
      after_.resize(nodes_.size());
    }
    after_[id] = std::move(next);
    has_after_[id] = 1;
  }
  return after_[id];
}

void StackMachine::Advance(const StackSet& in, uint8_t byte, StackSet* out) {
  out->stacks.clear();
  out->can_end = false;
  out->popped_outside = false;
  int num_taken = 0;
  for (int32_t id : in.stacks) {
    if (!grammar_->byte_sets[grammar_->elements[nodes_[id].pos].value].Has(byte)) continue;
    const StackSet& next = After(id);  // valid until the next After()
    out->stacks.insert(out->stacks.end(), next.stacks.begin(), next.stacks.end());
    out->can_end |= next.can_end;
    out->popped_outside |= next.popped_outside;
    ++num_taken;
  }
  if (num_taken > 1) Finish(out);
}

void StackMachine::Compact(StackSet* keep) {
  std::vector<Node> old = std::move(nodes_);
  nodes_.clear();
  index_.clear();
  after_.clear();
  has_after_.clear();
  std::unordered_map<int32_t, int32_t> remap;
  // Re-interns a chain bottom-up.
  auto copy = [&](auto&& self, int32_t id) -> int32_t {
    if (id < 0) return id;
    auto it = remap.find(id);
    if (it != remap.end()) return it->second;
    const int32_t below = self(self, old[id].below);
    const int32_t fresh = Intern(old[id].pos, below);
    remap[id] = fresh;
    return fresh;
  };
  for (int32_t& id : keep->stacks) id = copy(copy, id);
  Finish(keep);
}

}  // namespace tinyserve::structured
