// Randomized: seeded random walks through the masks (a uniformly random allowed token each step,
// on the synthetic vocabulary) for a catalogue of JSON schemas, regexes and choices. Every
// finished output must be valid by a real checker: JSON Schema by python3-jsonschema (one process
// for the whole catalogue, formats checked by the schema's draft), regexes by PCRE2 (full match),
// choices by equality. Also: a walk never reaches a state where no token is allowed.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/hash.h"
#include "base/utf8.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar.h"
#include "structured/synthetic_vocab.h"

namespace tinyserve::structured {
namespace {

constexpr int kWalks = 20;
constexpr int kMaxTokens = 200;

std::shared_ptr<const Vocabulary> WalkVocab() {
  static const auto vocab = SyntheticVocabulary(700, 7);
  return vocab;
}

struct WalkResult {
  std::vector<std::string> finished;  // outputs that ended with the stop token
  int num_unfinished = 0;
};

WalkResult Walk(const ConstraintSpec& spec, uint64_t seed) {
  auto vocab = WalkVocab();
  auto g = Compile(spec, vocab);
  EXPECT_TRUE(g.ok()) << spec.text << ": " << g.status().ToString();
  WalkResult result;
  if (!g.ok()) return result;
  Matcher m(*g);
  std::vector<uint32_t> mask(m.bitmask_words());
  std::vector<int32_t> allowed;
  for (int w = 0; w < kWalks; ++w) {
    m.Reset();
    uint64_t rng = SplitMix64(seed * 1000 + w);
    std::string out;
    bool done = false;
    for (int step = 0; step < kMaxTokens && !done; ++step) {
      m.FillNextTokenBitmask(mask);
      allowed.clear();
      for (int32_t t = 0; t < vocab->size(); ++t) {
        if ((mask[t / 32] >> (t % 32)) & 1) allowed.push_back(t);
      }
      if (allowed.empty()) {
        ADD_FAILURE() << "no token allowed after '" << out << "' for " << spec.text;
        return result;
      }
      rng = SplitMix64(rng);
      const int32_t t = allowed[rng % allowed.size()];
      if (!m.AcceptToken(t)) {
        ADD_FAILURE() << "an allowed token was refused";
        return result;
      }
      if (vocab->is_stop_token(t)) {
        done = true;
      } else {
        out += vocab->token_bytes(t);
      }
    }
    if (done) {
      result.finished.push_back(out);
    } else {
      ++result.num_unfinished;
    }
  }
  return result;
}

// The catalogue of JSON schemas (tests/structured/json_schema_catalogue.json): the openai npm
// client tests (tests/clients) sample the same schemas through the real server.
const std::vector<std::string>& Schemas() {
  static const std::vector<std::string> schemas = [] {
    const std::string path =
        std::string(TINYSERVE_SOURCE_DIR) + "/tests/structured/json_schema_catalogue.json";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    std::vector<std::string> out;
    for (const nlohmann::json& schema : nlohmann::json::parse(in)) out.push_back(schema.dump());
    return out;
  }();
  return schemas;
}

TEST(RandomWalkTest, JsonSchemaOutputsValidateWithJsonschema) {
  nlohmann::json batch = nlohmann::json::array();
  int num_finished = 0, num_walks = 0;
  const std::vector<std::string>& schemas = Schemas();
  ASSERT_GE(schemas.size(), 30u);
  for (size_t i = 0; i < schemas.size(); ++i) {
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kJsonSchema;
    spec.text = schemas[i];
    WalkResult r = Walk(spec, i);
    num_walks += kWalks;
    num_finished += static_cast<int>(r.finished.size());
    EXPECT_GE(r.finished.size(), 1u) << "no walk finished for " << schemas[i];
    nlohmann::json outputs = nlohmann::json::array();
    for (const std::string& out : r.finished) {
      ASSERT_TRUE(IsValidUtf8(out)) << out;
      EXPECT_FALSE(nlohmann::json::parse(out, nullptr, false).is_discarded()) << out;
      outputs.push_back(out);
    }
    batch.push_back({{"schema", nlohmann::json::parse(schemas[i])}, {"outputs", outputs}});
  }
  EXPECT_GE(num_finished * 10, num_walks * 7) << num_finished << " of " << num_walks;
  const std::string path =
      testing::TempDir() + "/structured_walks_" + std::to_string(getpid()) + ".json";
  std::ofstream(path) << batch.dump();
  const std::string script =
      "import json, sys, jsonschema\n"
      "bad = 0\n"
      "for i, case in enumerate(json.load(open(sys.argv[1]))):\n"
      "    cls = jsonschema.validators.validator_for(case['schema'], "
      "default=jsonschema.Draft202012Validator)\n"
      "    fc = getattr(cls, 'FORMAT_CHECKER', None) or jsonschema.draft202012_format_checker\n"
      "    v = cls(case['schema'], format_checker=fc)\n"
      "    for out in case['outputs']:\n"
      "        for e in v.iter_errors(json.loads(out)):\n"
      "            bad += 1\n"
      "            print('schema', i, repr(out), e.message)\n"
      "sys.exit(1 if bad else 0)\n";
  const std::string script_path = path + ".py";
  std::ofstream(script_path) << script;
  const int rc =
      std::system(("python3 " + script_path + " " + path + " > " + path + ".log 2>&1").c_str());
  std::ifstream log(path + ".log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << text;
  std::remove(path.c_str());
  std::remove(script_path.c_str());
  std::remove((path + ".log").c_str());
}

TEST(RandomWalkTest, RegexOutputsFullyMatchByPcre2) {
  const char* const patterns[] = {
      "[a-z]+@[a-z]+\\.com",
      "(ab|cd)*e?",
      "\\d{3}-\\d{4}",
      "[^\\s]{1,5}",
      "(?:0|[1-9]\\d*)(\\.\\d+)?",
      "x.y",
      "\\w+\\s\\w+",
      "colou?r",
      "[\\u00e0-\\u00ff]+!",
      "(?P<y>\\d{4})-(?<m>\\d\\d)",
      "^a{2,}?b$",
      "[-.\\]a]+|\\.",
  };
  for (size_t i = 0; i < std::size(patterns); ++i) {
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kRegex;
    spec.text = patterns[i];
    WalkResult r = Walk(spec, 100 + i);
    EXPECT_GE(r.finished.size(), 10u) << patterns[i];
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(patterns[i]), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                                   &error, &offset, nullptr);
    ASSERT_NE(re, nullptr) << patterns[i];
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
    for (const std::string& out : r.finished) {
      const int rc =
          pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(out.data()), out.size(), 0, 0, md, nullptr);
      EXPECT_GE(rc, 0) << patterns[i] << " on '" << out << "'";
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
  }
}

// The cached masks (truncated-stack keys, uncertain tokens checked at run time) equal masks by
// brute force (every token tried on a replayed Matcher), on deeply nesting grammars whose stacks
// outgrow MaskCache::kMaxFrames.
TEST(RandomWalkTest, CachedMasksEqualBruteForce) {
  const std::pair<ConstraintKind, std::string> cases[] = {
      {ConstraintKind::kJsonSchema, Schemas().at(30)},  // recursive $defs
      {ConstraintKind::kJsonSchema, Schemas().at(31)},  // recursive '#'
      {ConstraintKind::kJsonObject, ""},
      {ConstraintKind::kGrammar, "root ::= \"(\" root \")\" root | \"\""},
  };
  // The walk vocabulary plus closers long enough to pop past the cached frames.
  std::vector<std::string> tokens;
  for (int32_t t = 0; t < WalkVocab()->size(); ++t) tokens.push_back(WalkVocab()->token_bytes(t));
  for (int n : {17, 24, 40}) {
    tokens.push_back(std::string(n, ')'));
    std::string mixed;
    for (int i = 0; i < n; ++i) mixed += i % 2 ? "]" : "}";
    tokens.push_back(mixed);
    tokens.push_back(std::string(n, '}'));
  }
  auto vocab = std::make_shared<const Vocabulary>(tokens, WalkVocab()->stop_token_ids());
  int num_checked = 0;
  for (const auto& [kind, text] : cases) {
    ConstraintSpec spec;
    spec.kind = kind;
    spec.text = text;
    auto g = Compile(spec, vocab);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    Matcher m(*g);
    std::vector<uint32_t> mask(m.bitmask_words());
    std::vector<int32_t> history;
    uint64_t rng = 99;
    for (int step = 0; step < 60; ++step) {
      m.FillNextTokenBitmask(mask);
      if (step % 3 == 0) {
        for (int32_t t = 0; t < vocab->size(); ++t) {
          Matcher replay(*g);
          for (int32_t h : history) ASSERT_TRUE(replay.AcceptToken(h));
          const bool want = replay.AcceptToken(t);
          const bool got = (mask[t / 32] >> (t % 32)) & 1;
          ASSERT_EQ(got, want) << "token '" << vocab->token_bytes(t) << "' after " << history.size()
                               << " tokens of " << text;
        }
        ++num_checked;
      }
      // Prefer opening tokens so the stacks grow deep: the allowed token with the most '{[('.
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->size(); ++t) {
        if (((mask[t / 32] >> (t % 32)) & 1) && !vocab->is_stop_token(t)) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      rng = SplitMix64(rng);
      int32_t pick = allowed[rng % allowed.size()];
      if (rng % 4 != 0) {
        for (int32_t t : allowed) {
          const std::string& b = vocab->token_bytes(t);
          if (b == "[" || b == "{\"" || b == "(" || b == "[{" || b == "\":{\"" || b == "\":[") {
            pick = t;
            break;
          }
        }
      }
      ASSERT_TRUE(m.AcceptToken(pick));
      history.push_back(pick);
    }
    // The walk went deep enough that some masks needed the stack below the cached frames.
    if (kind == ConstraintKind::kGrammar) {
      EXPECT_GT((*g)->mask_cache().num_entries_with_uncertain(), 0u) << text;
    }
  }
  EXPECT_GE(num_checked, 60);
}

TEST(RandomWalkTest, ChoiceOutputsAreOneOfTheChoices) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kChoice;
  spec.choices = {"alpha", "beta", "al", "gamma delta", "\"quoted\"\n", "\xC3\xA9t\xC3\xA9"};
  WalkResult r = Walk(spec, 7);
  EXPECT_EQ(r.num_unfinished, 0);
  for (const std::string& out : r.finished) {
    EXPECT_NE(std::find(spec.choices.begin(), spec.choices.end(), out), spec.choices.end()) << out;
  }
}

}  // namespace
}  // namespace tinyserve::structured
