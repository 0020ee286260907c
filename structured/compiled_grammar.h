// CompiledGrammar: a byte grammar (structured/grammar_ir.h) bound to one Vocabulary, with the
// mask cache its Matchers share (structured/mask_cache.h). Immutable after Compile() but for that
// cache (thread-safe); shared by every Matcher of that constraint, across threads.
#pragma once

#include <memory>
#include <string>

#include "structured/grammar.h"
#include "structured/grammar_ir.h"
#include "structured/mask_cache.h"

namespace tinyserve::structured {

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary, std::string gbnf);
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  // The GBNF text the constraint compiled to (for error messages and debugging).
  const std::string& gbnf() const { return gbnf_; }
  const MaskCache& mask_cache() const { return mask_cache_; }

 private:
  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::string gbnf_;
  MaskCache mask_cache_;  // points into grammar_ and *vocabulary_
};

}  // namespace tinyserve::structured
