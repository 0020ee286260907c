// Gemv: y[j] = dot(w[j, :], x) for rows [j0, j1) of a row-major [n, k] fp32 matrix, on the calling
// thread. The single-sequence decode hot path: every weight is read once, so it runs at memory
// bandwidth. Uses AVX2+FMA when the CPU has them (checked at run time), else a portable loop.
#pragma once

#include <cstdint>

namespace tinyserve {

// w [n, k] row-major, x [k], y [n]; computes y[j0:j1].
void GemvRows(const float* w, const float* x, int32_t k, int32_t j0, int32_t j1, float* y);

}  // namespace tinyserve
