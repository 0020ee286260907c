// Prefill attention on tensor cores over the paged KV cache, FlashAttention-2 style (the CPU twin
// is FlashPrefillTwin, tests/gpu/flash_prefill_twin.h; the fp32 oracle CpuBackend::PagedAttention).
// LaunchPagedAttention runs it, when PagedAttentionArgs::tensor_core_prefill allows, for the rows
// of every sequence with at least kFlashMinQueryTokens query tokens of the step (prefill chunks, in
// mixed batches too); decode rows stay on the CUDA-core kernels of paged_attention.cu.
//
// A block is kFlashRows (64) consecutive query tokens of one sequence and one query head, 4 warps
// of 16 rows. Its query rows are rounded to bf16 once and held in registers as MMA A fragments
// (kernels/cuda/mma.cuh). The keys [0, the tile's largest position] are walked in tiles of
// kFlashKeys (64) at absolute positions 0, 64, 128, ...: a tile's cache slots are staged in shared
// memory, its K rows (bf16, [key][dim]) and V rows (bf16, transposed: [dim][key]) copied in
// (bf16 exactly, fp8 e4m3 widened exactly to bf16), then each warp computes S = Q K^T (m16n8k16,
// fp32), masks keys past each row's position (causal), and updates its rows' online softmax in
// registers, in the log2 domain: m = max(m, max_j s_j log2(e) / sqrt(head_dim)), p_j = 2^(s_j
// log2(e) / sqrt(head_dim) - m) rounded to bf16, the running output and sum scaled by 2^(m_old -
// m), the sum of the rounded p added, and O += P V (the S accumulators of two key octets are the A
// fragment of P, no shared memory). At the end each row's sum is added over its 4 lanes and O is
// divided by it. fp32 caches do not come here (their rows would be rounded to bf16).
//
// Invariance: a row's result depends on its query, position and keys only. Its scores are its own
// MMA elements; its key tiles start at absolute positions; a tile past the row's position (when
// another row of the block reaches further) is wholly masked and leaves m, the sum and O exactly as
// they were (2^0 = 1, p = 0). So how a prompt is chunked, which other rows share the block and
// whether keys came from the prefix cache do not change its bits. It is not the CUDA-core kernels'
// arithmetic (bf16 Q and P, the MMA's summation order), so --batch-invariant, whose contract is the
// CPU's bits, turns it off.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/paged_table.cuh"
#include "kernels/cuda/shared.cuh"
#include "kernels/cuda/vec16.cuh"

namespace tinyserve::cuda {
namespace {

constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = 32 * kFlashWarps;
constexpr int kFlashRows = 16 * kFlashWarps;  // query tokens a block
constexpr int kFlashKeys = 64;                // keys a tile
constexpr int kKeyPad = 8;  // bf16 padding a shared row: 32-bit fragment loads free of conflicts
static_assert(kFlashKeys % 16 == 0, "P's A fragments take key tiles in 16s");

// A warp's 32-bit load of two adjacent bf16 values of shared memory (p 4-byte aligned).
__device__ __forceinline__ uint32_t LoadBf16x2(TS_SHARED_PTR(__nv_bfloat16) p) {
#if defined(TS_HOST_LAUNCH)
  const __nv_bfloat16 lo = p[0], hi = p[1];
  return static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}

// Eight values, each exactly a bf16, stored as bf16 at p (16-byte aligned).
__device__ __forceinline__ void StoreBf16x8(TS_SHARED_PTR(__nv_bfloat16) p, const float* f) {
#if defined(TS_HOST_LAUNCH)
  for (int e = 0; e < 8; ++e) p[e] = __float2bfloat16_rn(f[e]);
#else
  uint4 r;
  r.x = PackBf16x2(f[0], f[1]);
  r.y = PackBf16x2(f[2], f[3]);
  r.z = PackBf16x2(f[4], f[5]);
  r.w = PackBf16x2(f[6], f[7]);
  *reinterpret_cast<uint4*>(p) = r;
#endif
}

// grid (FlashPrefillGridX, num_heads), block kFlashThreads. KV: __nv_bfloat16 or Fp8E4m3 (8 values
// a KvVector); HD: head_dim, a multiple of 16.
template <typename KV, int HD>
__global__ void __launch_bounds__(kFlashThreads) FlashPrefillKernel(PagedAttentionArgs a) {
  static_assert(HD % 16 == 0, "head_dim in whole MMA k-steps");
  constexpr int kKRow = HD + kKeyPad;                                  // sk row stride (elements)
  constexpr int kVRow = kFlashKeys + kKeyPad;                          // svt row stride
  TS_SHARED_ARRAY_ALIGNED(__nv_bfloat16, sk, kFlashKeys * kKRow, 16);  // [key][dim]
  TS_SHARED_ARRAY_ALIGNED(__nv_bfloat16, svt, HD * kVRow, 16);         // [dim][key]
  TS_SHARED_ARRAY(int32_t, slots, kFlashKeys);
  TS_SHARED_ARRAY(int32_t, tile, 4);  // sequence (-1: none), first token, rows, largest position

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t4 = lane % 4;
  const int32_t h = blockIdx.y;

  // This block's tile: the blockIdx.x-th of the sequences' tiles, in sequence order.
  if (tid == 0) {
    int32_t b = blockIdx.x;
    tile[0] = -1;
    for (int32_t s = 0; s < a.num_seqs; ++s) {
      const int32_t q0 = a.query_start[s], n = a.query_start[s + 1] - q0;
      if (n < kFlashMinQueryTokens) continue;
      const int32_t tiles = (n + kFlashRows - 1) / kFlashRows;
      if (b >= tiles) {
        b -= tiles;
        continue;
      }
      const int32_t first = q0 + b * kFlashRows, rows = min(kFlashRows, n - b * kFlashRows);
      int32_t top = 0;
      for (int32_t r = 0; r < rows; ++r) top = max(top, a.positions[first + r]);
      tile[0] = s;
      tile[1] = first;
      tile[2] = rows;
      tile[3] = top;
      break;
    }
  }
  __syncthreads();
  const int32_t seq = tile[0];
  if (seq < 0) return;  // past the last tile (the grid is an upper bound)
  const int32_t first = tile[1], rows = tile[2], top = tile[3];

  const int32_t* table = BlockTableRow(a, seq);
  const int32_t kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * HD;
  const KV* k_base = static_cast<const KV*>(a.k_cache) + static_cast<int64_t>(kvh) * HD;
  const KV* v_base = static_cast<const KV*>(a.v_cache) + static_cast<int64_t>(kvh) * HD;
  const float scale_log2 = 1.4426950408889634f / sqrtf(static_cast<float>(HD));

  // This lane's two rows (g and g + 8 of its warp's 16): token, position (-1: past the tile).
  int32_t row_token[2], row_pos[2];
  for (int r = 0; r < 2; ++r) {
    const int32_t i = warp * 16 + g + 8 * r;
    row_token[r] = first + i;
    row_pos[r] = i < rows ? a.positions[first + i] : -1;
  }
  // Q as A fragments, one per 16 dimensions, rounded to bf16.
  uint32_t qa[HD / 16][4];
  for (int kk = 0; kk < HD / 16; ++kk) {
    for (int r = 0; r < 2; ++r) {
      for (int half = 0; half < 2; ++half) {
        float x0 = 0.0f, x1 = 0.0f;
        if (row_pos[r] >= 0) {
          const float* q = a.q + static_cast<size_t>(row_token[r]) * a.q_stride +
                           static_cast<size_t>(h) * HD + 16 * kk + 8 * half + 2 * t4;
          x0 = q[0];
          x1 = q[1];
        }
        qa[kk][r + 2 * half] = PackBf16x2(x0, x1);
      }
    }
  }

  float o[HD / 8][4];  // O: dimension octet j, the C layout (rows g, g + 8)
  for (int j = 0; j < HD / 8; ++j) {
    for (int e = 0; e < 4; ++e) o[j][e] = 0.0f;
  }
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // log2 domain; lane's part

  const int32_t bs = a.block_size;
  const int32_t num_tiles = top / kFlashKeys + 1;
  for (int32_t kt = 0; kt < num_tiles; ++kt) {
    const int32_t j0 = kt * kFlashKeys;
    __syncthreads();  // the previous tile's readers of slots, sk and svt are done
    for (int i = tid; i < kFlashKeys; i += kFlashThreads) {
      const int32_t p = j0 + i;
      slots[i] = p <= top ? table[p / bs] * bs + p % bs : -1;
    }
    __syncthreads();
    constexpr int kVecs = HD / 8;  // 8-value vectors a row
    using Raw = typename KvVector<KV>::Raw;
    for (int v = tid; v < kFlashKeys * kVecs; v += kFlashThreads) {
      const int key = v / kVecs, d0 = (v % kVecs) * 8;
      const int32_t slot = slots[key];
      float kf[8], vf[8];
      if (slot >= 0) {
        const int64_t at = static_cast<int64_t>(slot) * kv_width + d0;
        Widen16(*reinterpret_cast<const Raw*>(k_base + at), kf, k_base);
        Widen16(*reinterpret_cast<const Raw*>(v_base + at), vf, v_base);
      } else {
        for (int e = 0; e < 8; ++e) kf[e] = vf[e] = 0.0f;  // masked; zeros keep 0 * v finite
      }
      StoreBf16x8(&sk[key * kKRow + d0], kf);
      for (int e = 0; e < 8; ++e) svt[(d0 + e) * kVRow + key] = __float2bfloat16_rn(vf[e]);
    }
    __syncthreads();

    // S = Q K^T: key octet j of the tile, the C layout.
    float s[kFlashKeys / 8][4];
    for (int j = 0; j < kFlashKeys / 8; ++j) {
      for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
      for (int kk = 0; kk < HD / 16; ++kk) {
        const int at = (8 * j + g) * kKRow + 16 * kk + 2 * t4;
        const uint32_t b[2] = {LoadBf16x2(&sk[at]), LoadBf16x2(&sk[at + 8])};
        MmaBf16M16N8K16(s[j], qa[kk], b, s[j]);
      }
    }

    // The online softmax of rows g (r = 0) and g + 8 (r = 1).
    uint32_t pa[kFlashKeys / 16][4];
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
      for (int j = 0; j < kFlashKeys / 8; ++j) {
        for (int e = 0; e < 2; ++e) {
          const int32_t key = j0 + 8 * j + 2 * t4 + e;
          const float x =
              key <= row_pos[r] ? __fmul_rn(s[j][2 * r + e], a.k_scale) * scale_log2 : -INFINITY;
          s[j][2 * r + e] = x;
          mx = fmaxf(mx, x);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet
      const float corr = exp2f(m_run[r] - m_use);             // 0 while m_run is -inf
      float sum = 0.0f;
      for (int j = 0; j < kFlashKeys / 8; ++j) {
        const uint32_t packed =
            PackBf16x2(exp2f(s[j][2 * r] - m_use), exp2f(s[j][2 * r + 1] - m_use));
        sum += Bf16Lo(packed);
        sum += Bf16Hi(packed);
        // Key octets 2k and 2k + 1 are columns 0-7 and 8-15 of P's k-step k.
        pa[j / 2][r + 2 * (j % 2)] = packed;
      }
      l_run[r] = l_run[r] * corr + sum;
      m_run[r] = m_new;
      for (int j = 0; j < HD / 8; ++j) {
        o[j][2 * r] *= corr;
        o[j][2 * r + 1] *= corr;
      }
    }

    // O += P V.
    for (int j = 0; j < HD / 8; ++j) {
      for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
        const int at = (8 * j + g) * kVRow + 16 * kk + 2 * t4;
        const uint32_t b[2] = {LoadBf16x2(&svt[at]), LoadBf16x2(&svt[at + 8])};
        MmaBf16M16N8K16(o[j], pa[kk], b, o[j]);
      }
    }
  }

  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (row_pos[r] < 0) continue;
    const size_t base = (static_cast<size_t>(row_token[r]) * a.num_heads + h) * HD + 2 * t4;
    for (int j = 0; j < HD / 8; ++j) {
      for (int e = 0; e < 2; ++e) {
        const size_t i = base + 8 * j + e;
        const float x = __fmul_rn(o[j][2 * r + e] / l, a.v_scale);
        a.out[i] = x;
        if (a.out_bf16 != nullptr)
          static_cast<__nv_bfloat16*>(a.out_bf16)[i] = __float2bfloat16_rn(x);
      }
    }
  }
}

template <typename KV, int HD>
void LaunchFlash(dim3 grid, cudaStream_t stream, const PagedAttentionArgs& a) {
  [[maybe_unused]] static constexpr auto* flash = &FlashPrefillKernel<KV, HD>;
  TS_LAUNCH(flash, grid, kFlashThreads, 0, stream, a);
}

}  // namespace

bool FlashPrefillApplies(const PagedAttentionArgs& a) {
  return a.tensor_core_prefill && (a.kv == KvElem::kBf16 || a.kv == KvElem::kFp8) &&
         (a.head_dim == 64 || a.head_dim == 128) && a.num_tokens > a.num_seqs &&
         reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;
}

cudaError_t LaunchFlashPrefill(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (!FlashPrefillApplies(a)) return cudaErrorInvalidValue;
  // At most one partial tile a sequence beyond the whole ones of all query tokens.
  const dim3 grid((a.num_tokens + kFlashRows - 1) / kFlashRows + a.num_seqs, a.num_heads);
  const bool fp8 = a.kv == KvElem::kFp8;
  if (a.head_dim == 64) {
    fp8 ? LaunchFlash<Fp8E4m3, 64>(grid, stream, a)
        : LaunchFlash<__nv_bfloat16, 64>(grid, stream, a);
  } else {
    fp8 ? LaunchFlash<Fp8E4m3, 128>(grid, stream, a)
        : LaunchFlash<__nv_bfloat16, 128>(grid, stream, a);
  }
  return cudaGetLastError();
}

}  // namespace tinyserve::cuda
