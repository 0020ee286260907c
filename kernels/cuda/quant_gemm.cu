// Linear layers and embeddings on ggml-quantized weights (kernels/ggml_quant.h blocks, the bytes of
// the GGUF file, uploaded unchanged). The CPU twin is kernels/cpu/quant_gemm.h, and the contract
// they share is the arithmetic, not a tolerance:
//
// - activations are quantized per row exactly as QuantizeActivations does (Q8_0 blocks for the
//   legacy types, Q8_K for the K-quants; every division and product rounded alone, the amax a
//   max, ties to the first index for Q8_K, f16 scales rounded to nearest even);
// - y[i, j] = DotRowReference(w row j, q8(x row i)): Q8_0 as one exact integer per block fmaf'd
//   into one chain, Q4_K as one exact integer per super-block for the scaled dots and one for the
//   mins, each fmaf'd into its own chain, the other types as SubBlockDots (exact integer sums,
//   dp4a) then CombineDots (one fp32 chain in block order);
// - dequantized rows (the embedding, and the bf16 tiles below) as DequantizeRow.
//
// Every fp32 step is an explicit __f*_rn intrinsic, so nvcc contracts nothing, and the integer
// sums are exact whatever groups the lanes. So, on equal inputs, the results are the CPU
// backend's bits, and a row's result depends on nothing but that row: these kernels are
// batch-invariant for every m and every launch shape.
//
// Launch shape of the dot products: a group of 8 lanes owns one output element; a warp holds four
// groups, which are four weight rows (kM = 1, decode) or four activation rows of one weight row
// (kM = 4, so that the weight bytes a warp loads serve four rows). The shape is chosen from m only
// for speed; the bits are the same either way.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace tinyserve::cuda {
namespace {

// ggml_type ids (kernels/ggml_quant.h QuantType).
constexpr int kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13,
              kQ6_K = 14;

// A block of type T: kElems weights in kBytes bytes (kernels/ggml_quant.h's layouts).
template <int T>
struct Format {
  static constexpr int kElems = T == kQ4_K || T == kQ5_K || T == kQ6_K ? 256 : 32;
  static constexpr int kBytes = T == kQ4_0   ? 18
                                : T == kQ4_1 ? 20
                                : T == kQ5_0 ? 22
                                : T == kQ5_1 ? 24
                                : T == kQ8_0 ? 34
                                : T == kQ4_K ? 144
                                : T == kQ5_K ? 176
                                             : 210;
};

// f(std::integral_constant<int, T>{}) for the block type T == type, or cudaErrorInvalidValue.
template <typename F>
cudaError_t ForType(int type, F&& f) {
  switch (type) {
    case kQ4_0:
      return f(std::integral_constant<int, kQ4_0>{});
    case kQ4_1:
      return f(std::integral_constant<int, kQ4_1>{});
    case kQ5_0:
      return f(std::integral_constant<int, kQ5_0>{});
    case kQ5_1:
      return f(std::integral_constant<int, kQ5_1>{});
    case kQ8_0:
      return f(std::integral_constant<int, kQ8_0>{});
    case kQ4_K:
      return f(std::integral_constant<int, kQ4_K>{});
    case kQ5_K:
      return f(std::integral_constant<int, kQ5_K>{});
    case kQ6_K:
      return f(std::integral_constant<int, kQ6_K>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// f16 bits -> float, exactly (HalfToFloat).
__device__ __forceinline__ float HalfBits(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
  const float magnitude = __fmul_rn(static_cast<float>(mant), 5.9604644775390625e-8f);
  return sign != 0 ? -magnitude : magnitude;
}
// float -> f16 -> float, rounded to nearest even (FloatToHalf then HalfToFloat).
__device__ __forceinline__ float RoundToHalf(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  uint32_t h;
  if (abs > 0x7f800000u) {
    h = sign | 0x7e00u;
  } else if (abs >= 0x477ff000u) {
    h = sign | 0x7c00u;
  } else if (abs < 0x38800000u) {
    h = sign | static_cast<uint32_t>(rintf(__fmul_rn(__uint_as_float(abs), 16777216.0f)));
  } else {
    const uint32_t rebased = abs - (112u << 23);
    h = sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13);
  }
  return HalfBits(h & 0xffffu);
}
__device__ __forceinline__ float LoadHalf(const uint8_t* p) {
  return HalfBits(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8));
}
// Round to nearest, ties to even, for |f| < 2^22 (ggml's nearest_int).
__device__ __forceinline__ int NearestInt(float f) {
  const int i = __float_as_int(__fadd_rn(f, 12582912.0f));
  return (i & 0x007fffff) - 0x00400000;
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block's 12 scale bytes at q.
__device__ __forceinline__ void ScaleMinK4(int j, const uint8_t* q, int* sc, int* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The integer level of element e of block b (LegacyLevels / KLevels): signed for Q4_0, Q5_0,
// Q8_0 and Q6_K, unsigned for the types with mins.
template <int T>
__device__ __forceinline__ int Level(const uint8_t* b, int e) {
  if constexpr (T == kQ8_0) {
    return static_cast<int8_t>(b[2 + e]);
  } else if constexpr (T == kQ4_0 || T == kQ4_1) {
    const int off = T == kQ4_0 ? 2 : 4;
    const int nib = e < 16 ? (b[off + e] & 0xF) : (b[off + e - 16] >> 4);
    return T == kQ4_0 ? nib - 8 : nib;
  } else if constexpr (T == kQ5_0 || T == kQ5_1) {
    const int off = T == kQ5_0 ? 2 : 4;
    const uint32_t qh = static_cast<uint32_t>(b[off]) | (static_cast<uint32_t>(b[off + 1]) << 8) |
                        (static_cast<uint32_t>(b[off + 2]) << 16) |
                        (static_cast<uint32_t>(b[off + 3]) << 24);
    const int nib = e < 16 ? (b[off + 4 + e] & 0xF) : (b[off + 4 + e - 16] >> 4);
    const int q = nib | static_cast<int>(((qh >> e) & 1u) << 4);
    return T == kQ5_0 ? q - 16 : q;
  } else if constexpr (T == kQ6_K) {
    const int half = e / 128, rel = e % 128, quarter = rel / 32, l = rel % 32;
    const uint8_t lq = b[64 * half + l + 32 * (quarter & 1)];
    const int nib = quarter >= 2 ? (lq >> 4) : (lq & 0xF);
    const int hi = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
    return (nib | (hi << 4)) - 32;
  } else {  // Q4_K, Q5_K
    const int g = e / 64, within = e % 64, l = within % 32, high = within >= 32 ? 1 : 0;
    const uint8_t q = b[(T == kQ5_K ? 48 : 16) + 32 * g + l];
    int v = high ? (q >> 4) : (q & 0xF);
    if constexpr (T == kQ5_K) v |= ((b[16 + l] >> (2 * g + high)) & 1) << 4;
    return v;
  }
}

// Elements e..e+3 of a block as four signed bytes (every level fits in int8).
template <int T>
__device__ __forceinline__ int Levels4(const uint8_t* b, int e) {
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    packed |= (static_cast<uint32_t>(Level<T>(b, e + i)) & 0xffu) << (8 * i);
  return static_cast<int>(packed);
}

// Sum of an int over the 8 lanes of a group (exact), in every lane of it.
__device__ __forceinline__ int GroupSum(int v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 2, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 1, 8);
  return v;
}
__device__ __forceinline__ int LoadInt(const int8_t* p) { return *reinterpret_cast<const int*>(p); }

// One output element's DotRowReference, computed by the 8 lanes of a group (lane = 0..7).
template <int T>
__device__ float GroupDot(const uint8_t* w, Q8Activations x, int64_t row, int64_t k, int lane) {
  using F = Format<T>;
  const int64_t nb = k / F::kElems;
  const int8_t* xq = x.qs + row * k;
  if constexpr (T == kQ8_0) {
    const float* xd = x.d + row * nb;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + b * F::kBytes;
      const int dot =
          GroupSum(__dp4a(Levels4<T>(blk, 4 * lane), LoadInt(xq + 32 * b + 4 * lane), 0));
      acc = __fmaf_rn(static_cast<float>(dot), __fmul_rn(LoadHalf(blk), xd[b]), acc);
    }
    return acc;
  } else if constexpr (T == kQ4_0 || T == kQ5_0 || T == kQ4_1 || T == kQ5_1) {
    const float* xd = x.d + row * nb;
    const float* xs = x.s + row * nb;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + b * F::kBytes;
      const int dot =
          GroupSum(__dp4a(Levels4<T>(blk, 4 * lane), LoadInt(xq + 32 * b + 4 * lane), 0));
      const float t1 = __fmul_rn(__fmul_rn(LoadHalf(blk), xd[b]), static_cast<float>(dot));
      if constexpr (T == kQ4_1 || T == kQ5_1) {
        acc = __fadd_rn(acc, __fadd_rn(t1, __fmul_rn(LoadHalf(blk + 2), xs[b])));
      } else {
        acc = __fadd_rn(acc, t1);
      }
    }
    return acc;
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    const float* xd = x.d + row * nb;
    const int16_t* sums = x.sums + row * (k / 16);
    float acc = 0.0f, mins = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + b * F::kBytes;
      const int8_t* xb = xq + 256 * b;
      int isum = 0, msum = 0;
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        int sc, mn;
        ScaleMinK4(s, blk + 4, &sc, &mn);
        const int p =
            __dp4a(Levels4<T>(blk, 32 * s + 4 * lane), LoadInt(xb + 32 * s + 4 * lane), 0);
        if constexpr (T == kQ4_K) {
          isum += sc * p;  // this lane's part; the group's sum is exact in any order
        } else {
          isum += sc * GroupSum(p);
        }
        msum += mn * (sums[16 * b + 2 * s] + sums[16 * b + 2 * s + 1]);
      }
      if constexpr (T == kQ4_K) {  // per super-block integers, two fma chains (DotBlocksQ4_K)
        isum = GroupSum(isum);
        acc = __fmaf_rn(static_cast<float>(isum), __fmul_rn(LoadHalf(blk), xd[b]), acc);
        mins = __fmaf_rn(static_cast<float>(msum), __fmul_rn(LoadHalf(blk + 2), xd[b]), mins);
      } else {  // CombineDots
        const float v = __fsub_rn(__fmul_rn(LoadHalf(blk), static_cast<float>(isum)),
                                  __fmul_rn(LoadHalf(blk + 2), static_cast<float>(msum)));
        acc = __fadd_rn(acc, __fmul_rn(xd[b], v));
      }
    }
    if constexpr (T == kQ4_K) return __fsub_rn(acc, mins);
    return acc;
  } else {  // Q6_K: sixteen sub-blocks of 16; lanes 0-3 (4-7) of run r hold sub-block 2r (2r + 1)
    const float* xd = x.d + row * nb;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = w + b * F::kBytes;
      const int8_t* xb = xq + 256 * b;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      int isum = 0;
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        int p = __dp4a(Levels4<T>(blk, 32 * r + 4 * lane), LoadInt(xb + 32 * r + 4 * lane), 0);
        p += __shfl_xor_sync(0xffffffffu, p, 2, 8);
        p += __shfl_xor_sync(0xffffffffu, p, 1, 8);
        const int lo = __shfl_sync(0xffffffffu, p, 0, 8), hi = __shfl_sync(0xffffffffu, p, 4, 8);
        isum += sc[2 * r] * lo + sc[2 * r + 1] * hi;
      }
      acc = __fadd_rn(acc,
                      __fmul_rn(xd[b], __fmul_rn(LoadHalf(blk + 208), static_cast<float>(isum))));
    }
    return acc;
  }
}

constexpr int kGroupsPerWarp = 4, kWarps = 8, kThreads = 32 * kWarps;

// grid (ceil(n / (kWarps * kGroupsPerWarp / kM)), ceil(m / kM)), block kThreads. y[i * ldy + j]
// for the part's rows j < n. Groups past m or n compute on clamped rows (every lane must reach
// the shuffles) and store nothing.
template <int T, int kM>
__global__ void __launch_bounds__(kThreads)
    QuantDotKernel(const uint8_t* __restrict__ w, Q8Activations x, int32_t m, int32_t n, int32_t k,
                   float* __restrict__ y, int32_t ldy) {
  constexpr int kWeightRowsPerWarp = kGroupsPerWarp / kM;
  const int warp = threadIdx.x / 32, group = (threadIdx.x % 32) / 8, lane = threadIdx.x % 8;
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kWeightRowsPerWarp +
                    group % kWeightRowsPerWarp;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kM + group / kWeightRowsPerWarp;
  const int64_t jc = j < n ? j : n - 1, ic = i < m ? i : m - 1;
  const size_t row_bytes = static_cast<size_t>(k / Format<T>::kElems) * Format<T>::kBytes;
  const float v = GroupDot<T>(w + jc * row_bytes, x, ic, k, lane);
  if (lane == 0 && i < m && j < n) y[i * ldy + j] = v;
}

// Q8_0 (and q8_1's s) activations: one warp per 32-value block, lane = element.
// grid (ceil(m * k / 32 / kWarps)), block kThreads.
__global__ void __launch_bounds__(kThreads)
    QuantizeQ8_0Kernel(const float* __restrict__ x, int32_t m, int32_t k, Q8Activations out) {
  const int64_t blocks = static_cast<int64_t>(m) * (k / 32);
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (b >= blocks) return;  // a whole warp leaves
  const int lane = threadIdx.x % 32;
  const float v = x[b * 32 + lane];
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  const int q = NearestInt(__fmul_rn(v, id));
  out.qs[b * 32 + lane] = static_cast<int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) {
    out.d[b] = RoundToHalf(d);
    out.s[b] = RoundToHalf(__fmul_rn(d, static_cast<float>(sum)));
    out.sums[b] = static_cast<int16_t>(sum);
  }
}

// Q8_K activations: one warp per 256-value block, lane = elements 8 lane .. 8 lane + 7 (lanes 2j
// and 2j + 1 make up the 16 of sums[j]). grid (ceil(m * k / 256 / kWarps)), block kThreads.
__global__ void __launch_bounds__(kThreads)
    QuantizeQ8_KKernel(const float* __restrict__ x, int32_t m, int32_t k, Q8Activations out) {
  const int64_t blocks = static_cast<int64_t>(m) * (k / 256);
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (b >= blocks) return;
  const int lane = threadIdx.x % 32;
  const float* xb = x + b * 256 + 8 * lane;
  // SignedAbsMax: the value of largest magnitude, the first one on ties.
  float amax = 0.0f, max = 0.0f;
  int at = 256;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if (amax < fabsf(xb[e])) {
      amax = fabsf(xb[e]);
      max = xb[e];
      at = 8 * lane + e;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float oa = __shfl_xor_sync(0xffffffffu, amax, o);
    const float om = __shfl_xor_sync(0xffffffffu, max, o);
    const int oat = __shfl_xor_sync(0xffffffffu, at, o);
    if (oa > amax || (oa == amax && oat < at)) {
      amax = oa;
      max = om;
      at = oat;
    }
  }
  int8_t* q = out.qs + b * 256 + 8 * lane;
  int sum = 0;
  const float iscale = max == 0.0f ? 0.0f : __fdiv_rn(-127.0f, max);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int v = max == 0.0f ? 0 : min(127, NearestInt(__fmul_rn(iscale, xb[e])));
    q[e] = static_cast<int8_t>(v);
    sum += v;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  if (lane % 2 == 0) out.sums[b * 16 + lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) out.d[b] = max == 0.0f ? 0.0f : __fdiv_rn(1.0f, iscale);
}

__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// out[r * cols + c] = weight c of row rows[r] (rows == nullptr: row r), as DequantizeRow gives it.
// grid (ceil(cols / 256), num_rows), block 256.
template <int T, typename Out>
__global__ void __launch_bounds__(256)
    DequantizeKernel(const uint8_t* __restrict__ w, const int32_t* __restrict__ rows, int32_t cols,
                     Out* __restrict__ out) {
  using F = Format<T>;
  const int32_t c = static_cast<int32_t>(blockIdx.x) * 256 + threadIdx.x;
  if (c >= cols) return;
  const int64_t r = rows != nullptr ? rows[blockIdx.y] : blockIdx.y;
  const uint8_t* blk =
      w + r * (static_cast<int64_t>(cols / F::kElems) * F::kBytes) + (c / F::kElems) * F::kBytes;
  const int e = c % F::kElems;
  const float q = static_cast<float>(Level<T>(blk, e));
  float v;
  if constexpr (T == kQ4_1 || T == kQ5_1) {
    v = __fadd_rn(__fmul_rn(q, LoadHalf(blk)), LoadHalf(blk + 2));
  } else if constexpr (T == kQ4_0 || T == kQ5_0 || T == kQ8_0) {
    v = __fmul_rn(q, LoadHalf(blk));
  } else if constexpr (T == kQ6_K) {
    const float sc = static_cast<float>(reinterpret_cast<const int8_t*>(blk + 192)[e / 16]);
    v = __fmul_rn(__fmul_rn(LoadHalf(blk + 208), sc), q);
  } else {
    int sc, mn;
    ScaleMinK4(e / 32, blk + 4, &sc, &mn);
    const float d1 = __fmul_rn(LoadHalf(blk), static_cast<float>(sc));
    const float m1 = __fmul_rn(LoadHalf(blk + 2), static_cast<float>(mn));
    v = __fsub_rn(__fmul_rn(d1, q), m1);
  }
  Store(out + static_cast<int64_t>(blockIdx.y) * cols + c, v);
}

template <int T, int kM>
cudaError_t LaunchDotShape(const uint8_t* w, const Q8Activations& x, int32_t m, int32_t n,
                           int32_t k, float* y, int32_t ldy, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarps * kGroupsPerWarp / kM;
  const dim3 grid((n + kRowsPerBlock - 1) / kRowsPerBlock, (m + kM - 1) / kM);
  if (grid.y > 65535) return cudaErrorInvalidValue;
  [[maybe_unused]] constexpr auto kernel = &QuantDotKernel<T, kM>;
  TS_LAUNCH(kernel, grid, kThreads, 0, stream, w, x, m, n, k, y, ldy);
  return cudaGetLastError();
}

template <int T>
cudaError_t LaunchDot(const uint8_t* w, const Q8Activations& x, int32_t m, int32_t n, int32_t k,
                      float* y, int32_t ldy, cudaStream_t stream) {
  return m < kGroupsPerWarp ? LaunchDotShape<T, 1>(w, x, m, n, k, y, ldy, stream)
                            : LaunchDotShape<T, kGroupsPerWarp>(w, x, m, n, k, y, ldy, stream);
}

template <int T, typename Out>
cudaError_t LaunchDequantize(const uint8_t* w, const int32_t* rows, int32_t num_rows, int32_t cols,
                             Out* out, cudaStream_t stream) {
  if (num_rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t row_bytes = static_cast<int64_t>(cols / Format<T>::kElems) * Format<T>::kBytes;
  // At most 65535 rows (grid.y) a launch.
  for (int32_t r0 = 0; r0 < num_rows; r0 += 65535) {
    const int32_t nr = min(65535, num_rows - r0);
    const dim3 grid((cols + 255) / 256, nr);
    const int32_t* chunk_rows = rows != nullptr ? rows + r0 : nullptr;
    const uint8_t* chunk_w = rows != nullptr ? w : w + r0 * row_bytes;
    Out* chunk_out = out + static_cast<int64_t>(r0) * cols;
    [[maybe_unused]] constexpr auto kernel = &DequantizeKernel<T, Out>;
    TS_LAUNCH(kernel, grid, 256, 0, stream, chunk_w, chunk_rows, cols, chunk_out);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchQuantizeActivations(bool k_quant, const float* x, int32_t m, int32_t k,
                                      Q8Activations out, cudaStream_t stream) {
  if (m <= 0 || k <= 0) return cudaSuccess;
  const int64_t blocks = static_cast<int64_t>(m) * (k / (k_quant ? 256 : 32));
  const int64_t grid = (blocks + kWarps - 1) / kWarps;
  if (grid > 0x7fffffff) return cudaErrorInvalidValue;
  if (k_quant) {
    TS_LAUNCH(QuantizeQ8_KKernel, static_cast<unsigned>(grid), kThreads, 0, stream, x, m, k, out);
  } else {
    TS_LAUNCH(QuantizeQ8_0Kernel, static_cast<unsigned>(grid), kThreads, 0, stream, x, m, k, out);
  }
  return cudaGetLastError();
}

cudaError_t LaunchQuantDot(int type, const void* w, const Q8Activations& x, int32_t m, int32_t n,
                           int32_t k, float* y, int32_t ldy, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const auto* b = static_cast<const uint8_t*>(w);
  return ForType(
      type, [&](auto t) { return LaunchDot<decltype(t)::value>(b, x, m, n, k, y, ldy, stream); });
}

cudaError_t LaunchDequantizeRows(int type, const void* w, const int32_t* rows, int32_t num_rows,
                                 int32_t cols, bool bf16, void* out, cudaStream_t stream) {
  const auto* b = static_cast<const uint8_t*>(w);
  return ForType(type, [&](auto t) {
    if (bf16) {
      return LaunchDequantize<decltype(t)::value>(b, rows, num_rows, cols,
                                                  static_cast<__nv_bfloat16*>(out), stream);
    }
    return LaunchDequantize<decltype(t)::value>(b, rows, num_rows, cols, static_cast<float*>(out),
                                                stream);
  });
}

}  // namespace tinyserve::cuda
