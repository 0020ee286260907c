// Packed fp32 GEMM: y = x * w^T on a weight matrix packed once (at load time), on the calling
// thread. The CPU backend's only GEMM: the model's linear layers and the logits all come here.
//
// Batch invariance (README "Batch invariance"): every output element is one fused multiply-add
// chain over k in increasing order, starting from +0.0f:
//
//   float acc = 0.0f;
//   for (p = 0; p < k; ++p) acc = fmaf(x[i, p], w[j, p], acc);
//   y[i, j] = acc;
//
// whatever m is, however the rows and panels are tiled, however many threads share the panels,
// and whichever instruction set runs it: the AVX-512, AVX2+FMA and portable (std::fma) kernels
// give identical bits, because each SIMD lane is one output element's own chain and nothing is
// ever summed across lanes. So a row's result is the same alone (m = 1, decode) and in any batch
// (prefill chunks, crowded decode steps). The CUDA backend's --batch-invariant GEMM keeps the
// same order, so GemmReference below is the CPU twin of both.
//
// Packed layout ("panel16"): w [n, k] row-major becomes ceil(n / 16) panels, each [k, 16]:
// element (j, p) is at ((j / 16) * k + p) * 16 + j % 16; the columns of the last panel past n
// are zero. A panel streams contiguously through the kernel: the decode hot path reads every
// weight once, in order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tinyserve {

inline constexpr int32_t kPanelWidth = 16;

// Number of panels of an [n, k] matrix.
inline int32_t NumPanels(int32_t n) { return (n + kPanelWidth - 1) / kPanelWidth; }

// Floats the packed form of an [n, k] matrix takes.
inline size_t PackedFloats(int32_t n, int32_t k) {
  return static_cast<size_t>(NumPanels(n)) * static_cast<size_t>(k) * kPanelWidth;
}

// packed [PackedFloats(n, k)] = w [n, k] row-major in the panel16 layout (padding zeroed).
void PackPanels(const float* w, int32_t n, int32_t k, float* packed);

// Row `j` of a packed [n, k] matrix: out[p] = w[j, p] for p in [0, k).  out [k].
void UnpackRow(const float* packed, int32_t k, int32_t j, float* out);

// y[:, 16*pb0 : min(n, 16*pb1)] = x * w^T for the output columns of panels [pb0, pb1).
// x [m, k] row-major, packed as PackPanels wrote it, y [m, n] row-major (row stride n).
// [then0, then1): the panels the caller computes next on this thread (empty: none known), whose
// first group the last one prefetches, as every group prefetches the next one of its range.
void GemmPackedPanels(const float* x, const float* packed, int32_t m, int32_t n, int32_t k,
                      int32_t pb0, int32_t pb1, float* y, int32_t then0 = 0, int32_t then1 = 0);

// The order contract as a plain loop over a row-major w [n, k]: the oracle the kernels are
// compared with bitwise in tests/kernels.  x [m, k], w [n, k], y [m, n].
void GemmReference(const float* x, const float* w, int32_t m, int32_t n, int32_t k, float* y);

// How many panels GemmPackedPanels takes at a time for m rows (a group: every row tile reads it,
// and the tiles after the first prefetch the next group of the same call).
int32_t PackedGemmGroupPanels(int32_t m);
// Which kernel GemmPackedPanels runs on this CPU: "avx512", "avx2" or "portable".
const char* PackedGemmIsa();

// Testing only: makes GemmPackedPanels run the kernel of `isa` ("avx512", "avx2", "portable", or
// "best" for the automatic choice), so that a test can check that every kernel this CPU can run
// gives the same bits. Returns false (and changes nothing) when this CPU cannot run it.
// Not thread-safe: call it while no GEMM runs.
bool SetPackedGemmIsaForTesting(const char* isa);

}  // namespace tinyserve
