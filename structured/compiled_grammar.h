// CompiledGrammar: a byte grammar (structured/grammar_ir.h) bound to one Vocabulary. Immutable
// after Compile(); shared by every Matcher of that constraint, across threads.
#pragma once

#include <memory>
#include <string>

#include "structured/grammar.h"
#include "structured/grammar_ir.h"

namespace tinyserve::structured {

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary, std::string gbnf);

  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  // The GBNF text the constraint compiled to (for error messages and debugging).
  const std::string& gbnf() const { return gbnf_; }

 private:
  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  std::string gbnf_;
};

}  // namespace tinyserve::structured
