// The sampling rules (kernels/cpu/cpu_sampler.h) from a request's SamplingParams, through the
// spec and history the executor keeps (models/sampling_state_table.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/request.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_sampler.h"
#include "models/sampling_state_table.h"

namespace tinyserve {
namespace {

// A request's next token as the executor samples it: the spec made from its params, its history
// from its tokens, its output index.
class Sampler {
 public:
  explicit Sampler(int32_t vocab_size) : vocab_size_(vocab_size), cpu_(vocab_size) {}
  int32_t Sample(const Request& r, const float* logits, TokenLogprobs* logprobs) {
    std::vector<int32_t> eos_ids = extra_eos_ids_;
    if (r.eos_token_id) eos_ids.insert(eos_ids.begin(), *r.eos_token_id);
    const SamplingSpec spec =
        SamplingStateTable::MakeSpec(r.sampling, r.seed, eos_ids, vocab_size_);
    PenaltyState history;
    history.Reset(r.token_ids, r.num_prompt_tokens);
    return cpu_.Sample({&spec, &history, static_cast<uint64_t>(r.num_output_tokens())}, logits,
                       logprobs);
  }
  void FillLogprobs(const float* logits, int32_t token, int32_t n, TokenLogprobs* out) {
    cpu_.FillLogprobs(logits, token, n, out);
  }
  // The engine's other EOS ids (EngineConfig::extra_eos_token_ids), after each request's own.
  void set_extra_eos_ids(std::vector<int32_t> ids) { extra_eos_ids_ = std::move(ids); }

 private:
  const int32_t vocab_size_;
  std::vector<int32_t> extra_eos_ids_;
  CpuSampler cpu_;
};

Request MakeRequest(std::vector<int32_t> prompt, std::vector<int32_t> outputs = {}) {
  Request r;
  r.num_prompt_tokens = static_cast<int32_t>(prompt.size());
  r.token_ids = std::move(prompt);
  r.token_ids.insert(r.token_ids.end(), outputs.begin(), outputs.end());
  r.sampling.temperature = 0.0f;
  return r;
}

std::vector<float> LogitsOfProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Tokens drawn over seeds 0..n-1 (output index 0).
std::set<int32_t> Draws(Request r, const std::vector<float>& logits, int n) {
  Sampler sampler(static_cast<int32_t>(logits.size()));
  std::set<int32_t> seen;
  for (int s = 0; s < n; ++s) {
    r.seed = static_cast<uint64_t>(s);
    seen.insert(sampler.Sample(r, logits.data(), nullptr));
  }
  return seen;
}

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      Philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(
      Philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(SamplingUniformTest, IsInUnitIntervalAndRoughlyUniform) {
  double sum = 0.0;
  for (uint64_t i = 0; i < 20000; ++i) {
    const double u = SamplingUniform(7, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 20000, 0.5, 0.01);
  EXPECT_EQ(SamplingUniform(7, 3), SamplingUniform(7, 3));
  EXPECT_NE(SamplingUniform(7, 3), SamplingUniform(8, 3));
  EXPECT_NE(SamplingUniform(7, 3), SamplingUniform(7, 4));
}

TEST(SamplerTest, GreedyTakesTheFirstMaximum) {
  Sampler sampler(5);
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 2.0f};
  EXPECT_EQ(sampler.Sample(MakeRequest({0}), logits.data(), nullptr), 1);
}

// The sampler's argmax on every instruction set this CPU has gives the scalar loop's index
// (`if (x[i] > x[best]) best = i`): ties to the lower index (in one vector, across vectors and in
// the tail), +0 and -0 equal, NaNs never winning, index 0 kept when x[0] is a NaN, all -inf.
TEST(SamplerTest, VectorArgmaxIsTheScalarLoopsIndex) {
  auto scalar = [](const std::vector<float>& x) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i) {
      if (x[i] > x[best]) best = i;
    }
    return best;
  };
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<std::vector<float>> rows;
  for (const int32_t n : {1, 2, 15, 63, 64, 65, 100, 1000, 32000, 32003}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    rows.push_back(x);
    std::vector<float> ties = x;  // the max three times: in a vector, a later one, the tail
    for (int32_t at : {n / 3, n / 3 + 1, n - 1}) {
      if (at < n) ties[at] = 9.0f;
    }
    rows.push_back(ties);
    std::vector<float> zeros(n);  // only zeros and negatives: the first zero of either sign
    for (int32_t i = 0; i < n; ++i) zeros[i] = i % 3 == 0 ? -1.0f : (i % 2 ? 0.0f : -0.0f);
    rows.push_back(zeros);
    std::vector<float> nans = x;  // NaNs never win
    for (int32_t i = 1; i < n; i += 7) nans[i] = nan;
    rows.push_back(nans);
    std::vector<float> nan_first = x;  // the scalar loop keeps index 0
    nan_first[0] = nan;
    rows.push_back(nan_first);
    rows.push_back(std::vector<float>(n, -inf));
    std::vector<float> neg_inf_nan(n, -inf);
    for (int32_t i = 1; i < n; i += 5) neg_inf_nan[i] = nan;
    rows.push_back(neg_inf_nan);
    std::vector<float> last = x;  // the max in the last element, and an inf
    last[n - 1] = inf;
    rows.push_back(last);
  }
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (!SetCpuArgmaxIsaForTesting(isa)) continue;  // this CPU cannot run it
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(CpuArgmaxForTesting(rows[r].data(), static_cast<int32_t>(rows[r].size())),
                scalar(rows[r]))
          << isa << ", row " << r << " of " << rows[r].size();
    }
  }
  SetCpuArgmaxIsaForTesting("best");
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  Sampler sampler(3);
  const std::vector<float> logits = {3.0f, -1.0f, 2.5f};
  Request r = MakeRequest({0, 1});
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 0);
  r.sampling.repetition_penalty = 2.0f;  // 3 -> 1.5, -1 -> -2: token 2 wins
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 2);
  const std::vector<float> negative = {-1.0f, -1.5f, -1.8f};
  Request n = MakeRequest({0});
  n.sampling.repetition_penalty = 2.0f;  // -1 -> -2: token 1 wins
  EXPECT_EQ(sampler.Sample(n, negative.data(), nullptr), 1);
}

TEST(SamplerTest, FrequencyAndPresencePenaltiesCountOutputsOnly) {
  Sampler sampler(3);
  const std::vector<float> logits = {2.0f, 1.9f, 1.0f};
  // Token 0 in the prompt only: no effect.
  Request prompt_only = MakeRequest({0, 0, 0});
  prompt_only.sampling.frequency_penalty = 1.0f;
  EXPECT_EQ(sampler.Sample(prompt_only, logits.data(), nullptr), 0);
  // Token 0 generated twice: frequency 0.3 * 2 = 0.6 -> 1.4 < 1.9.
  Request freq = MakeRequest({2}, {0, 0});
  freq.sampling.frequency_penalty = 0.3f;
  EXPECT_EQ(sampler.Sample(freq, logits.data(), nullptr), 1);
  // Once, frequency 0.05 -> 1.95 > 1.9; plus presence 0.1 -> 1.85 < 1.9.
  Request once = MakeRequest({2}, {0});
  once.sampling.frequency_penalty = 0.05f;
  EXPECT_EQ(sampler.Sample(once, logits.data(), nullptr), 0);
  once.sampling.presence_penalty = 0.1f;
  EXPECT_EQ(sampler.Sample(once, logits.data(), nullptr), 1);
}

TEST(SamplerTest, MinTokensMasksEosAndStopTokens) {
  Sampler sampler(4);
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 3.0f};
  Request r = MakeRequest({0}, {3});
  r.eos_token_id = 1;
  r.sampling.stop_token_ids = {2};
  r.sampling.min_tokens = 2;  // one output so far: mask EOS (1) and the stop id (2)
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 3);
  r.token_ids.push_back(3);  // two outputs: no mask
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 1);
  r.token_ids.pop_back();
  r.sampling.ignore_eos = true;  // EOS is an ordinary token then; the stop id stays masked
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 1);
}

// Regression: min_tokens masked only the request's own EOS, so a model's other EOS id (e.g.
// Llama-3's <|eot_id|>) could end the request before min_tokens outputs.
TEST(SamplerTest, MinTokensMasksEveryEosIdAndTheStopIds) {
  Sampler sampler(6);
  sampler.set_extra_eos_ids({4});
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f, 3.0f, 9.0f, 8.0f};
  Request r = MakeRequest({0});
  r.eos_token_id = 1;
  r.sampling.stop_token_ids = {5, 4};
  r.sampling.min_tokens = 1;
  // No output yet: 4 (extra EOS, and a stop id) and 5 (stop id) masked; 3 is the best left.
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 3);
  // The extra EOS id forced by logit_bias stays masked (-inf + bias is -inf).
  r.sampling.logit_bias = {{4, 100.0f}};
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 3);
  // The EOS ids, then the stop ids not listed yet.
  const SamplingSpec spec =
      SamplingStateTable::MakeSpec(r.sampling, 0, std::vector<int32_t>{1, 4}, 6);
  EXPECT_EQ(spec.min_tokens_masked_ids, (std::vector<int32_t>{1, 4, 5}));
  // ignore_eos: the EOS ids are ordinary tokens, the stop ids stay masked (4 is one of them).
  r.sampling.ignore_eos = true;
  r.sampling.logit_bias = {{1, 100.0f}};
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 1);
  r.sampling.stop_token_ids = {5};
  r.sampling.logit_bias.clear();
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 4);
  // Once min_tokens outputs exist nothing is masked: the forced extra EOS wins.
  r.sampling.ignore_eos = false;
  r.sampling.logit_bias = {{4, 100.0f}};
  r.token_ids.push_back(3);
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 4);
}

TEST(SamplerTest, LogitBiasIsAddedAfterTheMinTokensMaskAndBeforePenalties) {
  Sampler sampler(4);
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 3.0f};
  Request r = MakeRequest({0});
  r.sampling.logit_bias = {{3, 2.5f}};  // 3 + 2.5 = 5.5 > 5
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 3);
  r.sampling.logit_bias = {{1, -100.0f}};  // the maximum pushed down: 2 wins
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 2);
  // A masked token stays masked: -inf + 100 is -inf.
  r.eos_token_id = 3;
  r.sampling.min_tokens = 1;
  r.sampling.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 1);
  // Penalties apply to the biased logit: 3 + 3 = 6 (> 0) / 2 = 3 < 5.
  Request p = MakeRequest({3});
  p.sampling.logit_bias = {{3, 3.0f}};
  EXPECT_EQ(sampler.Sample(p, logits.data(), nullptr), 3);
  p.sampling.repetition_penalty = 2.0f;
  EXPECT_EQ(sampler.Sample(p, logits.data(), nullptr), 1);
  // Sampled logprobs stay raw (vLLM): the bias does not show in them.
  Request lp = MakeRequest({0});
  lp.sampling.logit_bias = {{3, 10.0f}};
  lp.sampling.logprobs = 0;
  TokenLogprobs out;
  EXPECT_EQ(sampler.Sample(lp, logits.data(), &out), 3);
  EXPECT_EQ(out.rank, 3);  // below 5 and 4 in the raw logits
  EXPECT_FLOAT_EQ(out.logprob, 3.0f - std::log(std::exp(0.0f) + std::exp(5.0f) + std::exp(4.0f) +
                                               std::exp(3.0f)));
  // Random draws see the bias too: with +inf-like bias only token 0 can be drawn.
  Request d = MakeRequest({0});
  d.sampling.temperature = 1.0f;
  d.sampling.logit_bias = {{0, 100.0f}};
  EXPECT_EQ(Draws(d, logits, 50), std::set<int32_t>{0});
}

TEST(SamplerTest, AllowedTokenIdsMaskEveryOtherToken) {
  Sampler sampler(4);
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 3.0f};
  Request r = MakeRequest({0});
  r.sampling.allowed_token_ids = {0, 3};
  EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 3);
  r.sampling.temperature = 1.0f;
  EXPECT_EQ(Draws(r, logits, 200), (std::set<int32_t>{0, 3}));
  // Raw logprobs still rank against the whole vocabulary.
  r.sampling.temperature = 0.0f;
  r.sampling.logprobs = 1;
  TokenLogprobs out;
  EXPECT_EQ(sampler.Sample(r, logits.data(), &out), 3);
  EXPECT_EQ(out.rank, 3);
  ASSERT_EQ(out.top.size(), 1u);
  EXPECT_EQ(out.top[0].first, 1);
}

// A structured-output bitmask (kernels/sampling.h layout) masks like allowed_token_ids, on top of
// it, on vocabularies that do not fill the last word; the fallback respects it too.
TEST(SamplerTest, TokenBitmaskMasksEveryTokenWhoseBitIsZero) {
  for (int32_t v : {5, 33, 64, 1000}) {
    CpuSampler cpu(v);
    std::vector<float> logits(v);
    for (int32_t t = 0; t < v; ++t) logits[t] = static_cast<float>((t * 37) % 101) / 100.0f;
    std::vector<uint32_t> mask((v + 31) / 32, 0u);
    const std::vector<int32_t> allowed = {1, v - 1, v / 2};
    for (int32_t t : allowed) mask[t / 32] |= 1u << (t % 32);
    SamplingSpec greedy;
    greedy.temperature = 0.0f;
    int32_t want = allowed[0];
    for (int32_t t : allowed) {
      if (logits[t] > logits[want] || (logits[t] == logits[want] && t < want)) want = t;
    }
    SampleRow row{&greedy, nullptr, 0};
    row.token_bitmask = mask.data();
    EXPECT_EQ(cpu.Sample(row, logits.data(), nullptr), want) << "v=" << v;
    // Random draws only ever land on allowed bits.
    SamplingSpec random;
    std::set<int32_t> seen;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      random.seed = seed;
      SampleRow r{&random, nullptr, seed};
      r.token_bitmask = mask.data();
      seen.insert(cpu.Sample(r, logits.data(), nullptr));
    }
    EXPECT_EQ(seen, std::set<int32_t>(allowed.begin(), allowed.end())) << "v=" << v;
    // With allowed_token_ids as well: the intersection.
    SamplingSpec both = greedy;
    both.allowed_token_ids = {0, v - 1};
    SampleRow b{&both, nullptr, 0};
    b.token_bitmask = mask.data();
    EXPECT_EQ(cpu.Sample(b, logits.data(), nullptr), v - 1) << "v=" << v;
    // A null bitmask changes nothing.
    SampleRow plain{&greedy, nullptr, 0};
    int32_t argmax = 0;
    for (int32_t t = 1; t < v; ++t) argmax = logits[t] > logits[argmax] ? t : argmax;
    EXPECT_EQ(cpu.Sample(plain, logits.data(), nullptr), argmax) << "v=" << v;
  }
}

// Every allowed logit overflowed to -inf by a penalty: the fallback still picks an allowed bit.
TEST(SamplerTest, AllMinusInfinityFallbackStaysInsideTheBitmask) {
  CpuSampler cpu(40);
  std::vector<float> logits(40, -1e38f);
  logits[7] = 3.0f;  // the raw argmax, not allowed
  logits[35] = -1e38f;
  logits[36] = -2e37f;  // the best allowed raw logit
  std::vector<uint32_t> mask(2, 0u);
  mask[1] = (1u << (35 - 32)) | (1u << (36 - 32));
  SamplingSpec sp;
  sp.temperature = 0.0f;
  sp.repetition_penalty = 1e30f;  // negative logits * 1e30 -> -inf
  PenaltyState history;
  history.Reset({35, 36}, 2);
  SampleRow row{&sp, &history, 0};
  row.token_bitmask = mask.data();
  EXPECT_EQ(cpu.Sample(row, logits.data(), nullptr), 36);
}

// Stop ids covering every token the request may sample (the vocabulary, or all of its allowed
// ids) with min_tokens: masking would leave nothing to draw, so that step is not masked. (The
// random draw used to find no token and return -1.)
TEST(SamplerTest, MinTokensMaskThatWouldLeaveNoTokenIsDropped) {
  Sampler sampler(4);
  const std::vector<float> logits = {0.0f, 5.0f, 4.0f, 3.0f};
  for (float temperature : {0.0f, 1.0f}) {
    Request r = MakeRequest({0});
    r.sampling.temperature = temperature;
    r.sampling.min_tokens = 3;
    r.sampling.stop_token_ids = {0, 1, 2, 3};
    r.seed = 5;
    const int32_t t = sampler.Sample(r, logits.data(), nullptr);
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 4);
    if (temperature == 0.0f) {
      EXPECT_EQ(t, 1);
    }
    r.sampling.stop_token_ids = {2, 3};
    r.sampling.allowed_token_ids = {2, 3};
    const int32_t a = sampler.Sample(r, logits.data(), nullptr);
    EXPECT_TRUE(a == 2 || a == 3) << a;
    if (temperature == 0.0f) {
      EXPECT_EQ(a, 2);
    }
    // With one allowed token left unmasked, the mask holds.
    r.sampling.allowed_token_ids = {0, 2, 3};
    EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 0);
  }
}

// A repetition penalty large enough to overflow every allowed (negative) logit to -inf: the
// token is the raw argmax among the allowed ids, not token 0 and not a failed draw.
TEST(SamplerTest, EveryTokenAtMinusInfinityFallsBackToTheRawAllowedArgmax) {
  Sampler sampler(4);
  const std::vector<float> logits = {9.0f, -5.0f, -4.0f, 3.0f};
  for (float temperature : {0.0f, 1.0f}) {
    Request r = MakeRequest({1, 2});
    r.sampling.temperature = temperature;
    r.sampling.allowed_token_ids = {1, 2};
    r.sampling.repetition_penalty = 1e38f;
    EXPECT_EQ(sampler.Sample(r, logits.data(), nullptr), 2) << temperature;
  }
}

TEST(SamplerTest, TopKKeepsTheKMostLikely) {
  Request r = MakeRequest({0});
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 2;
  EXPECT_EQ(Draws(r, LogitsOfProbs({0.1, 0.4, 0.2, 0.3}), 300), (std::set<int32_t>{1, 3}));
  // Ties at the k-th value are all kept.
  EXPECT_EQ(Draws(r, LogitsOfProbs({0.1, 0.4, 0.25, 0.25}), 300), (std::set<int32_t>{1, 2, 3}));
  r.sampling.top_k = 0;  // off
  EXPECT_EQ(Draws(r, LogitsOfProbs({0.1, 0.4, 0.2, 0.3}), 300), (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  Request r = MakeRequest({0});
  r.sampling.temperature = 1.0f;
  const std::vector<float> logits = LogitsOfProbs({0.05, 0.5, 0.15, 0.3});
  r.sampling.top_p = 0.75f;  // 0.5 + 0.3 >= 0.75
  EXPECT_EQ(Draws(r, logits, 300), (std::set<int32_t>{1, 3}));
  r.sampling.top_p = 0.85f;  // needs 0.15 too
  EXPECT_EQ(Draws(r, logits, 300), (std::set<int32_t>{1, 2, 3}));
  r.sampling.top_p = 0.01f;  // the most likely is always kept
  EXPECT_EQ(Draws(r, logits, 300), (std::set<int32_t>{1}));
}

TEST(SamplerTest, TopPOnALargeVocabularyDrawsOnlyFromTheNucleus) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float top_p : {0.5f, 0.9f, 0.99f}) {
    std::vector<float> logits(1000);
    for (float& l : logits) l = normal(rng);
    // Reference: sort everything descending and keep the smallest prefix reaching top_p.
    std::vector<int32_t> ids(1000);
    for (int32_t i = 0; i < 1000; ++i) ids[i] = i;
    std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    double total = 0.0;
    for (float l : logits) total += std::exp(static_cast<double>(l));
    std::set<int32_t> nucleus;
    double mass = 0.0;
    for (int32_t id : ids) {
      nucleus.insert(id);
      mass += std::exp(static_cast<double>(logits[id])) / total;
      if (mass >= top_p) break;
    }
    Request r = MakeRequest({0});
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = top_p;
    const std::set<int32_t> drawn = Draws(r, logits, 500);
    for (int32_t t : drawn) EXPECT_TRUE(nucleus.count(t)) << "top_p " << top_p << " token " << t;
    if (nucleus.size() > 1) {
      EXPECT_GT(drawn.size(), 1u);
    }
  }
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheMaximum) {
  Request r = MakeRequest({0});
  r.sampling.temperature = 1.0f;
  r.sampling.min_p = 0.2f;  // threshold 0.2 * 0.5 = 0.1
  EXPECT_EQ(Draws(r, LogitsOfProbs({0.05, 0.5, 0.15, 0.3}), 300), (std::set<int32_t>{1, 2, 3}));
}

TEST(SamplerTest, DrawFollowsTheDistribution) {
  Request r = MakeRequest({0});
  r.sampling.temperature = 1.0f;
  const std::vector<float> logits = LogitsOfProbs({0.1, 0.6, 0.3});
  Sampler sampler(3);
  int counts[3] = {0, 0, 0};
  for (int s = 0; s < 6000; ++s) {
    r.seed = static_cast<uint64_t>(s);
    ++counts[sampler.Sample(r, logits.data(), nullptr)];
  }
  EXPECT_NEAR(counts[0] / 6000.0, 0.1, 0.02);
  EXPECT_NEAR(counts[1] / 6000.0, 0.6, 0.02);
  EXPECT_NEAR(counts[2] / 6000.0, 0.3, 0.02);
}

TEST(SamplerTest, SeededDrawDependsOnlyOnSeedOutputIndexAndLogits) {
  const std::vector<float> logits = LogitsOfProbs({0.2, 0.2, 0.2, 0.2, 0.2});
  auto make = [](uint64_t seed, int32_t num_outputs) {
    Request r = MakeRequest({0});
    r.sampling.temperature = 0.8f;
    r.seed = seed;
    r.token_ids.insert(r.token_ids.end(), num_outputs, 4);
    return r;
  };
  // Reference: each (seed, index) sampled alone by a fresh sampler.
  std::vector<int32_t> alone;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    for (int32_t i = 0; i < 8; ++i) {
      Sampler fresh(5);
      alone.push_back(fresh.Sample(make(seed, i), logits.data(), nullptr));
    }
  }
  // The same draws interleaved in another order through one shared sampler ("batched").
  Sampler shared(5);
  for (int32_t i = 7; i >= 0; --i) {
    for (uint64_t seed = 4; seed-- > 0;) {
      EXPECT_EQ(shared.Sample(make(seed, i), logits.data(), nullptr), alone[seed * 8 + i]);
    }
  }
  std::set<int32_t> distinct(alone.begin(), alone.end());
  EXPECT_GT(distinct.size(), 1u);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxWithRankAndTopN) {
  Sampler sampler(4);
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  Request r = MakeRequest({0}, {1});
  r.sampling.logprobs = 2;
  r.sampling.repetition_penalty = 10.0f;  // changes the choice, not the reported logprobs
  TokenLogprobs lp;
  const int32_t token = sampler.Sample(r, logits.data(), &lp);
  EXPECT_EQ(token, 3);
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  EXPECT_EQ(lp.token_id, 3);
  EXPECT_NEAR(lp.logprob, 3.0 - lse, 1e-6);
  EXPECT_EQ(lp.rank, 1);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);  // ties: lower id first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_NEAR(lp.top[0].second, 3.0 - lse, 1e-6);

  r.sampling.repetition_penalty = 1.0f;
  r.sampling.logprobs = 0;
  r.token_ids = {0, 2};
  r.num_prompt_tokens = 1;
  r.sampling.stop_token_ids = {1, 3};
  r.sampling.min_tokens = 5;
  sampler.Sample(r, logits.data(), &lp);
  EXPECT_EQ(lp.token_id, 2);
  EXPECT_EQ(lp.rank, 3);
  EXPECT_NEAR(lp.logprob, 2.0 - lse, 1e-6);
  EXPECT_TRUE(lp.top.empty());
}

TEST(SamplingParamsTest, ValidateRejectsOutOfRangeFields) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate(10).ok());
  p.top_p = 0.0f;
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams{};
  p.stop_token_ids = {10};
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams{};
  p.min_tokens = 20;
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams{};
  p.logprobs = 21;
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams{};
  p.temperature = -1.0f;
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams{};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_FALSE(p.Validate(10).ok());
  p.logit_bias = {{9, std::nanf("")}};
  EXPECT_FALSE(p.Validate(10).ok());
  p.logit_bias = {{9, -100.0f}};
  EXPECT_TRUE(p.Validate(10).ok());
  p.allowed_token_ids = {0, 10};
  EXPECT_FALSE(p.Validate(10).ok());
}

// The executor extends a request's history one accepted token at a time; that must equal the
// history built from scratch from prompt + outputs (what a registration after a recompute does).
TEST(PenaltyStateTest, IncrementalHistoryEqualsTheHistoryRebuiltFromTheTokens) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> tok(0, 40);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 25; ++i) tokens.push_back(tok(rng));
  const int32_t num_prompt = 25;
  PenaltyState incremental;
  incremental.Reset(tokens, num_prompt);
  for (int i = 0; i < 60; ++i) {
    const int32_t t = tok(rng);
    tokens.push_back(t);
    incremental.AddOutput(t);
    PenaltyState rebuilt;
    rebuilt.Reset(tokens, num_prompt);
    ASSERT_EQ(incremental.distinct_tokens(), rebuilt.distinct_tokens());
    ASSERT_EQ(incremental.output_counts(), rebuilt.output_counts());
    ASSERT_EQ(incremental.num_outputs(), i + 1);
  }
  std::map<int32_t, int32_t> want;
  for (size_t i = num_prompt; i < tokens.size(); ++i) ++want[tokens[i]];
  std::map<int32_t, int32_t> got(incremental.output_counts().begin(),
                                 incremental.output_counts().end());
  EXPECT_EQ(got, want);
}

// Through the table, as the executor runs it: registration, rows, accepted tokens, release.
TEST(SamplingStateTableTest, FollowsARequestFromRegistrationToRelease) {
  SamplingStateTable table(8);
  ScheduledBatch b;
  b.max_blocks_per_seq = 1;
  b.AddSequence({1, 2}, {0, 1}, {0, 1}, 2, {0}, true);
  b.request_keys = {7};
  b.output_index = {0};
  SamplingRegistration reg;
  reg.key = 7;
  reg.params.repetition_penalty = 2.0f;
  reg.params.stop_token_ids = {5};
  reg.params.min_tokens = 3;
  reg.eos_token_ids = {6};
  reg.token_ids = {1, 2};
  reg.num_prompt_tokens = 2;
  b.new_requests = {reg};
  table.Apply(b);
  auto rows = table.Rows(b);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].spec->min_tokens_masked_ids, (std::vector<int32_t>{6, 5}));
  EXPECT_EQ((*rows)[0].penalties->distinct_tokens(), (std::vector<int32_t>{1, 2}));
  TokenLogprobs sampled;
  sampled.token_id = 4;
  table.Accept(b, {sampled});
  EXPECT_EQ((*rows)[0].penalties->distinct_tokens(), (std::vector<int32_t>{1, 2, 4}));
  // The next step names it again without registering it.
  b.new_requests.clear();
  b.output_index = {1};
  ASSERT_TRUE(table.Rows(b).ok());
  table.Release({7, 99});  // an unknown key is ignored
  EXPECT_EQ(table.size(), 0u);
  auto gone = table.Rows(b);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("key 7"), std::string::npos) << gone.status().ToString();
}

}  // namespace
}  // namespace tinyserve
