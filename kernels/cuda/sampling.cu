// GpuSampler on CUDA (kernels/gpu_sampler.h): one block of kThreads per row; every mask is a pure
// function of the row's logits and a few thresholds found by block-wide passes, so nothing but the
// logits is stored. The CPU twin is Sampler::Sample (engine/sampler.cc); each step below names the
// CPU lines it follows. Batch invariance (issue 15): a row is one block of a fixed kThreads, and
// every sum over it has a fixed order (BlockSumD's fixed tree, the in-order chunk scan, integer
// histograms), so a row's token and logprobs do not depend on the other rows or on the run.
#include <cuda_runtime.h>

#include <climits>
#include <string>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/shared.cuh"
#include "kernels/gpu_sampler.h"

namespace tinyserve {
namespace {

constexpr int kThreads = 1024;
// The top_p pass's weighted histogram sums weights w in (0, 1] as integers of w * 2^44 (exact,
// associative atomics; 2^18 vocabulary entries of weight 1 still fit in 64 bits). Floating-point
// atomics would add in whatever order the threads arrive, so the bin chosen near a boundary, and
// the token, could change from run to run.
constexpr double kWeightScale = 0x1.0p44;

struct RowOut {
  int32_t token;
  float logprob;
  int32_t rank;
  int32_t num_top;
  int32_t top_ids[kMaxGpuLogprobs];
  float top_logprobs[kMaxGpuLogprobs];
};

// ---- Philox4x32-10 and the draw, bit for bit as engine/sampler.cc ------------------------------
__device__ double SamplingUniform(uint64_t seed, uint64_t index) {
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

// ---- the kernel -------------------------------------------------------------------------------
__global__ void __launch_bounds__(kThreads)
    SampleKernel(const float* logits, int32_t V, const GpuSamplingRow* rows, RowOut* outs) {
  TS_SHARED_ARRAY(double, shd, 32);
  TS_SHARED_ARRAY(float, shf, 32);
  TS_SHARED_ARRAY(int, shi, 32);
  TS_SHARED_ARRAY(unsigned int, hist, 256);
  TS_SHARED_ARRAY(unsigned long long, whist, 256);  // weights in units of 1 / kWeightScale
  TS_SHARED_ARRAY(double, chunk, kThreads);
  TS_SHARED_ARRAY(int, sh_int, 2);

  const float* l = logits + static_cast<size_t>(blockIdx.x) * V;
  const GpuSamplingRow p = rows[blockIdx.x];
  RowOut& out = outs[blockIdx.x];
  const int tid = threadIdx.x;

  // Raw argmax: the greedy token and the logprobs' max.
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = tid; i < V; i += kThreads) Better(bv, bi, l[i], i);
  const int raw_argmax = BlockArgMax(bv, bi, shf, shi);

  int token;
  if (p.temperature < 1e-5f) {
    token = raw_argmax;
  } else {
    const float temp = p.temperature;
    const float max = l[raw_argmax] / temp;  // division is monotone: the max of x = l / temp
    // min_p: prob_i / max_prob = exp(x_i - max) < min_p.
    auto masked1 = [&](float x) {
      return p.min_p > 0.0f && exp(static_cast<double>(x) - max) < p.min_p;
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
          const float x = l[i] / temp;
          const uint32_t key = FloatKey(masked1(x) ? -INFINITY : x);
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
    auto masked2 = [&](float x) { return masked1(x) || (use_top_k && x < kth); };
    auto weight2 = [&](float x) { return masked2(x) ? 0.0 : exp(static_cast<double>(x) - max); };
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
      for (int i = tid; i < V; i += kThreads) part += weight2(l[i] / temp);
      const double total = BlockSumD(part, shd);
      small = drop_mass / V * total;
      part = 0.0;
      for (int i = tid; i < V; i += kThreads) {
        const float x = l[i] / temp;
        if (!masked2(x)) {
          const double w = exp(static_cast<double>(x) - max);
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
          const float x = l[i] / temp;
          if (masked2(x)) continue;
          const double w = exp(static_cast<double>(x) - max);
          if (w <= small) continue;
          const uint64_t key =
              (static_cast<uint64_t>(FloatKey(x)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
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
    auto masked3 = [&](float x, int i) {
      if (masked2(x)) return true;
      if (!use_top_p) return false;
      if (exp(static_cast<double>(x) - max) <= small) return true;
      const uint64_t key =
          (static_cast<uint64_t>(FloatKey(x)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
      return key < first_kept;
    };
    // Inverse CDF in token-id order: contiguous chunks per thread, their sums scanned in order.
    const int per = (V + kThreads - 1) / kThreads;
    const int i0 = min(V, tid * per), i1 = min(V, i0 + per);
    double s = 0.0;
    int last_unmasked = -1;
    for (int i = i0; i < i1; ++i) {
      const float x = l[i] / temp;
      if (masked3(x, i)) continue;
      s += exp(static_cast<double>(x) - max);
      last_unmasked = i;
    }
    chunk[tid] = s;
    last_unmasked = BlockMaxI(last_unmasked, shi);  // its barriers publish chunk[]
    if (tid == 0) {
      double total = 0.0;
      for (int t = 0; t < kThreads; ++t) total += chunk[t];
      const double target = SamplingUniform(p.seed, p.output_index) * total;
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
        const float x = l[i] / temp;
        if (masked3(x, i)) continue;
        found = i;
        cum += exp(static_cast<double>(x) - max);
        if (cum > target) break;
      }
      sh_int[1] = found;
    }
    __syncthreads();
    token = sh_int[1];
    __syncthreads();
  }

  // Raw logprobs (as Sampler::FillLogprobs).
  if (p.num_logprobs >= 0) {
    if (tid == 0) out.num_top = 0;
    const float max = l[raw_argmax];
    double part = 0.0;
    for (int i = tid; i < V; i += kThreads) part += exp(static_cast<double>(l[i]) - max);
    const double lse = max + log(BlockSumD(part, shd));
    const float lt = token >= 0 ? l[token] : -INFINITY;
    int count = 0;
    for (int i = tid; i < V; i += kThreads) count += l[i] > lt;
    for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
    __syncthreads();
    if (tid % 32 == 0) shi[tid / 32] = count;
    __syncthreads();
    if (tid == 0) {
      int rank = 1;
      for (int w = 0; w < kThreads / 32; ++w) rank += shi[w];
      out.token = token;
      out.rank = rank;
      out.logprob = token >= 0 ? static_cast<float>(l[token] - lse) : -INFINITY;
    }
    __syncthreads();
    // Top-n: n passes, each the best (larger value, then smaller id) after the previous pick.
    const int n = min(min(p.num_logprobs, kMaxGpuLogprobs), V);
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
      if (pick == INT_MAX || pick < 0 || pick >= V) break;
      pv = l[pick];
      pi = pick;
      if (tid == 0) {
        out.top_ids[j] = pick;
        out.top_logprobs[j] = static_cast<float>(l[pick] - lse);
        out.num_top = j + 1;
      }
      __syncthreads();
    }
  } else if (tid == 0) {
    out.token = token;
    out.num_top = 0;
  }
}

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorString(err);
}

class CudaGpuSampler final : public GpuSampler {
 public:
  CudaGpuSampler(int32_t vocab, int32_t max_rows) : vocab_(vocab), max_rows_(max_rows) {}
  ~CudaGpuSampler() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    cudaFree(d_rows_);
    cudaFree(d_out_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&d_rows_, sizeof(GpuSamplingRow) * max_rows_);
    if (e == cudaSuccess) e = cudaMalloc(&d_out_, sizeof(RowOut) * max_rows_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Unavailable(CudaError("GpuSampler", e));
    }
    return Status::Ok();
  }

  Status Sample(const float* logits, const std::vector<GpuSamplingRow>& rows,
                std::vector<GpuSampleResult>* out) override {
    const int32_t n = static_cast<int32_t>(rows.size());
    if (n > max_rows_) {
      return InvalidArgument("GpuSampler: " + std::to_string(n) + " rows, at most " +
                             std::to_string(max_rows_));
    }
    for (const GpuSamplingRow& r : rows) {
      if (r.num_logprobs > kMaxGpuLogprobs) {
        return InvalidArgument("GpuSampler: at most " + std::to_string(kMaxGpuLogprobs) +
                               " logprobs");
      }
    }
    out->assign(n, GpuSampleResult{});
    if (n == 0) return Status::Ok();
    host_out_.resize(n);
    cudaMemcpyAsync(d_rows_, rows.data(), sizeof(GpuSamplingRow) * n, cudaMemcpyHostToDevice,
                    stream_);
    TS_LAUNCH(SampleKernel, n, kThreads, 0, stream_, logits, vocab_, d_rows_, d_out_);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(host_out_.data(), d_out_, sizeof(RowOut) * n, cudaMemcpyDeviceToHost,
                          stream_);
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) return Internal(CudaError("GpuSampler::Sample", e));
    for (int32_t i = 0; i < n; ++i) {
      const RowOut& r = host_out_[i];
      GpuSampleResult& g = (*out)[i];
      g.token = r.token;
      if (rows[i].num_logprobs >= 0) {
        g.logprob = r.logprob;
        g.rank = r.rank;
        for (int32_t j = 0; j < r.num_top; ++j) g.top.emplace_back(r.top_ids[j], r.top_logprobs[j]);
      }
    }
    return Status::Ok();
  }

 private:
  const int32_t vocab_, max_rows_;
  cudaStream_t stream_ = nullptr;
  GpuSamplingRow* d_rows_ = nullptr;
  RowOut* d_out_ = nullptr;
  std::vector<RowOut> host_out_;
};

}  // namespace

StatusOr<std::unique_ptr<GpuSampler>> GpuSampler::Create(int32_t vocab_size, int32_t max_rows) {
  if (vocab_size <= 0 || max_rows <= 0) {
    return InvalidArgument("GpuSampler: vocab size and max rows must be positive");
  }
  auto s = std::make_unique<CudaGpuSampler>(vocab_size, max_rows);
  TS_RETURN_IF_ERROR(s->Init());
  return std::unique_ptr<GpuSampler>(std::move(s));
}

}  // namespace tinyserve
