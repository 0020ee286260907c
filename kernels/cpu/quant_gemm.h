// The CPU's linear layer on ggml-quantized weights: y = x * w^T with w [n, k] as blocks
// (kernels/ggml_quant.h) read where they lie (a memory-mapped GGUF file), x [m, k] fp32 quantized
// per row to int8 blocks (Q8_0, or Q8_K for the K-quants), as llama.cpp's CPU backend does.
//
// A matrix may stack parts of different types (a fused q|k|v whose v is Q6_K in a Q4_K_M file):
// each output row belongs to one part.
//
// Batch invariance: y[i, j] = CombineDots(SubBlockDots(w row j, q8(x row i))) (Q8_0 and Q4_K:
// DotRowReference's orders): the integer sums are exact, whichever instruction set computes
// them (AVX2 maddubs/madd, AVX-512 VNNI vpdpbusd/vpdpwssd, scalar), and the fp32 combination is
// one fixed chain in block order (ggml_quant.h). Nothing depends on m, on how the rows are split
// between threads, or on the ISA: a row alone and the same row in any batch give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kernels/ggml_quant.h"

namespace tinyserve {

struct QuantMatrixPart {
  QuantType type = QuantType::kQ8_0;
  const uint8_t* blocks = nullptr;  // [rows, QuantRowBytes(type, cols)]
  int32_t rows = 0;
  // Optional, Q8_0, Q4_K and Q6_K parts only: the same rows interleaved 8 at a time (RepackRows8),
  // which the AVX2 and VNNI kernels read instead of `blocks` (same bits; the portable path and the
  // embedding read `blocks`).
  const uint8_t* rows8 = nullptr;
};

// What a WeightRef of layout kGgmlBlocks points to on the CPU backend.
struct QuantMatrix {
  static constexpr int kMaxParts = 4;
  int32_t rows = 0;  // the sum of the parts' rows
  int32_t cols = 0;
  int32_t num_parts = 0;
  QuantMatrixPart parts[kMaxParts];
};

// Runs fn(i) for i in [0, n), possibly in parallel; returns when all are done.
using ParallelForFn = std::function<void(int64_t n, const std::function<void(int64_t)>& fn)>;

// Q8_0, Q4_K and Q6_K rows interleaved in groups of 8, llama.cpp's idea (its block_q4_Kx8) in
// layouts of our own (quant_gemm.cc): each block of 8 rows is one run of bytes (Q8_0: 272 = 8 x 34;
// Q4_K: 1184 = 8 x 144 + 32, the scales and mins unpacked to bytes; Q6_K: 1680 = 8 x 210), the
// groups' blocks in order. One vector load then holds four consecutive bytes of each of the 8
// rows, and a row's sums stay in its own lane, so no kernel needs a horizontal sum.
// Whether RepackRows8 knows type t (Q8_0, Q4_K, Q6_K).
bool HasRows8Layout(QuantType t);
// Bytes of the interleaved copy of `rows` rows of `cols` of type t. REQUIRES: HasRows8Layout(t),
// rows % 8 == 0.
size_t Rows8Bytes(QuantType t, int32_t rows, int32_t cols);
// Writes that copy of blocks [rows, QuantRowBytes(t, cols)] to out.
void RepackRows8(QuantType t, const uint8_t* blocks, int32_t rows, int32_t cols, uint8_t* out);

// y [m, w.rows] = x [m, w.cols] * w^T.
void QuantLinear(const float* x, const QuantMatrix& w, int32_t m, float* y,
                 const ParallelForFn& parallel_for);

// out[t, :] = row ids[t] of w, dequantized.  ids [n], out [n, w.cols].
void QuantEmbedding(const QuantMatrix& w, const int32_t* ids, int32_t n, float* out);

// The integer half of the dot product on this CPU's best instruction set (AVX2 for Q8_0, Q4_0,
// Q4_K, Q5_K and Q6_K; the scalar reference otherwise): the same numbers as SubBlockDotsReference.
void SubBlockDots(QuantType t, const uint8_t* w, const int8_t* xq, int64_t k, int32_t* dots);

// What QuantLinear's fused (tile) kernels run: "avx512vnni" (AVX512VL + AVX512_VNNI on 256-bit
// vectors for Q8_0 and Q4_K; Q5_K, Q6_K and SubBlockDots then run their AVX2 forms), "avx2" or
// "portable".
const char* QuantDotIsa();
// Testing and benchmarks: "portable" forces the scalar path, "avx2" / "avx512vnni" that
// instruction set, "best" restores the automatic choice. Returns false (and changes nothing) when
// this CPU cannot run `isa`. Not thread-safe: call it while no QuantLinear runs.
bool SetQuantDotIsaForTesting(const char* isa);

}  // namespace tinyserve
