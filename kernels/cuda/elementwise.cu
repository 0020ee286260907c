// The row-wise and element-wise CUDA kernels: embedding, RMSNorm (+ fused residual add), RoPE, K/V
// cache writes, SiLU-and-mul, row gathers, bias add, fp32 -> bf16, the absolute maximum. Each
// follows its CPU twin in kernels/cpu/cpu_backend.cc (same formulas, same float functions; only
// summation order differs). Batch invariance (issue 15): every kernel here treats a row alone with
// a launch shape that does not depend on the number of rows; RMSNorm's one reduction is a block of
// kRowThreads per row (thread j sums elements j, j + kRowThreads, ... in order, then BlockSum's
// fixed tree), and the others reduce nothing, so a row's result is the same bits whatever the
// batch.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/fp8.h"

namespace tinyserve::cuda {
namespace {

constexpr int kRowThreads = 256;

// Grid size for a grid-stride loop over `count` elements.
unsigned GridFor(size_t count, int threads) {
  const size_t blocks = (count + threads - 1) / threads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(blocks, 65535 * 8)));
}

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

// One block per token.
template <typename T>
__global__ void EmbeddingKernel(const T* table, const int32_t* ids, int32_t dim, float* out) {
  const size_t t = blockIdx.x;
  const T* row = table + static_cast<size_t>(ids[t]) * dim;
  for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) out[t * dim + j] = ToFloat(row[j]);
}

// One block per row. kAdd: residual[row] += delta[row] first, then normalize residual[row].
template <bool kAdd>
__global__ void RmsNormKernel(const float* x, float* residual, const float* delta,
                              const float* weight, int32_t dim, float eps, float* out,
                              __nv_bfloat16* out_bf16) {
  TS_SHARED_ARRAY(float, red, 32);
  const size_t base = static_cast<size_t>(blockIdx.x) * dim;
  float ss = 0.0f;
  for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) {
    float v;
    if constexpr (kAdd) {
      v = residual[base + j] + delta[base + j];
      residual[base + j] = v;  // read back below by this same thread only
    } else {
      v = x[base + j];
    }
    ss += v * v;
  }
  ss = BlockSum(ss, red);
  // As the CPU: ss / dim + eps, then 1 / sqrt.
  const float scale = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  const float* src = kAdd ? residual : x;
  for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const float y = weight[j] * (scale * src[base + j]);
    out[base + j] = y;
    if (out_bf16 != nullptr) out_bf16[base + j] = __float2bfloat16_rn(y);
  }
}

// Rotates pair i of one head at position `pos` in place; returns the pair's offsets in *a, *b.
// Shared by RopeKernel and RopeWriteKvCacheKernel, with explicit _rn arithmetic, so both give the
// same bits.
__device__ __forceinline__ void RotatePair(float* head, float pos, int32_t i, int32_t half,
                                           const float* inv_freq, bool neox, int32_t* a,
                                           int32_t* b) {
  const float val = __fmul_rn(pos, inv_freq[i]);  // as the CPU: angle = pos * inv_freq, in float
  const float c = cosf(val), s = sinf(val);
  *a = neox ? i : 2 * i;
  *b = neox ? i + half : 2 * i + 1;
  const float v0 = head[*a], v1 = head[*b];
  head[*a] = __fsub_rn(__fmul_rn(v0, c), __fmul_rn(v1, s));
  head[*b] = __fadd_rn(__fmul_rn(v0, s), __fmul_rn(v1, c));
}

// One block per token; each thread rotates (head, pair) items.
__global__ void RopeKernel(float* q, int32_t q_stride, float* k, int32_t k_stride,
                           const int32_t* positions, int32_t num_heads, int32_t num_kv_heads,
                           int32_t head_dim, const float* inv_freq, bool neox) {
  const size_t t = blockIdx.x;
  const int32_t half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  const int32_t items = (num_heads + num_kv_heads) * half;
  for (int32_t idx = threadIdx.x; idx < items; idx += blockDim.x) {
    const int32_t h = idx / half, i = idx % half;
    float* head = h < num_heads ? q + t * q_stride + h * head_dim
                                : k + t * k_stride + (h - num_heads) * head_dim;
    int32_t a, b;
    RotatePair(head, pos, i, half, inv_freq, neox, &a, &b);
  }
}

// One block per token.
// One cache element from v: fp32 as it is, bf16 rounded to nearest even, fp8 e4m3 of v / scale
// (the cache's per-tensor scale; the other dtypes have none).
__device__ __forceinline__ void StoreKv(float* p, float v, float) { *p = v; }
__device__ __forceinline__ void StoreKv(__nv_bfloat16* p, float v, float) {
  *p = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void StoreKv(Fp8E4m3* p, float v, float scale) {
  p->bits = FloatToE4m3(__fdiv_rn(v, scale));
}

// KV: float, __nv_bfloat16 or Fp8E4m3 (StoreKv).
template <typename KV>
__global__ void WriteKvCacheKernel(const float* k, const float* v, int32_t stride,
                                   const int64_t* slots, int32_t kv_width, KV* k_cache, KV* v_cache,
                                   float k_scale, float v_scale) {
  const size_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;  // padding row
  for (int32_t j = threadIdx.x; j < kv_width; j += blockDim.x) {
    StoreKv(k_cache + slot * kv_width + j, k[t * stride + j], k_scale);
    StoreKv(v_cache + slot * kv_width + j, v[t * stride + j], v_scale);
  }
}

__global__ void SiluAndMulKernel(const float* gate_up, int32_t n, int32_t hidden, float* out,
                                 __nv_bfloat16* out_bf16) {
  const size_t count = static_cast<size_t>(n) * hidden;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = idx / hidden, i = idx % hidden;
    float val = gate_up[t * 2 * hidden + i];
    val *= 1.0f / (1.0f + expf(-val));
    const float y = val * gate_up[t * 2 * hidden + hidden + i];
    out[idx] = y;
    if (out_bf16 != nullptr) out_bf16[idx] = __float2bfloat16_rn(y);
  }
}

// One block over all of x: each thread folds elements tid, tid + blockDim.x, ... with fmaxf (NaNs
// skipped), then BlockMax. A maximum is exact in any order.
__global__ void AbsMaxKernel(const float* x, int32_t n, int32_t cols, int32_t stride, float* out) {
  TS_SHARED_ARRAY(float, red, 32);
  const size_t count = static_cast<size_t>(n) * cols;
  float m = 0.0f;
  for (size_t idx = threadIdx.x; idx < count; idx += blockDim.x) {
    m = fmaxf(m, fabsf(x[(idx / cols) * stride + idx % cols]));
  }
  m = BlockMax(m, red);
  if (threadIdx.x == 0) out[0] = m;
}

// One block per output row.
__global__ void GatherRowsKernel(const float* x, const int32_t* rows, int32_t dim, float* out) {
  const size_t i = blockIdx.x;
  const float* src = x + static_cast<size_t>(rows[i]) * dim;
  for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) out[i * dim + j] = src[j];
}

__global__ void AddBiasKernel(float* y, const float* bias, int32_t m, int32_t n) {
  const size_t count = static_cast<size_t>(m) * n;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[idx] += bias[idx % n];
  }
}

__global__ void FloatToBf16Kernel(const float* src, size_t count, __nv_bfloat16* dst) {
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < count;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[idx] = __float2bfloat16_rn(src[idx]);
  }
}

}  // namespace

cudaError_t LaunchEmbedding(const void* table, bool bf16, const int32_t* ids, int32_t n,
                            int32_t dim, float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (bf16) {
    TS_LAUNCH(EmbeddingKernel, n, kRowThreads, 0, stream, static_cast<const __nv_bfloat16*>(table),
              ids, dim, out);
  } else {
    TS_LAUNCH(EmbeddingKernel, n, kRowThreads, 0, stream, static_cast<const float*>(table), ids,
              dim, out);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRmsNorm(const float* x, float* residual, const float* delta, const float* weight,
                          int32_t n, int32_t dim, float eps, float* out, void* out_bf16,
                          cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  auto* ob = static_cast<__nv_bfloat16*>(out_bf16);
  if (residual != nullptr) {
    TS_LAUNCH(RmsNormKernel<true>, n, kRowThreads, 0, stream, nullptr, residual, delta, weight, dim,
              eps, out, ob);
  } else {
    TS_LAUNCH(RmsNormKernel<false>, n, kRowThreads, 0, stream, x, nullptr, nullptr, weight, dim,
              eps, out, ob);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRope(float* q, int32_t q_stride, float* k, int32_t k_stride,
                       const int32_t* positions, int32_t n, int32_t num_heads, int32_t num_kv_heads,
                       int32_t head_dim, const float* inv_freq, bool neox, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  TS_LAUNCH(RopeKernel, n, 128, 0, stream, q, q_stride, k, k_stride, positions, num_heads,
            num_kv_heads, head_dim, inv_freq, neox);
  return cudaGetLastError();
}

// RoPE and the KV-cache write in one kernel (one block per token): each thread rotates (head,
// pair) items as RopeKernel does and stores a rotated key pair at the token's slot too; then the
// value row is stored. The same bits as RopeKernel then WriteKvCacheKernel.
template <typename KV>
__global__ void RopeWriteKvCacheKernel(float* q, float* k, const float* v, int32_t stride,
                                       const int32_t* positions, const int64_t* slots,
                                       int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                       const float* inv_freq, bool neox, KV* k_cache, KV* v_cache,
                                       float k_scale, float v_scale) {
  const size_t t = blockIdx.x;
  const int32_t half = head_dim / 2, kv_width = num_kv_heads * head_dim;
  const float pos = static_cast<float>(positions[t]);
  const int64_t slot = slots[t];
  const int32_t items = (num_heads + num_kv_heads) * half;
  for (int32_t idx = threadIdx.x; idx < items; idx += blockDim.x) {
    const int32_t h = idx / half, i = idx % half;
    const bool is_key = h >= num_heads;
    float* head =
        is_key ? k + t * stride + (h - num_heads) * head_dim : q + t * stride + h * head_dim;
    int32_t a, b;
    RotatePair(head, pos, i, half, inv_freq, neox, &a, &b);
    if (is_key && slot >= 0) {
      KV* row = k_cache + slot * kv_width + (h - num_heads) * head_dim;
      StoreKv(row + a, head[a], k_scale);
      StoreKv(row + b, head[b], k_scale);
    }
  }
  if (slot < 0) return;  // padding row: nothing is written
  for (int32_t j = threadIdx.x; j < kv_width; j += blockDim.x) {
    StoreKv(v_cache + slot * kv_width + j, v[t * stride + j], v_scale);
  }
}

namespace {
// Calls launch(k, v) with the caches cast to their element type (float, __nv_bfloat16, Fp8E4m3).
template <typename Launch>
void WithKvCaches(KvElem kv, void* k_cache, void* v_cache, Launch&& launch) {
  switch (kv) {
    case KvElem::kBf16:
      launch(static_cast<__nv_bfloat16*>(k_cache), static_cast<__nv_bfloat16*>(v_cache));
      break;
    case KvElem::kFp8:
      launch(static_cast<Fp8E4m3*>(k_cache), static_cast<Fp8E4m3*>(v_cache));
      break;
    default:
      launch(static_cast<float*>(k_cache), static_cast<float*>(v_cache));
  }
}
}  // namespace

cudaError_t LaunchRopeWriteKvCache(float* q, float* k, const float* v, int32_t stride,
                                   const int32_t* positions, const int64_t* slots, int32_t n,
                                   int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                   const float* inv_freq, bool neox, KvElem kv, void* k_cache,
                                   void* v_cache, float k_scale, float v_scale,
                                   cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  auto launch = [&](auto* kc, auto* vc) {
    using KV = std::remove_pointer_t<decltype(kc)>;
    TS_LAUNCH(RopeWriteKvCacheKernel<KV>, n, 128, 0, stream, q, k, v, stride, positions, slots,
              num_heads, num_kv_heads, head_dim, inv_freq, neox, kc, vc, k_scale, v_scale);
  };
  WithKvCaches(kv, k_cache, v_cache, launch);
  return cudaGetLastError();
}

cudaError_t LaunchWriteKvCache(const float* k, const float* v, int32_t stride, const int64_t* slots,
                               int32_t n, int32_t kv_width, KvElem kv, void* k_cache, void* v_cache,
                               float k_scale, float v_scale, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  auto launch = [&](auto* kc, auto* vc) {
    using KV = std::remove_pointer_t<decltype(kc)>;
    TS_LAUNCH(WriteKvCacheKernel<KV>, n, kRowThreads, 0, stream, k, v, stride, slots, kv_width, kc,
              vc, k_scale, v_scale);
  };
  WithKvCaches(kv, k_cache, v_cache, launch);
  return cudaGetLastError();
}

cudaError_t LaunchSiluAndMul(const float* gate_up, int32_t n, int32_t hidden, float* out,
                             void* out_bf16, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(n) * hidden;
  if (count == 0) return cudaSuccess;
  TS_LAUNCH(SiluAndMulKernel, GridFor(count, 256), 256, 0, stream, gate_up, n, hidden, out,
            static_cast<__nv_bfloat16*>(out_bf16));
  return cudaGetLastError();
}

cudaError_t LaunchAbsMax(const float* x, int32_t n, int32_t cols, int32_t stride, float* out,
                         cudaStream_t stream) {
  if (n < 0 || cols < 0 || (n > 0 && stride < cols)) return cudaErrorInvalidValue;
  TS_LAUNCH(AbsMaxKernel, 1, kRowThreads, 0, stream, x, n, cols, stride, out);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* x, const int32_t* rows, int32_t m, int32_t dim,
                             float* out, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  TS_LAUNCH(GatherRowsKernel, m, kRowThreads, 0, stream, x, rows, dim, out);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(float* y, const float* bias, int32_t m, int32_t n, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(m) * n;
  if (count == 0) return cudaSuccess;
  TS_LAUNCH(AddBiasKernel, GridFor(count, 256), 256, 0, stream, y, bias, m, n);
  return cudaGetLastError();
}

cudaError_t LaunchFloatToBf16(const float* src, size_t count, void* dst, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  TS_LAUNCH(FloatToBf16Kernel, GridFor(count, 256), 256, 0, stream, src, count,
            static_cast<__nv_bfloat16*>(dst));
  return cudaGetLastError();
}

}  // namespace tinyserve::cuda
