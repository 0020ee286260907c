#include "models/tensor_dtype.h"

#include <cmath>

namespace tinyserve {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

const char* TensorDtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32:
      return "F32";
    case TensorDtype::kF16:
      return "F16";
    case TensorDtype::kBF16:
      return "BF16";
  }
  return "?";
}

const char* TorchDtypeName(TensorDtype dtype) {
  switch (dtype) {
    case TensorDtype::kF32:
      return "float32";
    case TensorDtype::kF16:
      return "float16";
    case TensorDtype::kBF16:
      return "bfloat16";
  }
  return "?";
}

std::optional<TensorDtype> ParseTensorDtype(std::string_view name) {
  if (name == "F32") return TensorDtype::kF32;
  if (name == "F16") return TensorDtype::kF16;
  if (name == "BF16") return TensorDtype::kBF16;
  return std::nullopt;
}

std::optional<TensorDtype> ParseTorchDtype(std::string_view name) {
  if (name == "float32" || name == "f32" || name == "fp32") return TensorDtype::kF32;
  if (name == "float16" || name == "f16" || name == "fp16") return TensorDtype::kF16;
  if (name == "bfloat16" || name == "bf16") return TensorDtype::kBF16;
  return std::nullopt;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in fp32.
  const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign != 0 ? -magnitude : magnitude;
}

uint16_t F32ToF16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): a subnormal, mant = round(|f| * 2^24); 1024 rounds up
    // into the smallest normal, which is the right bit pattern too.
    const float scaled = BitsFloat(abs) * 16777216.0f;  // |f| * 2^24 < 1024, exact
    const float r = std::nearbyint(scaled);             // the default mode: to nearest even
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: drop 13 mantissa bits with round to nearest even; a carry may bump the exponent.
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rounded >> 13);
}

void ConvertToF32(TensorDtype dtype, const uint8_t* src, int64_t count, float* dst) {
  if (count == 0) return;  // an empty tensor may come with null pointers: memcpy must not see them
  switch (dtype) {
    case TensorDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      return;
    case TensorDtype::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    case TensorDtype::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
  }
}

void ConvertFromF32(TensorDtype dtype, const float* src, int64_t count, uint8_t* dst) {
  if (count == 0) return;  // as ConvertToF32
  switch (dtype) {
    case TensorDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      return;
    case TensorDtype::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t h = F32ToBf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case TensorDtype::kF16:
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t h = F32ToF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
  }
}

}  // namespace tinyserve
