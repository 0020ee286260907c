// Block-wide reductions for kernels whose blockDim.x is a multiple of 32 (at most 1024).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/shared.cuh"

namespace tinyserve::cuda {

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Returns the sum (kMax: the maximum) of v over the block, on every thread. `red` is a shared
// float[32]. Contains __syncthreads: every thread of the block must call it.
template <bool kMax>
__device__ float BlockReduce(float v, TS_SHARED_PTR(float) red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int num_warps = blockDim.x / 32;
  v = kMax ? WarpMax(v) : WarpSum(v);
  __syncthreads();  // `red` may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < num_warps ? red[lane] : (kMax ? -INFINITY : 0.0f);
    w = kMax ? WarpMax(w) : WarpSum(w);
    if (lane == 0) red[0] = w;
  }
  __syncthreads();
  return red[0];
}

__device__ __forceinline__ float BlockSum(float v, TS_SHARED_PTR(float) red) {
  return BlockReduce<false>(v, red);
}
__device__ __forceinline__ float BlockMax(float v, TS_SHARED_PTR(float) red) {
  return BlockReduce<true>(v, red);
}

}  // namespace tinyserve::cuda
