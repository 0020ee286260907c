// The CUDA backend's sampling kernels (kernels/cuda/ops.h): one block of kThreads per row. The CPU
// twin is CpuSampler (kernels/cpu/cpu_sampler.cc); each step below names the CPU lines it follows.
//
// A row whose request uses allowed_token_ids, a structured-output token bitmask, min_tokens stop
// masks, logit_bias or penalties is first processed into its own scratch row (allowed mask and
// bitmask, stop mask, bias, penalties: the CPU's order); the sampling passes then read the
// processed row, the logprobs the raw one. Every mask after that is a pure function of the row and
// a few thresholds found by block-wide passes.
//
// Batch invariance (issue 15): a row is one block of a fixed kThreads, and every sum over it has a
// fixed order (BlockSumD's fixed tree, the in-order chunk scan, integer histograms and counts), so
// a row's token and logprobs do not depend on the other rows, the batch size or the run.
#include <cuda_runtime.h>

#include <climits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/shared.cuh"

namespace tinyserve::cuda {
namespace {

constexpr int kThreads = 1024;
// The top_p pass's weighted histogram sums weights w in (0, 1] as integers of w * 2^44 (exact,
// associative atomics; 2^18 vocabulary entries of weight 1 still fit in 64 bits). Floating-point
// atomics would add in whatever order the threads arrive, so the bin chosen near a boundary, and
// the token, could change from run to run.
constexpr double kWeightScale = 0x1.0p44;

// ---- Philox4x32-10 and the draw, bit for bit as SamplingUniform (kernels/cpu/cpu_sampler.cc) ----
__device__ double DeviceSamplingUniform(uint64_t seed, uint64_t index) {
  uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32), c2 = 0,
           c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  const uint64_t bits = ((static_cast<uint64_t>(c0) << 32) | c1) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

// Order-preserving float <-> uint32 keys.
__device__ uint32_t FloatKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ float KeyFloat(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// ---- block reductions (kThreads threads) -------------------------------------------------------
__device__ double BlockSumD(double v, TS_SHARED_PTR(double) sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = sh[threadIdx.x];  // kThreads / 32 == 32 partial sums
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

__device__ int BlockMaxI(int v, TS_SHARED_PTR(int) sh) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = sh[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

// The better of (value, index) pairs: larger value, then smaller index (the CPU's first maximum).
__device__ void Better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__device__ int BlockArgMax(float v, int i, TS_SHARED_PTR(float) shv, TS_SHARED_PTR(int) shi) {
  for (int o = 16; o > 0; o >>= 1) {
    Better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    shv[threadIdx.x / 32] = v;
    shi[threadIdx.x / 32] = i;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    v = shv[threadIdx.x];
    i = shi[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) {
      Better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    }
    if (threadIdx.x == 0) shi[0] = i;
  }
  __syncthreads();
  return shi[0];
}

// The argmax of row x [V] (first maximum; V >= 1).
__device__ int RowArgMax(const float* x, int32_t V, TS_SHARED_PTR(float) shf,
                         TS_SHARED_PTR(int) shi) {
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = threadIdx.x; i < V; i += kThreads) Better(bv, bi, x[i], i);
  return BlockArgMax(bv, bi, shf, shi);
}

// The raw logprob and rank of `token` under row l [V] (raw argmax `raw_argmax`) and its top `n`
// (ties: lower id first), as CpuSampler::FillLogprobs. Writes *res and top[0, n).
__device__ void RowLogprobs(const float* l, int32_t V, int token, int n, int raw_argmax,
                            SampleResult* res, TopLogprob* top, TS_SHARED_PTR(double) shd,
                            TS_SHARED_PTR(float) shf, TS_SHARED_PTR(int) shi) {
  const int tid = threadIdx.x;
  const float max = l[raw_argmax];
  double part = 0.0;
  for (int i = tid; i < V; i += kThreads) part += exp(static_cast<double>(l[i]) - max);
  const double lse = max + log(BlockSumD(part, shd));
  const float lt = l[token];
  int count = 0;
  for (int i = tid; i < V; i += kThreads) count += l[i] > lt;
  for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
  __syncthreads();
  if (tid % 32 == 0) shi[tid / 32] = count;
  __syncthreads();
  if (tid == 0) {
    int rank = 1;
    for (int w = 0; w < kThreads / 32; ++w) rank += shi[w];  // in warp order: exact integers
    res->token = token;
    res->rank = rank;
    res->logprob = static_cast<float>(l[token] - lse);
    res->num_top = 0;
  }
  __syncthreads();
  // Top-n: n passes, each the best (larger value, then smaller id) after the previous pick.
  n = min(n, V);
  float pv = INFINITY;
  int pi = -1;
  for (int j = 0; j < n; ++j) {
    float v = -INFINITY;
    int vi = INT_MAX;
    for (int i = tid; i < V; i += kThreads) {
      const float x = l[i];
      if (x < pv || (x == pv && i > pi)) Better(v, vi, x, i);
    }
    const int pick = BlockArgMax(v, vi, shf, shi);
    if (pick == INT_MAX || pick < 0 || pick >= V) break;  // NaN rows
    pv = l[pick];
    pi = pick;
    if (tid == 0) {
      top[j].token_id = pick;
      top[j].logprob = static_cast<float>(l[pick] - lse);
      res->num_top = j + 1;
    }
    __syncthreads();
  }
}

// x [V] = the row's logits with every id outside allowed_token_ids, and every id whose bit in
// `mask` (null: none) is 0, at -inf (CpuSampler::Sample's copy). Ends with a barrier.
__device__ void CopyAllowed(const float* l, int32_t V, const DeviceSampleRow& p, const int32_t* ids,
                            const uint32_t* mask, float* x) {
  const int tid = threadIdx.x;
  if (p.num_allowed == 0) {
    for (int i = tid; i < V; i += kThreads) x[i] = l[i];
  } else {
    for (int i = tid; i < V; i += kThreads) x[i] = -INFINITY;
    __syncthreads();
    const int32_t* allowed = ids + p.allowed_offset;
    for (int j = tid; j < p.num_allowed; j += kThreads) x[allowed[j]] = l[allowed[j]];
  }
  __syncthreads();
  if (mask != nullptr) {
    for (int i = tid; i < V; i += kThreads) {
      if (((mask[i >> 5] >> (i & 31)) & 1u) == 0) x[i] = -INFINITY;
    }
    __syncthreads();
  }
}

// ---- the kernels ------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads) SampleKernel(SampleArgs a) {
  TS_SHARED_ARRAY(double, shd, 32);
  TS_SHARED_ARRAY(float, shf, 32);
  TS_SHARED_ARRAY(int, shi, 32);
  TS_SHARED_ARRAY(unsigned int, hist, 256);
  TS_SHARED_ARRAY(unsigned long long, whist, 256);  // weights in units of 1 / kWeightScale
  TS_SHARED_ARRAY(double, chunk, kThreads);
  TS_SHARED_ARRAY(int, sh_int, 2);

  const int32_t V = a.vocab;
  const size_t row = blockIdx.x;
  const float* l = a.logits + row * V;
  const DeviceSampleRow p = a.rows[row];
  SampleResult* res = a.results + row;
  const int tid = threadIdx.x;

  // Raw argmax: the greedy token of an unprocessed row, the logprobs' max.
  const int raw_argmax = RowArgMax(l, V, shf, shi);

  // The processed row (CpuSampler::Sample: allowed ids, MaskStops, logit_bias, ApplyPenalties).
  const float* x = l;
  int best = raw_argmax;
  int token = -1;
  const int32_t mask_row = a.bitmask_row != nullptr ? a.bitmask_row[row] : -1;
  const uint32_t* mask =
      mask_row >= 0 ? a.bitmask + static_cast<size_t>(mask_row) * a.bitmask_words : nullptr;
  const bool processed =
      p.num_allowed > 0 || p.mask_stops || p.num_bias > 0 || p.penalty_slot >= 0 || mask != nullptr;
  if (processed) {
    float* xs = a.scratch + row * V;
    CopyAllowed(l, V, p, a.ids, mask, xs);
    if (p.mask_stops) {
      const int32_t* stops = a.ids + p.stop_offset;
      for (int j = tid; j < p.num_stops; j += kThreads) xs[stops[j]] = -INFINITY;
      __syncthreads();
      int any = 0;
      for (int i = tid; i < V && !any; i += kThreads) any = xs[i] > -INFINITY;
      // Masking would leave no token: this step is not masked (the CPU restores what it masked).
      if (BlockMaxI(any, shi) == 0) CopyAllowed(l, V, p, a.ids, mask, xs);
    }
    if (p.num_bias > 0 && tid == 0) {  // one thread, in list order: repeated ids add as on the CPU
      const int32_t* bias_ids = a.ids + p.bias_offset;
      const float* bias = a.bias + p.bias_offset;
      for (int j = 0; j < p.num_bias; ++j) xs[bias_ids[j]] = __fadd_rn(xs[bias_ids[j]], bias[j]);
    }
    __syncthreads();
    if (p.penalty_slot >= 0) {
      // Each id by its own counts (ApplyPenalties); the _rn forms keep nvcc from fusing into fma.
      const size_t base = static_cast<size_t>(p.penalty_slot) * V;
      for (int i = tid; i < V; i += kThreads) {
        const int32_t count = a.output_counts[base + i];
        float v = xs[i];
        if (p.repetition_penalty != 1.0f && (a.in_prompt[base + i] != 0 || count > 0)) {
          v = v > 0 ? __fdiv_rn(v, p.repetition_penalty) : __fmul_rn(v, p.repetition_penalty);
        }
        if ((p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) && count > 0) {
          v = __fsub_rn(v, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(count)),
                                     p.presence_penalty));
        }
        xs[i] = v;
      }
      __syncthreads();
    }
    x = xs;
    best = RowArgMax(x, V, shf, shi);
    if (x[best] == -INFINITY) token = -2;  // every token masked: the raw fallback below
  }

  if (token == -2) {
    // RawFallback.
  } else if (p.temperature < 1e-5f) {
    token = best;
  } else {
    const float temp = p.temperature;
    const float max = __fdiv_rn(x[best], temp);  // division is monotone: the max of x / temp
    auto scaled = [&](int i) { return __fdiv_rn(x[i], temp); };
    // min_p: prob_i / max_prob = exp(x_i - max) < min_p.
    auto masked1 = [&](float v) {
      return p.min_p > 0.0f && exp(static_cast<double>(v) - max) < p.min_p;
    };
    // top_k: the k-th largest of x after min_p (masked = -inf), by radix select from the top.
    float kth = -INFINITY;
    const bool use_top_k = p.top_k > 0 && p.top_k < V;
    if (use_top_k) {
      uint32_t prefix = 0;
      if (tid == 0) sh_int[0] = p.top_k;  // rank still wanted within the prefix
      for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        for (int d = tid; d < 256; d += kThreads) hist[d] = 0;
        __syncthreads();
        for (int i = tid; i < V; i += kThreads) {
          const float v = scaled(i);
          const uint32_t key = FloatKey(masked1(v) ? -INFINITY : v);
          if (pass == 0 || (key >> (shift + 8)) == prefix)
            atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
          int want = sh_int[0], d = 255;
          for (; d > 0; --d) {
            if (static_cast<int>(hist[d]) >= want) break;
            want -= hist[d];
          }
          sh_int[0] = want;
          sh_int[1] = d;
        }
        __syncthreads();
        prefix = (prefix << 8) | static_cast<uint32_t>(sh_int[1]);
        __syncthreads();
      }
      kth = KeyFloat(prefix);
    }
    auto masked2 = [&](float v) { return masked1(v) || (use_top_k && v < kth); };
    auto weight2 = [&](float v) { return masked2(v) ? 0.0 : exp(static_cast<double>(v) - max); };
    // top_p (vLLM's rule, as the CPU): tokens of weight <= small are dropped; the others, in
    // ascending (x, then larger id first) order, are dropped while the running mass / total stays
    // <= drop_mass; the most likely is always kept. The first kept key is found by radix descent
    // over 64-bit keys (x's key, then ~id) with weighted histograms.
    const bool use_top_p = p.top_p < 1.0f;
    double small = 0.0;
    uint64_t first_kept = 0;
    if (use_top_p) {
      const double drop_mass = 1.0 - static_cast<double>(p.top_p);
      double part = 0.0;
      for (int i = tid; i < V; i += kThreads) part += weight2(scaled(i));
      const double total = BlockSumD(part, shd);
      small = drop_mass / V * total;
      part = 0.0;
      for (int i = tid; i < V; i += kThreads) {
        const float v = scaled(i);
        if (!masked2(v)) {
          const double w = exp(static_cast<double>(v) - max);
          if (w <= small) part += w;
        }
      }
      double base = BlockSumD(part, shd);  // the dropped small tokens' mass
      uint64_t prefix = 0;
      bool crossing = true;  // false once no bin crosses: then follow the largest keys
      for (int pass = 0; pass < 8; ++pass) {
        const int shift = 56 - 8 * pass;
        for (int d = tid; d < 256; d += kThreads) {
          hist[d] = 0;
          whist[d] = 0;
        }
        __syncthreads();
        for (int i = tid; i < V; i += kThreads) {
          const float v = scaled(i);
          if (masked2(v)) continue;
          const double w = exp(static_cast<double>(v) - max);
          if (w <= small) continue;
          const uint64_t key =
              (static_cast<uint64_t>(FloatKey(v)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
          if (pass == 0 || (key >> (shift + 8)) == prefix) {
            const unsigned d = static_cast<unsigned>(key >> shift) & 255u;
            atomicAdd(&hist[d], 1u);
            atomicAdd(&whist[d], __double2ull_rn(w * kWeightScale));
          }
        }
        __syncthreads();
        if (tid == 0) {
          int chosen = -1, last = 0;
          for (int d = 0; d < 256; ++d) {
            if (hist[d] == 0) continue;
            last = d;
            const double bin_mass = static_cast<double>(whist[d]) / kWeightScale;
            if (crossing && (base + bin_mass) / total > drop_mass) {
              chosen = d;
              break;
            }
            base += bin_mass;
          }
          if (chosen < 0) {
            crossing = false;
            chosen = last;
          }
          sh_int[1] = chosen;
          sh_int[0] = crossing;
          shd[0] = base;
        }
        __syncthreads();
        prefix = (prefix << 8) | static_cast<uint64_t>(sh_int[1]);
        crossing = sh_int[0] != 0;
        base = shd[0];
        __syncthreads();
      }
      first_kept = prefix;
    }
    auto masked3 = [&](float v, int i) {
      if (masked2(v)) return true;
      if (!use_top_p) return false;
      if (exp(static_cast<double>(v) - max) <= small) return true;
      const uint64_t key =
          (static_cast<uint64_t>(FloatKey(v)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
      return key < first_kept;
    };
    // Inverse CDF in token-id order: contiguous chunks per thread, their sums scanned in order.
    const int per = (V + kThreads - 1) / kThreads;
    const int i0 = min(V, tid * per), i1 = min(V, i0 + per);
    double s = 0.0;
    int last_unmasked = -1;
    for (int i = i0; i < i1; ++i) {
      const float v = scaled(i);
      if (masked3(v, i)) continue;
      s += exp(static_cast<double>(v) - max);
      last_unmasked = i;
    }
    chunk[tid] = s;
    last_unmasked = BlockMaxI(last_unmasked, shi);  // its barriers publish chunk[]
    if (tid == 0) {
      double total = 0.0;
      for (int t = 0; t < kThreads; ++t) total += chunk[t];
      const double target = DeviceSamplingUniform(p.seed, p.output_index) * total;
      double cum = 0.0;
      int pick = -1;
      for (int t = 0; t < kThreads; ++t) {
        if (cum + chunk[t] > target) {
          pick = t;
          break;
        }
        cum += chunk[t];
      }
      shd[0] = cum;
      shd[1] = target;
      sh_int[0] = pick;
      sh_int[1] = last_unmasked;  // the CPU's fallback when rounding leaves cum <= target
    }
    __syncthreads();
    if (tid == sh_int[0]) {
      double cum = shd[0];
      const double target = shd[1];
      int found = -1;
      for (int i = i0; i < i1; ++i) {
        const float v = scaled(i);
        if (masked3(v, i)) continue;
        found = i;
        cum += exp(static_cast<double>(v) - max);
        if (cum > target) break;
      }
      sh_int[1] = found;
    }
    __syncthreads();
    token = sh_int[1];  // -1: NaN weights, the raw fallback
    __syncthreads();
  }
  if (token < 0) {
    // CpuSampler::RawFallback: the raw argmax among the allowed ids (all ids when none are given)
    // that the mask allows; among all of those when there is no mask or it allows none of them.
    const int32_t* allowed = a.ids + p.allowed_offset;
    if (mask != nullptr) {
      const int32_t num = p.num_allowed == 0 ? V : p.num_allowed;
      float bv = -INFINITY;
      int bi = INT_MAX;
      for (int j = tid; j < num; j += kThreads) {
        const int t = p.num_allowed == 0 ? j : allowed[j];
        if (((mask[t >> 5] >> (t & 31)) & 1u) != 0) Better(bv, bi, l[t], t);
      }
      const int pick = BlockArgMax(bv, bi, shf, shi);
      if (pick != INT_MAX) token = pick;
    }
    if (token < 0 && p.num_allowed == 0) {
      token = raw_argmax;
    } else if (token < 0) {
      float bv = -INFINITY;
      int bi = INT_MAX;
      for (int j = tid; j < p.num_allowed; j += kThreads) Better(bv, bi, l[allowed[j]], allowed[j]);
      token = BlockArgMax(bv, bi, shf, shi);
    }
  }

  if (p.num_logprobs >= 0) {
    RowLogprobs(l, V, token, p.num_logprobs, raw_argmax, res,
                a.top + row * static_cast<size_t>(a.top_stride), shd, shf, shi);
  } else if (tid == 0) {
    res->token = token;
    res->logprob = 0.0f;
    res->rank = 0;
    res->num_top = 0;
  }
}

__global__ void __launch_bounds__(kThreads) ScoreKernel(ScoreArgs a) {
  TS_SHARED_ARRAY(double, shd, 32);
  TS_SHARED_ARRAY(float, shf, 32);
  TS_SHARED_ARRAY(int, shi, 32);
  const size_t row = blockIdx.x;
  const float* l = a.logits + row * a.vocab;
  const int raw_argmax = RowArgMax(l, a.vocab, shf, shi);
  RowLogprobs(l, a.vocab, a.targets[row], a.num_top[row], raw_argmax, a.results + row,
              a.top + row * static_cast<size_t>(a.top_stride), shd, shf, shi);
}

// Slot `slot`'s history = token_ids: the first num_prompt in_prompt, the rest counted (PenaltyState
// ::Reset). Integer stores and atomics: the result does not depend on the order.
__global__ void __launch_bounds__(kThreads)
    PenaltySetKernel(int32_t* in_prompt, int32_t* output_counts, int32_t V, int32_t slot,
                     const int32_t* token_ids, int32_t num_tokens, int32_t num_prompt) {
  const size_t base = static_cast<size_t>(slot) * V;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    in_prompt[base + i] = 0;
    output_counts[base + i] = 0;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < num_tokens; j += kThreads) {
    if (j < num_prompt) {
      in_prompt[base + token_ids[j]] = 1;
    } else {
      atomicAdd(&output_counts[base + token_ids[j]], 1);
    }
  }
}

// PenaltyState::AddOutput for tokens[i] into slot slots[i].
__global__ void PenaltyAddKernel(int32_t* output_counts, int32_t V, const int32_t* slots,
                                 const int32_t* tokens, int32_t n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&output_counts[static_cast<size_t>(slots[i]) * V + tokens[i]], 1);
}

}  // namespace

cudaError_t LaunchSample(const SampleArgs& args, int32_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  TS_LAUNCH(SampleKernel, n, kThreads, 0, stream, args);
  return cudaGetLastError();
}

cudaError_t LaunchScore(const ScoreArgs& args, int32_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  TS_LAUNCH(ScoreKernel, n, kThreads, 0, stream, args);
  return cudaGetLastError();
}

cudaError_t LaunchPenaltySet(int32_t* in_prompt, int32_t* output_counts, int32_t vocab,
                             int32_t slot, const int32_t* token_ids, int32_t num_tokens,
                             int32_t num_prompt, cudaStream_t stream) {
  TS_LAUNCH(PenaltySetKernel, 1, kThreads, 0, stream, in_prompt, output_counts, vocab, slot,
            token_ids, num_tokens, num_prompt);
  return cudaGetLastError();
}

cudaError_t LaunchPenaltyAdd(int32_t* output_counts, int32_t vocab, const int32_t* slots,
                             const int32_t* tokens, int32_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kBlock = 128;
  TS_LAUNCH(PenaltyAddKernel, (n + kBlock - 1) / kBlock, kBlock, 0, stream, output_counts, vocab,
            slots, tokens, n);
  return cudaGetLastError();
}

}  // namespace tinyserve::cuda
