// Compile(), GrammarCache, Vocabulary and the small helpers of grammar.h.
#include "structured/grammar.h"

#include <algorithm>
#include <cstdio>
#include <list>
#include <mutex>
#include <unordered_map>

#include "base/hash.h"
#include "base/utf8.h"
#include "structured/compiled_grammar.h"
#include "structured/json_grammar.h"
#include "structured/regex.h"
#include "structured/token_trie.h"

namespace tinyserve::structured {

std::string_view ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kJsonSchema:
      return "json";
    case ConstraintKind::kRegex:
      return "regex";
    case ConstraintKind::kChoice:
      return "choice";
    case ConstraintKind::kGrammar:
      return "grammar";
  }
  return "unknown";
}

std::string ConstraintSpec::CacheKey() const {
  // Length-prefixed fields, so no two specs share a key.
  std::string key(ConstraintKindName(kind));
  auto field = [&](std::string_view s) {
    key += ':' + std::to_string(s.size()) + ':';
    key += s;
  };
  field(text);
  key += "|" + std::to_string(choices.size());
  for (const std::string& c : choices) field(c);
  key += whitespace_pattern.has_value() ? "|ws" : "|-";
  if (whitespace_pattern.has_value()) field(*whitespace_pattern);
  return key;
}

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> stop_token_ids)
    : token_bytes_(std::move(token_bytes)), stop_token_ids_(std::move(stop_token_ids)) {
  std::sort(stop_token_ids_.begin(), stop_token_ids_.end());
  stop_token_ids_.erase(std::unique(stop_token_ids_.begin(), stop_token_ids_.end()),
                        stop_token_ids_.end());
  uint64_t h = SplitMix64(token_bytes_.size());
  for (const std::string& t : token_bytes_) {
    h = SplitMix64(h ^ t.size());
    for (unsigned char c : t) h = SplitMix64(h ^ c);
  }
  for (int32_t id : stop_token_ids_)
    h = SplitMix64(h ^ (0x5707ull << 32) ^ static_cast<uint32_t>(id));
  fingerprint_ = h;
  trie_ = std::make_shared<const TokenTrie>(*this);
}

bool Vocabulary::is_stop_token(int32_t id) const {
  return std::binary_search(stop_token_ids_.begin(), stop_token_ids_.end(), id);
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary,
                                 std::string gbnf)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      gbnf_(std::move(gbnf)),
      mask_cache_(&grammar_, vocabulary_.get()) {}

std::string GbnfLiteral(std::string_view bytes) {
  const std::string text = ToValidUtf8(bytes);
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02X", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // printable ASCII and UTF-8 bytes as they are
        }
    }
  }
  return out + "\"";
}

namespace {

StatusOr<std::string> ToGbnf(const ConstraintSpec& spec) {
  switch (spec.kind) {
    case ConstraintKind::kGrammar:
      if (spec.text.empty()) return InvalidArgument("grammar: empty grammar");
      return spec.text;
    case ConstraintKind::kChoice: {
      if (spec.choices.empty()) return InvalidArgument("choice: needs at least one choice");
      std::string g = "root ::=";
      for (size_t i = 0; i < spec.choices.size(); ++i) {
        if (!IsValidUtf8(spec.choices[i])) {
          return InvalidArgument("choice " + std::to_string(i) + ": not valid UTF-8");
        }
        g += (i ? " | " : " ") + GbnfLiteral(spec.choices[i]);
      }
      return g + "\n";
    }
    case ConstraintKind::kJsonObject:
      return JsonObjectGbnf(spec.whitespace_pattern);
    case ConstraintKind::kJsonSchema: {
      StatusOr<std::string> rules = JsonSchemaToGbnf(spec.text, "", spec.whitespace_pattern);
      if (!rules.ok()) return rules;
      return *rules;
    }
    case ConstraintKind::kRegex: {
      StatusOr<std::string> rules = RegexToGbnf(spec.text, "root");
      if (!rules.ok()) return InvalidArgument("regex: " + rules.status().message());
      return rules;
    }
  }
  return InvalidArgument("unknown constraint kind");
}

}  // namespace

StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(
    const ConstraintSpec& spec, std::shared_ptr<const Vocabulary> vocabulary) {
  if (vocabulary == nullptr) return InvalidArgument("structured: no vocabulary");
  StatusOr<std::string> gbnf = ToGbnf(spec);
  if (!gbnf.ok()) return gbnf.status();
  StatusOr<Grammar> grammar = ParseGbnf(*gbnf);
  if (!grammar.ok()) {
    if (spec.kind == ConstraintKind::kGrammar) return grammar.status();
    // A generated grammar the matcher cannot run (a regex like `(a*)*` is left-recursive here).
    return InvalidArgument(std::string(ConstraintKindName(spec.kind)) +
                           ": the constraint compiles to a grammar the matcher cannot run: " +
                           grammar.status().message());
  }
  return std::shared_ptr<const CompiledGrammar>(std::make_shared<CompiledGrammar>(
      std::move(*grammar), std::move(vocabulary), std::move(*gbnf)));
}

struct GrammarCache::Impl {
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  size_t capacity;
  mutable std::mutex mu;
  std::list<Entry> lru;  // most recent first; guarded by mu
  std::unordered_map<std::string, std::list<Entry>::iterator> index;  // guarded by mu
};

GrammarCache::GrammarCache(size_t capacity) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = std::max<size_t>(capacity, 1);
}
GrammarCache::~GrammarCache() = default;

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(
    const ConstraintSpec& spec, const std::shared_ptr<const Vocabulary>& vocabulary) {
  if (vocabulary == nullptr) return InvalidArgument("structured: no vocabulary");
  const std::string key = std::to_string(vocabulary->fingerprint()) + "#" + spec.CacheKey();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->index.find(key);
    if (it != impl_->index.end()) {
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
      return it->second->second;
    }
  }
  // Compiled outside the lock; if another thread compiled the same key meanwhile, its grammar
  // wins so every caller gets one pointer.
  StatusOr<std::shared_ptr<const CompiledGrammar>> compiled = Compile(spec, vocabulary);
  if (!compiled.ok()) return compiled;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->index.find(key);
  if (it != impl_->index.end()) return it->second->second;
  impl_->lru.emplace_front(key, *compiled);
  impl_->index[key] = impl_->lru.begin();
  while (impl_->lru.size() > impl_->capacity) {
    impl_->index.erase(impl_->lru.back().first);
    impl_->lru.pop_back();
  }
  return *compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lru.size();
}

}  // namespace tinyserve::structured
