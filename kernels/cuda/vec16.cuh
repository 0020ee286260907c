// 16-byte vectors of device memory widened to fp32, exactly: 4 floats or 8 bf16 values (a bf16 is
// the upper half of its float); and the KV cache's vectors, fp8 e4m3 ones 8 bytes. Shared by the
// kernels that stream a cache or weights with 16-byte loads (paged_attention.cu,
// small_m_linear.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

#include "kernels/fp8.h"

namespace tinyserve::cuda {

// The elements of one 16-byte vector of T (float: 4, __nv_bfloat16: 8).
template <typename T>
constexpr int kVec16Elems = 16 / static_cast<int>(sizeof(T));

// f [kVec16Elems<T>] = the vector's elements in address order; the pointer only picks T.
__device__ __forceinline__ void Widen16(uint4 r, float* f, const float*) {
  f[0] = __uint_as_float(r.x);
  f[1] = __uint_as_float(r.y);
  f[2] = __uint_as_float(r.z);
  f[3] = __uint_as_float(r.w);
}
__device__ __forceinline__ void Widen16(uint4 r, float* f, const __nv_bfloat16*) {
  const unsigned w[4] = {r.x, r.y, r.z, r.w};
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);              // the lower address: element 2i
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);  // element 2i + 1
  }
}

// The vector a kernel streaming a KV cache loads at once: 16 bytes of fp32 or bf16 (4 or 8
// values); of fp8 e4m3 8 bytes, so that it holds 8 values as bf16's does and the lanes split a row
// the same way (the same reduction order, so the same bits on the same values).
template <typename T>
struct KvVector {
  using Raw = uint4;
  static constexpr int kElems = kVec16Elems<T>;
};
template <>
struct KvVector<Fp8E4m3> {
  using Raw = uint2;
  static constexpr int kElems = 8;
};
// Two e4m3 values (the lower byte first) widened exactly: from sm_89 on by the hardware's cvt
// through fp16 (which holds every e4m3 value), else by E4m3ToFloat (kernels/fp8.h). The same
// values either way; only a NaN's sign may differ (the hardware's NaN is canonical).
__device__ __forceinline__ void WidenE4m3x2(unsigned pair, float* f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const float2 v = __half22float2(
      __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3)));
  f[0] = v.x;
  f[1] = v.y;
#else
  f[0] = E4m3ToFloat(static_cast<uint8_t>(pair & 0xffu));
  f[1] = E4m3ToFloat(static_cast<uint8_t>((pair >> 8) & 0xffu));
#endif
}
__device__ __forceinline__ void Widen16(uint2 r, float* f, const Fp8E4m3*) {
  WidenE4m3x2(r.x & 0xffffu, f);
  WidenE4m3x2(r.x >> 16, f + 2);
  WidenE4m3x2(r.y & 0xffffu, f + 4);
  WidenE4m3x2(r.y >> 16, f + 6);
}

// One 16-byte load of p (16-byte aligned), widened.
template <typename T>
__device__ __forceinline__ void Load16(const T* p, float* f) {
  Widen16(*reinterpret_cast<const uint4*>(p), f, p);
}

}  // namespace tinyserve::cuda
