// The paged KV cache's block table as the attention kernels (paged_attention.cu, flash_prefill.cu)
// read it: sequence `seq`'s row of PagedAttentionArgs::block_tables ([num_seqs, stride] int32
// block ids). The row stride is the device scalar `table_stride` when given (a replayed CUDA graph
// keeps its launch for the widest table while each step uploads only its own width), else
// max_blocks_per_seq.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/ops.h"

namespace tinyserve::cuda {

__device__ __forceinline__ const int32_t* BlockTableRow(const PagedAttentionArgs& a, int32_t seq) {
  const size_t stride =
      static_cast<size_t>(a.table_stride != nullptr ? *a.table_stride : a.max_blocks_per_seq);
  return a.block_tables + static_cast<size_t>(seq) * stride;
}

}  // namespace tinyserve::cuda
