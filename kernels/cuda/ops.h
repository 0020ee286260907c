// Launchers of the CUDA kernels behind CudaBackend (kernels/cuda/*.cu). Internal to the CUDA
// target.
//
// Every launcher is thin: it takes the stream, computes the grid, launches, and returns the launch
// error (cudaGetLastError), which the backend records. Pointers are device pointers; shapes and
// dtypes are as in kernels/backend.h, whose CPU twins (kernels/cpu/cpu_backend.cc) these follow.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tinyserve::cuda {

// out[t, :] = table[ids[t], :].  table [vocab, dim] fp32 or bf16 (`bf16`), out [n, dim] fp32.
cudaError_t LaunchEmbedding(const void* table, bool bf16, const int32_t* ids, int32_t n,
                            int32_t dim, float* out, cudaStream_t stream);

// RMSNorm; with `residual` non-null, first residual += delta (fused add) and normalize residual.
// x [n, dim] (ignored when residual is set), delta/residual/out [n, dim], weight [dim].
cudaError_t LaunchRmsNorm(const float* x, float* residual, const float* delta, const float* weight,
                          int32_t n, int32_t dim, float eps, float* out, cudaStream_t stream);

// RoPE in place at angle positions[t] * inv_freq[i] (inv_freq [head_dim / 2], device); `neox`
// selects the half-split layout (else interleaved pairs).
cudaError_t LaunchRope(float* q, int32_t q_stride, float* k, int32_t k_stride,
                       const int32_t* positions, int32_t n, int32_t num_heads, int32_t num_kv_heads,
                       int32_t head_dim, const float* inv_freq, bool neox, cudaStream_t stream);

cudaError_t LaunchWriteKvCache(const float* k, const float* v, int32_t stride, const int64_t* slots,
                               int32_t n, int32_t kv_width, float* k_cache, float* v_cache,
                               cudaStream_t stream);

cudaError_t LaunchSiluAndMul(const float* gate_up, int32_t n, int32_t hidden, float* out,
                             cudaStream_t stream);

cudaError_t LaunchGatherRows(const float* x, const int32_t* rows, int32_t m, int32_t dim,
                             float* out, cudaStream_t stream);

cudaError_t LaunchAddBias(float* y, const float* bias, int32_t m, int32_t n, cudaStream_t stream);

// dst[i] = bf16(src[i]) (round to nearest even).  dst is __nv_bfloat16 [count].
cudaError_t LaunchFloatToBf16(const float* src, size_t count, void* dst, cudaStream_t stream);

// The batch-invariant GEMM (invariant_gemm.cu): y [m, n] fp32 = x [m, k] fp32 * w [n, k]^T, w fp32
// or bf16 (`bf16`, widened exactly; x is not rounded). Every y element is one fmaf chain over k in
// increasing order from 0.0f, as the CPU backend's GEMM: bitwise equal to it on equal inputs, and
// the same for a row whatever m.
cudaError_t LaunchInvariantGemm(const float* x, const void* w, bool bf16, int32_t m, int32_t n,
                                int32_t k, float* y, cudaStream_t stream);

// Paged attention (see Backend::PagedAttention). Each (token, head) row's context is cut into
// splits of a fixed length (512 positions), attended separately and folded in order, so that a
// row's result depends on nothing but its own query, length and keys (not on the batch, the block
// table's width or `num_splits`). `num_splits` picks the launch shape only: 1, one block per row;
// or at least the widest table's split count, one block per split, whose results go through
// `scratch` (PagedAttentionScratchFloats floats) to a second kernel that folds them.
struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride q_stride
  int32_t q_stride = 0;
  const float* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const float* v_cache = nullptr;
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int32_t num_tokens = 0, num_seqs = 0, max_blocks_per_seq = 0, block_size = 0;
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float* out = nullptr;  // [num_tokens, num_heads * head_dim]
};

// The largest head_dim the attention kernel handles.
constexpr int32_t kMaxAttentionHeadDim = 256;

// The launch shape for LaunchPagedAttention: 1 (one block per row) when the rows alone fill
// `num_sms` multiprocessors twice, else one block per split of a `max_context`-long table. Depends
// only on host-known shapes; the results are the same bits either way.
int32_t ChooseAttentionSplits(int32_t num_tokens, int32_t num_heads, int32_t max_context,
                              int32_t num_sms);
size_t PagedAttentionScratchFloats(int32_t num_tokens, int32_t num_heads, int32_t head_dim,
                                   int32_t num_splits);
cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, int32_t num_splits, float* scratch,
                                 cudaStream_t stream);

}  // namespace tinyserve::cuda
