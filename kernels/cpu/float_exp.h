// The CPU backend's exp: one fixed sequence of float operations, so that its value depends on x
// alone, never on the libm a machine has, the vector width or which element of a row x is.
// The attention softmax and SiLU use it (cpu_backend.cc); both used std::exp before, a scalar
// libm call per element (about 7% of a batch-32 decode step).
//
// ExpF(x), for float x:
//   NaN -> x; x > 88.72283935546875 (ln FLT_MAX) -> +inf; x < -103.97208404541015625 (ln of
//   half the least subnormal) -> +0; else n = nearest-even integer of x * log2(e) (in [-150,
//   128]), r = (x - n * 0.693359375) - n * -2.12194440e-4 (ln 2 in two parts: the first times n
//   is exact), p(r) = ((((c0 r + c1) r + c2) r + c3) r + c4) r + c5 (Cephes' expf minimax
//   coefficients), y = ((p * r^2) + r) + 1, and y * 2^n1 * 2^n2 with n1 = floor(n / 2), n2 = n -
//   n1 (two exact power-of-two scalings, so results down to subnormals round once). Every
//   operation is an IEEE float operation rounded to nearest, a product then an add, never an fma.
//   Error: under 1 ulp of exp(x) (0.990 at worst over every float input, swept once by hand;
//   tests/kernels/float_exp_test.cc checks a sample of 2 million).
//
// ExpF(x, n, y) gives y[i] = ExpF(x[i]) for i < n, bit for bit, sixteen at a time with AVX-512
// or eight with AVX2, whichever is the widest the CPU has. SiluAndMulRow gives out[i] = (g[i] * (1
// / (1 + ExpF(-g[i])))) * u[i], rounded in that order, the same way. x == y (in place) is allowed;
// other overlaps are not.
#pragma once

#include <cstdint>

namespace tinyserve {

float ExpF(float x);
void ExpF(const float* x, int32_t n, float* y);
void SiluAndMulRow(const float* g, const float* u, int32_t n, float* out);

// Tests and benchmarks only: which form the row functions take, "best" (the default), "avx512",
// "avx2" or "portable" (the scalar definition); false, and nothing changed, where this CPU lacks
// it. Not thread-safe: call it while nothing else runs them.
bool SetFloatExpIsaForTesting(const char* isa);

}  // namespace tinyserve
