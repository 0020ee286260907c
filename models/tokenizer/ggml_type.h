// The ggml tensor types (ggml.h, enum ggml_type) a GGUF tensor can have, with their block layout:
// a tensor of type t holds num_elements / block_elements blocks of block_bytes bytes each.
#pragma once

#include <cstdint>

namespace tinyserve {

struct GgmlTypeTraits {
  const char* name;         // "f32", "f16", "bf16", "q8_0", ...
  uint64_t block_elements;  // elements per block; 0 for types ggml has removed
  uint64_t block_bytes;     // bytes per block
};

// The traits of `ggml_type`, or nullptr when it is outside ggml's table.
const GgmlTypeTraits* FindGgmlType(uint32_t ggml_type);

// The name of a ggml tensor type ("f32", "bf16", "q8_0"...), or "unknown".
const char* GgmlTypeName(uint32_t ggml_type);

}  // namespace tinyserve
