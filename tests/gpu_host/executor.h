// Host execution layer (tests/gpu_host): runs a CUDA kernel's grid on the calling thread, block
// after block, each CUDA thread of a block a fiber (Boost.Context). Included by this folder's
// cuda_runtime.h; the .cu sources reach it only through the names CUDA defines.
//
// Checks, each a sticky fault (cudaErrorLaunchFailure from then on, the message on stderr and in
// TakeFaults()) naming the kernel, the block and a thread:
//   - __syncthreads() that some thread of the block does not reach (it exited, or waits at a warp
//     operation);
//   - a warp operation whose mask leaves out the calling lane, names a lane that does not reach
//     the same operation with the same mask (exited, outside the block, elsewhere), or reads a
//     lane outside the mask;
//   - after every kernel, a guard zone of any device allocation overwritten (see runtime.cc).
// Not thread-safe across concurrent launches from several host threads.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace tinyserve::gpu_host {

enum class WarpKind { kShfl, kShflXor, kShflDown, kShflUp, kBallot, kSync };

const uint3& CurrentThreadIdx();
const uint3& CurrentBlockIdx();
const dim3& CurrentBlockDim();
const dim3& CurrentGridDim();

// The barrier of the running block.
void SyncThreads();
// A warp operation of the calling lane: value in, the lane's result out (for kBallot the ballot
// of the predicates `value` of the lanes in `mask`).
uint64_t WarpOp(WarpKind kind, const char* what, unsigned mask, uint64_t value, int arg, int width);

// Runs (or, on a capturing stream, records) `body` over grid x block; the launch error is what the
// next cudaGetLastError() returns.
void LaunchOnHost(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes,
                  cudaStream_t stream, std::function<void()> body);

template <typename F, typename... Args>
void Launch(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            F f, Args... args) {
  LaunchOnHost(kernel, grid, block, shared_bytes, stream,
               [f, tuple = std::make_tuple(args...)] { std::apply(f, tuple); });
}

// The fault messages since the last call, oldest first; clears the sticky fault.
std::vector<std::string> TakeFaults();

// The number of kernel launches executed (replays of recorded graphs included).
int64_t NumKernelsRun();

// The bytes copied device-to-host (cudaMemcpy and cudaMemcpyAsync with cudaMemcpyDeviceToHost)
// since the process started.
int64_t BytesCopiedToHost();

// Host-to-device copies (cudaMemcpy and cudaMemcpyAsync) since the process started: calls, bytes.
struct CopyCount {
  int64_t copies = 0;
  int64_t bytes = 0;
};
CopyCount CopiesToDevice();

// The number of successful cudaMalloc calls since the process started.
int64_t NumDeviceAllocations();

}  // namespace tinyserve::gpu_host
