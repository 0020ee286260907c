// ggml's quantized block formats (llama.cpp's ggml-common.h), bit-exact: Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0 (32 weights a block) and the K-quants Q4_K, Q5_K, Q6_K (256 weights a super-block); their
// dequantization, the reference quantizers (the rounding of ggml's quantize_row_*_ref, which is
// what llama-quantize writes without an importance matrix), and the activation side of the
// integer dot products: a row of fp32 activations quantized per 32 to Q8_0 (for the legacy
// types) or per 256 to Q8_K (for the K-quants), as ggml's CPU backend does.
//
// Block layouts (little-endian; "half" is an IEEE f16):
//   Q4_0 (18 B): half d; u8 qs[16]: w[j] = d * (nibble - 8); low nibbles j < 16, high j >= 16
//   Q4_1 (20 B): half d, m; u8 qs[16]: w[j] = d * nibble + m
//   Q5_0 (22 B): half d; u32 qh; u8 qs[16]: the 5th bit of w[j] is bit j of qh; w = d * (q - 16)
//   Q5_1 (24 B): half d, m; u32 qh; u8 qs[16]: w = d * q + m
//   Q8_0 (34 B): half d; i8 qs[32]: w[j] = d * qs[j]
//   Q4_K (144 B): half d, dmin; u8 scales[12] (8 6-bit scales and mins); u8 qs[128]: sub-block s
//                 (32 weights) is w = d * sc[s] * q - dmin * m[s]; qs byte l of 64-group g holds
//                 sub-block 2g (low nibble) and 2g + 1 (high nibble)
//   Q5_K (176 B): as Q4_K plus u8 qh[32] between scales and qs: bit 2g (2g+1) of qh[l] is the 5th
//                 bit of element l of sub-block 2g (2g+1)
//   Q6_K (210 B): u8 ql[128]; u8 qh[64]; i8 scales[16]; half d: sixteen sub-blocks of 16,
//                 w = d * scales[s] * (q - 32)
//
// Everything here is plain C++ (no SIMD) and the definition the CPU kernels
// (kernels/cpu/quant_gemm.h) are tested against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tinyserve {

// The ggml_type ids (ggml.h) of the block formats this file knows.
enum class QuantType : uint32_t {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
};

// The QuantType of ggml type id `ggml_type`, or nullopt for any other type.
std::optional<QuantType> QuantTypeOfGgml(uint32_t ggml_type);
// "q4_0", "q4_K", ... (ggml's spellings).
const char* QuantTypeName(QuantType t);
// Weights per block: 32, or 256 for the K-quants.
int32_t QuantBlockElements(QuantType t);
// Bytes per block.
int32_t QuantBlockBytes(QuantType t);
inline bool IsKQuant(QuantType t) {
  return t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ6_K;
}
// Bytes of one row of `cols` weights. REQUIRES: cols % QuantBlockElements(t) == 0.
inline size_t QuantRowBytes(QuantType t, int64_t cols) {
  return static_cast<size_t>(cols / QuantBlockElements(t)) * QuantBlockBytes(t);
}

// dst[0..k) = the weights of the k / QuantBlockElements(t) blocks at `src` (any alignment).
void DequantizeRow(QuantType t, const uint8_t* src, int64_t k, float* dst);
// The blocks of src[0..k), written to dst (QuantRowBytes(t, k) bytes), rounded as ggml's
// quantize_row_<t>_ref does. REQUIRES: k % QuantBlockElements(t) == 0.
void QuantizeRowReference(QuantType t, const float* src, int64_t k, uint8_t* dst);

// f16 <-> f32 as ggml converts them (round to nearest even).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);

// ---- activations ----------------------------------------------------------------------------
// A row of activations quantized for the dot products, bit-exact with what ggml's x86 CPU backend
// computes: Q8_0 blocks (32 int8 and an f16 scale; the rounding of ggml's AVX2 quantize_row_q8_0:
// q = nearest-even(x * (127 / amax)), d = f16(amax / 127)) plus q8_1's block sum s = f16(d *
// sum(q)) for the types with a min (Q4_1, Q5_1: ggml pairs them with q8_1, whose d and qs are
// q8_0's), or Q8_K blocks (256 int8, an fp32 scale, int sums per 16, quantize_row_q8_K).
struct Q8Row {
  int64_t k = 0;
  int8_t* qs = nullptr;     // [k]
  float* d = nullptr;       // [k / 32] (Q8_0: the f16 scale as float) or [k / 256] (Q8_K)
  float* s = nullptr;       // [k / 32] (Q8_0 only: q8_1's f16 s as float)
  int16_t* sums = nullptr;  // [k / 32] (Q8_0) or [k / 16] (Q8_K)
};

// Bytes QuantizeActivations needs for a row of k for weights of type t (qs, d, s and sums).
size_t ActivationBytes(QuantType t, int64_t k);
// Quantizes x[0..k) into `storage` (ActivationBytes(t, k) bytes, 64-byte aligned) as weights of
// type t want it (Q8_K for K-quants, Q8_0 otherwise) and returns the view. REQUIRES: k %
// QuantBlockElements(t) == 0.
Q8Row QuantizeActivations(QuantType t, const float* x, int64_t k, void* storage);

// The dot product of one weight row (k weights of type t at `w`) with quantized activations.
// The scalar definition; its order depends on nothing but k, so every kernel that keeps it gives
// the same bits. Q8_0: per block acc = fma(float(exact int dot), d_w * d_x, acc), in block
// order. Q4_K: per super-block the exact integers I = sum(sc * dot) and M = sum(m * xsum) over its
// sub-blocks, then acc = fma(float(I), d * d_x, acc) and mins = fma(float(M), dmin * d_x, mins)
// in block order; the result is acc - mins. (One integer per block is what lets kernels that
// hold 8 weight rows in a vector's lanes and kernels that hold one row give the same bits.) The
// other types: per block an exact integer dot product per sub-block, then CombineDots.
float DotRowReference(QuantType t, const uint8_t* w, const Q8Row& x);

// The two halves of every dot-product kernel. Sub-blocks are 16 weights for Q6_K, 32 otherwise.
int32_t NumSubBlocks(QuantType t, int64_t k);
// dots[s] = sum over sub-block s of level(w) * xq (exact int32): the levels are the signed values
// for Q4_0 (n - 8), Q5_0 (q - 16), Q8_0 and Q6_K (q - 32), and the unsigned ones for Q4_1, Q5_1,
// Q4_K and Q5_K (whose mins CombineDots adds). The scalar definition; SIMD twins must agree.
void SubBlockDotsReference(QuantType t, const uint8_t* w, const int8_t* xq, int64_t k,
                           int32_t* dots);
// The fp32 result from the integer dots: one accumulator from 0, blocks in order; per Q4_K block
// acc += dx * (d * sum(sc * dot) - dmin * sum(m * xsum)). Not inlined anywhere, so each caller
// gets these very bits.
float CombineDots(QuantType t, const uint8_t* w, const Q8Row& x, const int32_t* dots);

}  // namespace tinyserve
