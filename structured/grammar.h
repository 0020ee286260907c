// structured/: constrained decoding (issue 21). One grammar engine for every constraint kind:
// JSON object, JSON Schema, regex, choice and GBNF grammars all compile to one context-free
// grammar over bytes, and a Matcher per request walks it as a pushdown automaton.
//
// Contract:
// - Compile() checks a constraint and builds an immutable CompiledGrammar for one Vocabulary: the
//   byte-level grammar plus a shared cache of, per stack top (up to 16 positions), the
//   context-independent part of its token mask (tokens accepted or rejected whatever the stack
//   below holds, as xgrammar's adaptive token mask cache), each entry computed on first use from
//   the trie of the vocabulary's token bytes (structured/mask_cache.h). A bad or unsupported
//   constraint is InvalidArgument with a message that names the problem and where it is (a JSON
//   pointer into the schema, a regex offset, a grammar line), never silently ignored.
// - A Matcher holds one request's parse state. FillNextTokenBitmask() sets bit t of the mask iff
//   token t may be sampled next: its bytes extend the output so far to a prefix of some string of
//   the language; a stop token (Vocabulary::stop_token_ids) iff the grammar can end here. Tokens
//   with no bytes (special tokens other than the stop ids) are never allowed. AcceptToken()
//   advances by one sampled token.
// - The mask is (vocab_size + 31) / 32 uint32 words; token t is bit (t % 32) of word t / 32.
// - Thread safety: CompiledGrammar and Vocabulary are immutable and shared across threads; a
//   Matcher is used by one thread at a time; GrammarCache is thread-safe.
// - Determinism: the mask is a pure function of (grammar, vocabulary, accepted tokens), so a
//   request's constrained output does not depend on batching or preemption (after a recompute the
//   engine replays the kept outputs into a fresh Matcher).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tinyserve::structured {

enum class ConstraintKind : uint8_t { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };

// The metric label of a kind: "json_object", "json", "regex", "choice", "grammar".
std::string_view ConstraintKindName(ConstraintKind kind);

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  // kJsonSchema: the schema as JSON text; kRegex: the pattern (a full match of the output, ECMA /
  // Python syntax subset); kGrammar: GBNF text (llama.cpp's syntax, start rule `root`); otherwise
  // empty.
  std::string text;
  std::vector<std::string> choices;  // kChoice: the output is exactly one of these strings
  // JSON kinds: a regex for the whitespace allowed between JSON tokens (vLLM's
  // whitespace_pattern). nullopt: at most one space, or a newline and up to 20 spaces or tabs
  // (llama.cpp's bounded default, so a small model cannot loop on whitespace).
  std::optional<std::string> whitespace_pattern;

  // A key that equals for equal constraints (the GrammarCache key, with the vocabulary's).
  std::string CacheKey() const;
};

class TokenTrie;  // structured/token_trie.h

// The bytes each token id appends to the output text when it follows a non-BOS token (the
// detokenizer's DecodePiece(prev, id) with an ordinary prev), and which ids end a request.
class Vocabulary {
 public:
  // `token_bytes[id]` empty: the token never appears in constrained output (unless a stop id).
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids);

  int32_t size() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  const std::vector<int32_t>& stop_token_ids() const { return stop_token_ids_; }
  // A hash of every token's bytes and the stop ids (part of the cache key).
  uint64_t fingerprint() const { return fingerprint_; }
  // The byte trie of the token bytes, built once by the constructor.
  const TokenTrie& trie() const { return *trie_; }
  bool is_stop_token(int32_t id) const;

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> stop_token_ids_;
  uint64_t fingerprint_ = 0;
  std::shared_ptr<const TokenTrie> trie_;
};

class CompiledGrammar;  // immutable; defined in structured/compiled_grammar.h

StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(
    const ConstraintSpec& spec, std::shared_ptr<const Vocabulary> vocabulary);

// Compiles once per (ConstraintSpec::CacheKey(), Vocabulary::fingerprint()); keeps the most
// recently used `capacity` grammars. Errors are not cached.
class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 256);
  ~GrammarCache();
  StatusOr<std::shared_ptr<const CompiledGrammar>> Get(
      const ConstraintSpec& spec, const std::shared_ptr<const Vocabulary>& vocabulary);
  size_t size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// For composing grammars (tool calling wraps argument schemas in a template's tags): the GBNF
// rules of a JSON Schema, every rule name prefixed with `rule_prefix`, the schema's rule named
// `<rule_prefix>root`; and a GBNF string literal matching exactly `bytes`.
StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json, std::string_view rule_prefix,
                                       const std::optional<std::string>& whitespace_pattern = {});
std::string GbnfLiteral(std::string_view bytes);

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~Matcher();
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;

  int32_t vocab_size() const;
  int32_t bitmask_words() const { return (vocab_size() + 31) / 32; }

  // Writes the mask of the next token into `bitmask` (bitmask_words() words, every word
  // written). REQUIRES: !is_terminated().
  void FillNextTokenBitmask(std::span<uint32_t> bitmask) const;

  // Advances by `token`. Returns false and leaves the state unchanged when the mask would not
  // allow it. A stop token (allowed only when CanTerminate()) terminates the matcher.
  bool AcceptToken(int32_t token);

  // True iff the bytes accepted so far form a complete string of the language.
  bool CanTerminate() const;
  // True iff CanTerminate() and no byte can follow (the mask then allows only stop tokens).
  bool IsClosed() const;
  // True after a stop token was accepted.
  bool is_terminated() const;
  // Back to the start state (before any token).
  void Reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tinyserve::structured
