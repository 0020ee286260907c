#include "kernels/cpu/cpu_sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tinyserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t ArgmaxScalar(const float* x, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

#if defined(__x86_64__)
// ArgmaxScalar's index in two vector passes: the largest value over the non-NaN elements (vmaxps
// with the element first returns the running max when the element is a NaN), then the first
// element equal to it (+0 and -0 compare equal, as the scalar > sees them). When x[0] is a NaN
// the scalar loop keeps index 0 (nothing compares greater than a NaN), so that row goes to it.
__attribute__((target("avx512f"))) int32_t ArgmaxAvx512(const float* x, int32_t n) {
  if (n < 64 || std::isnan(x[0])) return ArgmaxScalar(x, n);
  __m512 m = _mm512_set1_ps(kNegInf);
  int32_t i = 0;
  // (The maskz form: g++ 12 warns that the plain one's _mm512_undefined_ps is uninitialized.)
  for (; i + 16 <= n; i += 16) m = _mm512_maskz_max_ps(0xffff, _mm512_loadu_ps(x + i), m);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, m);
  float best = kNegInf;
  for (float v : lanes) best = std::max(best, v);
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  const __m512 b = _mm512_set1_ps(best);
  for (i = 0; i + 16 <= n; i += 16) {
    const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), b, _CMP_EQ_OQ);
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // unreachable: some element holds the max
}

__attribute__((target("avx2"))) int32_t ArgmaxAvx2(const float* x, int32_t n) {
  if (n < 64 || std::isnan(x[0])) return ArgmaxScalar(x, n);
  __m256 m = _mm256_set1_ps(kNegInf);
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float best = kNegInf;
  for (float v : lanes) best = std::max(best, v);
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  const __m256 b = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_EQ_OQ));
    if (eq != 0) return i + __builtin_ctz(static_cast<unsigned>(eq));
  }
  for (; i < n; ++i) {
    if (x[i] == best) return i;
  }
  return 0;  // unreachable: some element holds the max
}
#endif

using ArgmaxFn = int32_t (*)(const float*, int32_t);
ArgmaxFn BestArgmax() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return ArgmaxAvx512;
  if (__builtin_cpu_supports("avx2")) return ArgmaxAvx2;
#endif
  return ArgmaxScalar;
}
ArgmaxFn& ActiveArgmax() {
  static ArgmaxFn fn = BestArgmax();
  return fn;
}

// The first index of the largest element (the scalar loop's: ties to the lower index, NaNs never
// win, index 0 when x[0] is a NaN). A greedy row's whole sampling cost: a batch-32 decode step
// spent 1.7% of its time in the scalar loop.
int32_t Argmax(const float* x, int32_t n) { return ActiveArgmax()(x, n); }

void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kM0, c[0], &hi0, &lo0);
    MulHiLo(kM1, c[2], &hi1, &lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

double SamplingUniform(uint64_t seed, uint64_t index) {
  const std::array<uint32_t, 4> r =
      Philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = ((static_cast<uint64_t>(r[0]) << 32) | r[1]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

void PenaltyState::Reset(const std::vector<int32_t>& token_ids, int32_t num_prompt_tokens) {
  seen_.clear();
  distinct_.clear();
  counts_.clear();
  num_outputs_ = 0;
  for (int32_t i = 0; i < num_prompt_tokens; ++i) {
    if (seen_.emplace(token_ids[i], 0).second) distinct_.push_back(token_ids[i]);
  }
  for (size_t i = num_prompt_tokens; i < token_ids.size(); ++i) AddOutput(token_ids[i]);
}

void PenaltyState::AddOutput(int32_t token) {
  ++num_outputs_;
  auto [it, inserted] = seen_.emplace(token, 0);
  if (inserted) distinct_.push_back(token);
  if (it->second == 0) {
    counts_.emplace_back(token, 1);
    it->second = static_cast<int32_t>(counts_.size());
  } else {
    ++counts_[it->second - 1].second;
  }
}

CpuSampler::CpuSampler(int32_t vocab_size) : vocab_size_(vocab_size), x_(vocab_size) {}

// Each token's logit is changed by its own counts only, so the order of the ids does not matter.
void CpuSampler::ApplyPenalties(const SamplingSpec& sp, const PenaltyState& history) {
  float* x = x_.data();
  if (sp.repetition_penalty != 1.0f) {
    for (int32_t t : history.distinct_tokens()) {
      x[t] = x[t] > 0 ? x[t] / sp.repetition_penalty : x[t] * sp.repetition_penalty;
    }
  }
  if (sp.frequency_penalty != 0.0f || sp.presence_penalty != 0.0f) {
    for (const auto& [t, count] : history.output_counts()) {
      x[t] -= sp.frequency_penalty * static_cast<float>(count) + sp.presence_penalty;
    }
  }
}

int32_t CpuSampler::RawFallback(const SampleRow& row, const float* logits) const {
  const std::vector<int32_t>& allowed = row.spec->allowed_token_ids;
  // The first maximum (in id order) among the candidates the bitmask allows; when it allows none
  // of them, among all of the candidates.
  for (const uint32_t* bitmask : {row.token_bitmask, static_cast<const uint32_t*>(nullptr)}) {
    int32_t best = -1;
    auto consider = [&](int32_t t) {
      if (!BitmaskAllows(bitmask, t)) return;
      if (best < 0 || logits[t] > logits[best] || (logits[t] == logits[best] && t < best)) best = t;
    };
    if (allowed.empty()) {
      for (int32_t t = 0; t < vocab_size_; ++t) consider(t);
    } else {
      for (int32_t t : allowed) consider(t);
    }
    if (best >= 0) return best;
  }
  return 0;  // unreachable: the second pass considers every candidate
}

void CpuSampler::MaskStops(const SamplingSpec& sp, float* x) {
  masked_.clear();
  auto mask = [&](int32_t t) {
    if (x[t] == kNegInf) return;
    masked_.emplace_back(t, x[t]);
    x[t] = kNegInf;
  };
  for (int32_t t : sp.min_tokens_masked_ids) mask(t);
  // Stop ids covering every token left (the whole vocabulary, or all of allowed_token_ids): the
  // request cannot go on without one, so this step is not masked (rather than sampling nothing).
  if (x[Argmax(x, vocab_size_)] == kNegInf) {
    for (const auto& [t, value] : masked_) x[t] = value;
  }
}

void CpuSampler::FillLogprobs(const float* logits, int32_t token, int32_t n, TokenLogprobs* out) {
  const float max = logits[Argmax(logits, vocab_size_)];
  double sum = 0.0;
  for (int32_t i = 0; i < vocab_size_; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double lse = max + std::log(sum);
  auto logprob = [&](int32_t i) { return static_cast<float>(logits[i] - lse); };
  out->token_id = token;
  out->logprob = logprob(token);
  out->rank = 1;
  for (int32_t i = 0; i < vocab_size_; ++i) out->rank += logits[i] > logits[token];
  out->top.clear();
  n = std::min(n, vocab_size_);
  if (n == 0) return;
  order_.resize(vocab_size_);
  for (int32_t i = 0; i < vocab_size_; ++i) order_[i] = i;
  std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int32_t i = 0; i < n; ++i) out->top.emplace_back(order_[i], logprob(order_[i]));
}

int32_t CpuSampler::Sample(const SampleRow& row, const float* logits, TokenLogprobs* logprobs) {
  const SamplingSpec& sp = *row.spec;
  const int32_t v = vocab_size_;
  const bool mask_stops = row.output_index < static_cast<uint64_t>(std::max(sp.min_tokens, 0));
  const bool has_penalties = sp.has_penalties();
  int32_t token;
  const uint32_t* bitmask = row.token_bitmask;
  if (sp.is_greedy() && !mask_stops && !has_penalties && sp.logit_bias.empty() &&
      sp.allowed_token_ids.empty() && bitmask == nullptr) {
    token = Argmax(logits, v);  // the common fast path: no copy
  } else {
    float* x = x_.data();
    if (sp.allowed_token_ids.empty()) {
      std::copy(logits, logits + v, x);
    } else {
      std::fill(x, x + v, kNegInf);
      for (int32_t t : sp.allowed_token_ids) x[t] = logits[t];
    }
    if (bitmask != nullptr) {
      for (int32_t t = 0; t < v; ++t) {
        if (!BitmaskAllows(bitmask, t)) x[t] = kNegInf;
      }
    }
    if (mask_stops) MaskStops(sp, x);
    for (const auto& [t, bias] : sp.logit_bias) x[t] += bias;
    if (has_penalties) {
      assert(row.penalties != nullptr);
      ApplyPenalties(sp, *row.penalties);
    }
    const int32_t best = Argmax(x, v);  // one pass: the all -inf check, greedy, and the max
    if (x[best] == kNegInf) {
      token = RawFallback(row, logits);
    } else if (sp.is_greedy()) {
      token = best;
    } else {
      for (int32_t i = 0; i < v; ++i) x[i] /= sp.temperature;
      float max = x[best];  // dividing by temperature > 0 keeps the argmax
      if (sp.min_p > 0.0f) {
        // prob_i / max_prob = exp(x_i - max).
        for (int32_t i = 0; i < v; ++i) {
          if (std::exp(static_cast<double>(x[i]) - max) < sp.min_p) x[i] = kNegInf;
        }
      }
      if (sp.top_k > 0 && sp.top_k < v) {
        values_.assign(x, x + v);
        std::nth_element(values_.begin(), values_.begin() + (sp.top_k - 1), values_.end(),
                         std::greater<float>());
        const float kth = values_[sp.top_k - 1];
        for (int32_t i = 0; i < v; ++i) {
          if (x[i] < kth) x[i] = kNegInf;
        }
      }
      if (sp.top_p < 1.0f) {
        // vLLM's rule: in ascending probability order, drop tokens while the cumulative
        // probability stays <= 1 - top_p; the most likely token is always kept.
        const double drop_mass = 1.0 - static_cast<double>(sp.top_p);
        weights_.resize(v);
        double total = 0.0;
        for (int32_t i = 0; i < v; ++i) {
          weights_[i] = std::exp(static_cast<double>(x[i]) - max);
          total += weights_[i];
        }
        // Tokens with probability <= drop_mass / vocab come first in that order and weigh at
        // most drop_mass together, so they are dropped whatever the order: sort only the rest.
        const double small = drop_mass / v * total;
        double cum = 0.0;
        order_.clear();
        for (int32_t i = 0; i < v; ++i) {
          if (x[i] == kNegInf) continue;
          if (weights_[i] <= small) {
            cum += weights_[i];
            x[i] = kNegInf;
          } else {
            order_.push_back(i);
          }
        }
        // Ascending probability; among equals the larger id first, so the kept end is stable.
        std::sort(order_.begin(), order_.end(),
                  [&](int32_t a, int32_t b) { return x[a] < x[b] || (x[a] == x[b] && a > b); });
        for (size_t j = 0; j + 1 < order_.size(); ++j) {
          cum += weights_[order_[j]];
          if (cum / total > drop_mass) break;
          x[order_[j]] = kNegInf;
        }
      }
      // Inverse CDF in token-id order.
      double total = 0.0;
      for (int32_t i = 0; i < v; ++i) total += std::exp(static_cast<double>(x[i]) - max);
      const double target = SamplingUniform(sp.seed, row.output_index) * total;
      double cum = 0.0;
      token = -1;
      for (int32_t i = 0; i < v; ++i) {
        if (x[i] == kNegInf) continue;
        token = i;  // the last unmasked token, if rounding leaves cum <= target
        cum += std::exp(static_cast<double>(x[i]) - max);
        if (cum > target) break;
      }
      if (token < 0) token = RawFallback(row, logits);  // NaN weights
    }
  }
  if (sp.num_logprobs >= 0) {
    assert(logprobs != nullptr);
    FillLogprobs(logits, token, sp.num_logprobs, logprobs);
  }
  return token;
}

int32_t CpuArgmaxForTesting(const float* x, int32_t n) { return Argmax(x, n); }

bool SetCpuArgmaxIsaForTesting(const char* isa) {
  const std::string_view want(isa);
  if (want == "best") {
    ActiveArgmax() = BestArgmax();
    return true;
  }
  if (want == "portable") {
    ActiveArgmax() = ArgmaxScalar;
    return true;
  }
#if defined(__x86_64__)
  if (want == "avx512" && __builtin_cpu_supports("avx512f")) {
    ActiveArgmax() = ArgmaxAvx512;
    return true;
  }
  if (want == "avx2" && __builtin_cpu_supports("avx2")) {
    ActiveArgmax() = ArgmaxAvx2;
    return true;
  }
#endif
  return false;
}

}  // namespace tinyserve
