// The element types model files store weights in (F32, F16, BF16), and their conversion to and
// from fp32. Conversions to 16 bits round to nearest, ties to even, as torch and numpy do; NaN
// stays NaN, values too large for f16 become infinity.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "base/bf16.h"

namespace tinyserve {

enum class TensorDtype { kF32, kF16, kBF16 };

// "F32", "F16", "BF16" (safetensors' spellings).
const char* TensorDtypeName(TensorDtype dtype);
// The dtype safetensors names `name` ("F32", "F16", "BF16"), or nullopt.
std::optional<TensorDtype> ParseTensorDtype(std::string_view name);
// The dtype --dtype / torch_dtype names ("float32"/"f32", "float16"/"f16", "bfloat16"/"bf16").
std::optional<TensorDtype> ParseTorchDtype(std::string_view name);
// "float32", "float16", "bfloat16" (config.json's torch_dtype).
const char* TorchDtypeName(TensorDtype dtype);
inline int64_t TensorDtypeBytes(TensorDtype dtype) { return dtype == TensorDtype::kF32 ? 4 : 2; }

// Bf16ToF32 and F32ToBf16: base/bf16.h.
float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// dst[i] = src element i as fp32, for `count` elements of `dtype` at `src` (any alignment; both
// may be null when count is 0).
void ConvertToF32(TensorDtype dtype, const uint8_t* src, int64_t count, float* dst);
// Writes `count` floats as `dtype` (little-endian) to `dst`.
void ConvertFromF32(TensorDtype dtype, const float* src, int64_t count, uint8_t* dst);

}  // namespace tinyserve
