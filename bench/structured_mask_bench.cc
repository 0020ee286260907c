// Constrained decoding cost (issue 21): the compile time of a typical nested JSON schema, and the
// token-mask cost per step at batch 32 (32 matchers at different points of generated JSON) on
// synthetic byte-level-BPE-like vocabularies of 32k and 128k tokens. Prints medians.
//
//   structured_mask_bench [num_steps=64]
//
// "steady": the 32 states stay put (every mask a cache hit); "advancing": each matcher accepts a
// random allowed token after each mask, so new states (cache misses) are included, as in decode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/hash.h"
#include "structured/grammar.h"
#include "structured/synthetic_vocab.h"

namespace tinyserve::structured {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 1000000},
    "name": {"type": "string", "maxLength": 40},
    "status": {"enum": ["active", "inactive", "pending"]},
    "score": {"type": "number", "minimum": 0, "maximum": 100},
    "address": {
      "type": "object",
      "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
      },
      "required": ["street", "city"]
    },
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "orders": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "sku": {"type": "string"},
          "qty": {"type": "integer", "minimum": 1},
          "price": {"type": "number"}
        },
        "required": ["sku", "qty"]
      }
    },
    "verified": {"type": "boolean"}
  },
  "required": ["id", "name", "status", "address"]
})";

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double NsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
}

// A uniformly random allowed token (not the stop token unless it is the only one).
int32_t PickAllowed(const Vocabulary& vocab, const std::vector<uint32_t>& mask, uint64_t* rng) {
  std::vector<int32_t> allowed;
  for (int32_t t = 0; t < vocab.size(); ++t) {
    if (((mask[t / 32] >> (t % 32)) & 1) && !vocab.is_stop_token(t)) allowed.push_back(t);
  }
  if (allowed.empty()) return vocab.stop_token_ids().front();
  *rng = SplitMix64(*rng);
  return allowed[*rng % allowed.size()];
}

void RunVocab(int32_t vocab_size, int num_steps) {
  auto t0 = Clock::now();
  auto vocab = SyntheticVocabulary(vocab_size, 1);
  const double vocab_ms = NsSince(t0) / 1e6;
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kJsonSchema;
  spec.text = kSchema;
  std::vector<double> compile_ns;
  std::shared_ptr<const CompiledGrammar> grammar;
  for (int i = 0; i < 20; ++i) {
    t0 = Clock::now();
    auto g = Compile(spec, vocab);
    compile_ns.push_back(NsSince(t0));
    if (!g.ok()) {
      std::fprintf(stderr, "compile failed: %s\n", g.status().ToString().c_str());
      std::exit(1);
    }
    grammar = *g;
  }
  // 32 matchers at different points: matcher i has accepted 2 + (7 i mod 45) random tokens.
  constexpr int kBatch = 32;
  std::vector<Matcher> matchers;
  std::vector<uint64_t> rngs;
  std::vector<uint32_t> mask((vocab->size() + 31) / 32);
  t0 = Clock::now();
  for (int i = 0; i < kBatch; ++i) {
    matchers.emplace_back(grammar);
    rngs.push_back(SplitMix64(1000 + i));
    const int steps = 2 + (7 * i) % 45;
    for (int s = 0; s < steps; ++s) {
      matchers[i].FillNextTokenBitmask(mask);
      const int32_t t = PickAllowed(*vocab, mask, &rngs[i]);
      if (vocab->is_stop_token(t)) break;
      matchers[i].AcceptToken(t);
    }
  }
  const double warmup_ms = NsSince(t0) / 1e6;
  std::vector<double> steady, steady_batch;
  for (int r = 0; r < num_steps; ++r) {
    const auto b0 = Clock::now();
    for (Matcher& m : matchers) {
      const auto m0 = Clock::now();
      m.FillNextTokenBitmask(mask);
      steady.push_back(NsSince(m0));
    }
    steady_batch.push_back(NsSince(b0));
  }
  std::vector<double> advancing, advancing_batch;
  for (int r = 0; r < num_steps; ++r) {
    double batch = 0;
    for (int i = 0; i < kBatch; ++i) {
      Matcher& m = matchers[i];
      if (m.IsClosed()) m.Reset();
      const auto m0 = Clock::now();
      m.FillNextTokenBitmask(mask);
      const double ns = NsSince(m0);
      advancing.push_back(ns);
      batch += ns;
      const int32_t t = PickAllowed(*vocab, mask, &rngs[i]);  // not timed
      if (vocab->is_stop_token(t)) {
        m.Reset();
      } else {
        m.AcceptToken(t);
      }
    }
    advancing_batch.push_back(batch);
  }
  std::printf(
      "vocab %6d: vocabulary+trie %.1f ms; compile median %.3f ms; warm-up of 32 matchers "
      "(%d masks incl. cache misses) %.1f ms\n",
      vocab_size, vocab_ms, Median(compile_ns) / 1e6, kBatch * 24, warmup_ms);
  std::printf("  steady:    median %.0f ns/mask, %.1f us per batch of 32\n", Median(steady),
              Median(steady_batch) / 1e3);
  std::printf(
      "  advancing: median %.0f ns/mask, %.1f us per batch of 32 (mean %.1f us, cache misses "
      "included)\n",
      Median(advancing), Median(advancing_batch) / 1e3, [&] {
        double s = 0;
        for (double b : advancing_batch) s += b;
        return s / advancing_batch.size() / 1e3;
      }());
}

}  // namespace
}  // namespace tinyserve::structured

int main(int argc, char** argv) {
  const int num_steps = argc > 1 ? std::atoi(argv[1]) : 64;
  for (int32_t v : {32000, 128000}) tinyserve::structured::RunVocab(v, num_steps);
  return 0;
}
