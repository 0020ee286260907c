// Paged attention on CUDA: prefill chunks over a cached prefix and decode alike (the CPU twin is
// CpuBackend::PagedAttention). Two kernels, one per model (head_dim and the cache dtype decide):
// the vectorized one (VecAttentionKernel, below: head_dim a multiple of 4 for fp32 caches, 8 for
// bf16 and fp8; 256-position splits) and this generic one for other head dims. The caches hold
// fp32, bf16 or fp8 e4m3 (LoadKv / Widen16 widen both exactly; an fp8 row is read in 8-byte
// vectors of 8 values, as a bf16 row in 16-byte ones, so the same values give the same bits). Each
// (token, head) row's context [0, len) is cut into splits of kSplitLength positions: a fixed
// length, so a row's splits depend only on its own length, never on the batch's block-table width,
// the number of rows or the grid. A split is attended from a fresh state by AttendSplit: it walks
// the split in chunks of kChunk positions with an online softmax (a warp per key computes the
// scaled scores q.k / sqrt(head_dim) into shared memory; the chunk's max rescales the running sum
// and the output accumulator; groups of head_dim threads accumulate p * v over the chunk's rows)
// and gives the split's normalized output, max and sum. The row's result is the left fold
// (FoldSplit) of its splits in increasing order. Two launch shapes compute exactly that,
// instruction for instruction:
//   - one block per row (grid z = 1) attends the row's splits one after the other and folds them;
//   - one block per split (flash-decoding, grid z = the widest table's split count, for few rows
//     and long contexts): each block writes its split's output, max and sum and counts itself in
//     (an atomic counter per row); the last of the row's blocks to finish folds them in split
//     order and re-arms the counter, so no second kernel runs. Blocks past their row's length exit
//     at once and the fold stops at the row's last split, so a grid sized for the widest table
//     (CUDA graph replays) is valid. A row of one split is written by its block directly, as in
//     the one-block shape.
// With PagedAttentionArgs::tensor_core_prefill, the rows of sequences with several query tokens
// (prefill chunks) go to the tensor-core kernel of flash_prefill.cu instead, where it applies;
// LaunchPagedAttention launches both and each kernel skips the other's rows, or the tensor-core
// kernel alone when the host knows no sequence decodes (PagedAttentionArgs::min_query_len).
// AttendSplit and FoldSplit are __noinline__ so both shapes run the same code for them, and the
// fold's arithmetic is written with _rn intrinsics (never contracted). So a row's output is bitwise
// the same whatever else is in the batch and whichever shape the host picks
// (ChooseAttentionSplits may therefore look at the batch). Every reduction inside a split (warp and
// block sums, the groups' partials) has a fixed order given head_dim and the split's bounds.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/paged_table.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/vec16.cuh"

namespace tinyserve::cuda {
namespace {

constexpr int kThreads = 256;  // >= kMaxAttentionHeadDim: every head dim has a thread
constexpr int kChunk = 256;    // positions scored per pass through shared memory
// Positions per split: fixed, a multiple of kChunk and of every power-of-two block size up to 512.
constexpr int32_t kSplitLength = 512;
static_assert(kThreads >= kMaxAttentionHeadDim, "one thread per output dimension");
static_assert(kSplitLength % kChunk == 0, "a split is whole chunks");

// The sequence that query token t belongs to: the largest s with query_start[s] <= t.
__device__ int32_t SequenceOf(const int32_t* query_start, int32_t num_seqs, int32_t t) {
  int32_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Output element i: o times the cache's value scale (1.0 unless an fp8 cache has one), in fp32,
// and rounded to bf16 (nearest even) when the args ask for that too.
__device__ __forceinline__ void StoreOut(const PagedAttentionArgs& a, size_t i, float o) {
  o = __fmul_rn(o, a.v_scale);
  a.out[i] = o;
  if (a.out_bf16 != nullptr) static_cast<__nv_bfloat16*>(a.out_bf16)[i] = __float2bfloat16_rn(o);
}

// True when token t's row is the tensor-core prefill kernel's (flash_prefill.cu): its sequence has
// at least kFlashMinQueryTokens query tokens and the launch handed those rows over.
__device__ __forceinline__ bool LeftToFlashPrefill(const PagedAttentionArgs& a, int32_t t) {
  if (!a.prefill_rows_elsewhere) return false;
  const int32_t s = SequenceOf(a.query_start, a.num_seqs, t);
  return a.query_start[s + 1] - a.query_start[s] >= kFlashMinQueryTokens;
}

__device__ __forceinline__ int32_t NumSplits(int32_t len) {
  return (len + kSplitLength - 1) / kSplitLength;
}

// One split's (or a fold of splits') result for one output dimension: the normalized output o,
// the max score m and the sum of exp(score - m) l.
struct SplitResult {
  float o, m, l;
};

// Attends positions [start, end) (non-empty) of one row from a fresh state. sq [head_dim] is the
// query in shared memory; table the row's block table; scores [kChunk], partial [kThreads] and
// red [32] shared scratch. Returns, on thread i < head_dim, dimension i's output (other threads:
// o = 0), and on every thread m and l. Contains barriers: every thread of the block calls it.
__device__ __forceinline__ float LoadKv(const float* p) { return *p; }
__device__ __forceinline__ float LoadKv(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float LoadKv(const Fp8E4m3* p) { return E4m3ToFloat(p->bits); }

template <typename KV>
__device__ __noinline__ SplitResult AttendSplit(
    const KV* k_cache, const KV* v_cache, TS_SHARED_PTR(float) sq, const int32_t* table, int32_t bs,
    int32_t hd, int64_t kv_offset, int64_t kv_width, float k_scale, int32_t start, int32_t end,
    TS_SHARED_PTR(float) scores, TS_SHARED_PTR(float) partial, TS_SHARED_PTR(float) red) {
  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32, num_warps = kThreads / 32;
  const float denom = sqrtf(static_cast<float>(hd));
  // Output dimension i of group g: groups split a chunk's positions between them.
  const int32_t groups = kThreads / hd;
  const int32_t g = tid / hd, i = tid % hd;

  float m_run = -INFINITY, l_run = 0.0f, acc = 0.0f;
  for (int32_t c0 = start; c0 < end; c0 += kChunk) {
    const int32_t c1 = min(c0 + kChunk, end);
    for (int32_t p = c0 + warp; p < c1; p += num_warps) {
      const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      const KV* kp = k_cache + slot * kv_width + kv_offset;
      float s = 0.0f;
      for (int32_t j = lane; j < hd; j += 32) s += sq[j] * LoadKv(kp + j);
      s = WarpSum(s);
      if (lane == 0) scores[p - c0] = __fmul_rn(s, k_scale) / denom;
    }
    __syncthreads();
    float cm = -INFINITY;
    for (int32_t j = tid; j < c1 - c0; j += kThreads) cm = fmaxf(cm, scores[j]);
    cm = BlockMax(cm, red);
    const float m_new = fmaxf(m_run, cm);
    float cl = 0.0f;
    for (int32_t j = tid; j < c1 - c0; j += kThreads) {
      const float e = expf(scores[j] - m_new);
      scores[j] = e;
      cl += e;
    }
    cl = BlockSum(cl, red);  // its barriers also publish the exponentiated scores
    const float correction = expf(m_run - m_new);  // 0 on the first chunk (m_run = -inf)
    l_run = l_run * correction + cl;
    acc *= correction;
    if (g < groups) {
      for (int32_t p = c0 + g; p < c1; p += groups) {
        const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
        acc += scores[p - c0] * LoadKv(v_cache + slot * kv_width + kv_offset + i);
      }
    }
    m_run = m_new;
    __syncthreads();  // the next chunk overwrites scores
  }
  if (g < groups) partial[g * hd + i] = acc;
  __syncthreads();
  float o = 0.0f;
  if (tid < hd) {
    for (int32_t gg = 0; gg < groups; ++gg) o += partial[gg * hd + tid];
    o /= l_run;
  }
  __syncthreads();  // partial is reused by the next split
  return {o, m_run, l_run};
}

// The fold of split b (the next in order) into the running result a of the splits before it.
// Explicit _rn arithmetic: the same bits in whichever kernel it runs.
__device__ __noinline__ SplitResult FoldSplit(SplitResult a, SplitResult b) {
  const float m = fmaxf(a.m, b.m);
  const float wa = __fmul_rn(expf(__fsub_rn(a.m, m)), a.l);
  const float wb = __fmul_rn(expf(__fsub_rn(b.m, m)), b.l);
  const float l = __fadd_rn(wa, wb);
  return {__fdiv_rn(__fmaf_rn(wb, b.o, __fmul_rn(wa, a.o)), l), m, l};
}

// The fold of a row's stored splits 0, 1, ... row_splits - 1 in order, output dimension i (the
// one-block shape's fold). Read through volatile: other blocks wrote them (then fenced).
__device__ float FoldStoredSplits(const float* scratch, size_t total_rows, int32_t grid_splits,
                                  int32_t hd, size_t row, int32_t i, int32_t row_splits) {
  const volatile float* split_out = scratch + row * grid_splits * hd;
  const volatile float* split_max = scratch + total_rows * grid_splits * hd + row * grid_splits;
  const volatile float* split_sum =
      scratch + total_rows * grid_splits * (hd + 1) + row * grid_splits;
  SplitResult r{split_out[i], split_max[0], split_sum[0]};
  for (int32_t s = 1; s < row_splits; ++s) {
    r = FoldSplit(r, {split_out[s * hd + i], split_max[s], split_sum[s]});
  }
  return r.o;
}

// After a block stored its split of a row (or of a group's rows): counts it in, and returns true
// on the block that finished last (it then folds the row's splits), having re-armed the counter
// to zero for the next launch. Every thread of the block calls it.
__device__ bool LastSplitIn(int32_t* counter, int32_t row_splits, TS_SHARED_PTR(int32_t) flag) {
  __threadfence();  // this block's stores are visible before its count is
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool last = atomicAdd(counter, 1) == row_splits - 1;
    if (last) *counter = 0;  // every split has arrived: nobody else touches it in this launch
    *flag = last ? 1 : 0;
  }
  __syncthreads();
  const bool last = *flag != 0;
  if (last) __threadfence();  // the other blocks' stores, before reading them
  return last;
}

// ---- The vectorized kernel: head_dim a multiple of 4 (fp32 KV), 16-byte aligned caches --------
// One block per (token, KV head, split) serves every query head of that KV head's group (up to
// kGroup of them; a larger group takes several head chunks), so each key and value row is read
// once per group, not once per query head. The KV row of a position is read with 16-byte loads: a
// key is spread over `lanes` = min(32, pow2 >= head_dim / 4) lanes of a warp (32 / lanes keys per
// warp at once, kUnroll keys per lane in flight), whose partial dot products are summed by a xor
// butterfly (the same bits on every lane). A split's positions' cache slots are staged in shared
// memory once. Per split (kVecSplit positions) and query head: scores q.k / sqrt(head_dim) into
// shared memory, then the max, exp(score - max) and their sum by one warp in lane order, then each
// lane accumulates exp * v for its 4 dimensions over the positions of its key slot; the key slots
// of a warp are summed by a xor butterfly and the warps in order 0, 1, 2, 3. The normalized split
// result and the fold of splits (FoldSplit, the same as the generic kernel's) follow the generic
// kernel's contract, so the launch shape never changes the bits: every order above depends only on
// head_dim and the split's bounds, never on the batch, the grid or the group size.
constexpr int kVecThreads = 128;
constexpr int kVecWarps = kVecThreads / 32;
constexpr int32_t kVecSplit = 256;  // positions per split
constexpr int kUnroll = 4;          // keys (or values) per lane in flight

// The lanes a key is spread over: the smallest power of two >= nv (vectors a row), at most 32.
__device__ __forceinline__ int LanesPerKey(int nv) {
  int l = 1;
  while (l < nv && l < 32) l *= 2;
  return l;
}

// grid (num_kv_heads * head_chunks, num_tokens, grid_splits), block kVecThreads, dynamic shared
// memory VecAttentionSharedBytes. kGroup: query heads a block serves (>= the group, or a chunk of
// it); kRows: 16-byte vectors a lane holds of one row (head_dim <= 128 * kRows).
template <typename KV, int kGroup, int kRows>
__global__ void __launch_bounds__(kVecThreads)
    VecAttentionKernel(PagedAttentionArgs a, int32_t grid_splits, int32_t head_chunks,
                       float* scratch, int32_t* counters) {
  TS_SHARED_ARRAY(int32_t, slots, kVecSplit);
  TS_SHARED_ARRAY(int32_t, last_flag, 1);
  TS_SHARED_ARRAY(float, stat, 4 * kGroup);  // this split's max, sum; the running max, sum
  TS_SHARED_DYNAMIC(float, smem);
  const int32_t hd = a.head_dim;
  const auto scores = smem;                        // [kGroup][kVecSplit]
  const auto partial = smem + kGroup * kVecSplit;  // [kGroup][hd]: the warps' sum
  const auto run_o = partial + kGroup * hd;        // [kGroup][hd]: the fold of earlier splits

  const int32_t kvh = blockIdx.x / head_chunks, chunk = blockIdx.x % head_chunks;
  const int32_t t = blockIdx.y, z = blockIdx.z;
  const int32_t group = a.num_heads / a.num_kv_heads;
  const int32_t h0 = kvh * group + chunk * kGroup;
  const int32_t nh = min(kGroup, group - chunk * kGroup);  // heads of this block
  const int32_t len = a.positions[t] + 1;
  const int32_t row_splits = (len + kVecSplit - 1) / kVecSplit;
  const int32_t first = grid_splits == 1 ? 0 : z;
  const int32_t last = grid_splits == 1 ? row_splits : min(z + 1, row_splits);  // exclusive
  if (first >= last || LeftToFlashPrefill(a, t)) return;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  constexpr int kVec = KvVector<KV>::kElems;
  using Raw = typename KvVector<KV>::Raw;
  const int nv = hd / kVec;  // 16-byte vectors a row
  const int lanes = LanesPerKey(nv), keys_per_warp = 32 / lanes;
  const int sub = lane % lanes, kslot = lane / lanes;
  const int key_slots = kVecWarps * keys_per_warp, my_slot = warp * keys_per_warp + kslot;
  const int32_t seq = SequenceOf(a.query_start, a.num_seqs, t);
  const int32_t* table = BlockTableRow(a, seq);
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * hd;
  const KV* k_base = static_cast<const KV*>(a.k_cache) + static_cast<int64_t>(kvh) * hd;
  const KV* v_base = static_cast<const KV*>(a.v_cache) + static_cast<int64_t>(kvh) * hd;
  const float denom = sqrtf(static_cast<float>(hd));

  // This lane's dimensions of each query head: vectors sub, sub + lanes, ...
  float q[kGroup][kRows][kVec];
  for (int g = 0; g < kGroup; ++g) {
    for (int r = 0; r < kRows; ++r) {
      const int j = sub + r * lanes;
      for (int e = 0; e < kVec; ++e) {
        q[g][r][e] = g < nh && j < nv
                         ? a.q[static_cast<size_t>(t) * a.q_stride + (h0 + g) * hd + kVec * j + e]
                         : 0.0f;
      }
    }
  }

  for (int32_t s = first; s < last; ++s) {
    const int32_t start = s * kVecSplit, n = min(start + kVecSplit, len) - start;
    __syncthreads();  // the previous split's readers of slots and scores are done
    for (int32_t i = tid; i < n; i += kVecThreads) {
      const int32_t p = start + i;
      slots[i] = table[p / a.block_size] * a.block_size + p % a.block_size;
    }
    __syncthreads();

    // Scores: key slot my_slot takes positions my_slot, my_slot + key_slots, ...
    for (int32_t base = 0; base < n; base += key_slots * kUnroll) {
      Raw raw[kUnroll][kRows];
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t i = base + u * key_slots + my_slot;
        for (int r = 0; r < kRows; ++r) {
          const int j = sub + r * lanes;
          raw[u][r] = i < n && j < nv
                          ? *reinterpret_cast<const Raw*>(
                                k_base + static_cast<int64_t>(slots[i]) * kv_width + kVec * j)
                          : Raw{};
        }
      }
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t i = base + u * key_slots + my_slot;
        float part[kGroup];
        for (int g = 0; g < kGroup; ++g) part[g] = 0.0f;
        for (int r = 0; r < kRows; ++r) {
          float k[kVec];
          Widen16(raw[u][r], k, k_base);
          for (int g = 0; g < kGroup; ++g) {
            for (int e = 0; e < kVec; ++e) part[g] = __fmaf_rn(q[g][r][e], k[e], part[g]);
          }
        }
        for (int o = lanes / 2; o > 0; o /= 2) {
          for (int g = 0; g < kGroup; ++g) part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
        }
        if (i < n && sub == 0) {
          for (int g = 0; g < nh; ++g) {
            scores[g * kVecSplit + i] = __fmul_rn(part[g], a.k_scale) / denom;
          }
        }
      }
    }
    __syncthreads();

    // Softmax statistics, one warp per head, in lane order.
    for (int g = warp; g < nh; g += kVecWarps) {
      float m = -INFINITY;
      for (int32_t i = lane; i < n; i += 32) m = fmaxf(m, scores[g * kVecSplit + i]);
      m = WarpMax(m);
      float l = 0.0f;
      for (int32_t i = lane; i < n; i += 32) {
        const float e = expf(scores[g * kVecSplit + i] - m);
        scores[g * kVecSplit + i] = e;
        l += e;
      }
      l = WarpSum(l);
      if (lane == 0) {
        stat[g] = m;
        stat[kGroup + g] = l;
      }
    }
    __syncthreads();

    // Values: the same key slots; acc[g][r][e] is dimension kVec (sub + r * lanes) + e of head g.
    float acc[kGroup][kRows][kVec];
    for (int g = 0; g < kGroup; ++g) {
      for (int r = 0; r < kRows; ++r) {
        for (int e = 0; e < kVec; ++e) acc[g][r][e] = 0.0f;
      }
    }
    for (int32_t base = 0; base < n; base += key_slots * kUnroll) {
      Raw raw[kUnroll][kRows];
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t i = base + u * key_slots + my_slot;
        for (int r = 0; r < kRows; ++r) {
          const int j = sub + r * lanes;
          raw[u][r] = i < n && j < nv
                          ? *reinterpret_cast<const Raw*>(
                                v_base + static_cast<int64_t>(slots[i]) * kv_width + kVec * j)
                          : Raw{};
        }
      }
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t i = base + u * key_slots + my_slot;
        if (i >= n) break;  // the same on every lane of the key slot; no warp operation below
        for (int g = 0; g < nh; ++g) {
          const float p = scores[g * kVecSplit + i];
          for (int r = 0; r < kRows; ++r) {
            float v[kVec];
            Widen16(raw[u][r], v, v_base);
            for (int e = 0; e < kVec; ++e) acc[g][r][e] = __fmaf_rn(p, v[e], acc[g][r][e]);
          }
        }
      }
    }
    // The warp's key slots (xor butterfly), then the warps in order into `partial`.
    for (int o = lanes; o < 32; o *= 2) {
      for (int g = 0; g < kGroup; ++g) {
        for (int r = 0; r < kRows; ++r) {
          for (int e = 0; e < kVec; ++e) {
            acc[g][r][e] += __shfl_xor_sync(0xffffffffu, acc[g][r][e], o);
          }
        }
      }
    }
    for (int w = 0; w < kVecWarps; ++w) {
      if (warp == w && kslot == 0) {
        for (int g = 0; g < nh; ++g) {
          for (int r = 0; r < kRows; ++r) {
            const int j = sub + r * lanes;
            if (j >= nv) continue;
            for (int e = 0; e < kVec; ++e) {
              const int d = g * hd + kVec * j + e;
              partial[d] = w == 0 ? acc[g][r][e] : partial[d] + acc[g][r][e];
            }
          }
        }
      }
      __syncthreads();
    }

    // The split's normalized output, folded into the running result (FoldSplit) past the first.
    for (int32_t d = tid; d < nh * hd; d += kVecThreads) {
      const int g = d / hd;
      const SplitResult split{partial[d] / stat[kGroup + g], stat[g], stat[kGroup + g]};
      const SplitResult r =
          s == first ? split
                     : FoldSplit({run_o[d], stat[2 * kGroup + g], stat[3 * kGroup + g]}, split);
      run_o[d] = r.o;
    }
    __syncthreads();  // every thread has read the running max and sum
    if (tid < nh) {
      const SplitResult split{0.0f, stat[tid], stat[kGroup + tid]};
      const SplitResult r =
          s == first ? split
                     : FoldSplit({0.0f, stat[2 * kGroup + tid], stat[3 * kGroup + tid]}, split);
      stat[2 * kGroup + tid] = r.m;
      stat[3 * kGroup + tid] = r.l;
    }
  }
  __syncthreads();

  const bool direct = grid_splits == 1 || row_splits == 1;
  const size_t total_rows = static_cast<size_t>(a.num_tokens) * a.num_heads;
  for (int32_t d = tid; d < nh * hd; d += kVecThreads) {
    const int g = d / hd, i = d % hd;
    const size_t row = static_cast<size_t>(t) * a.num_heads + h0 + g;
    if (direct) {
      StoreOut(a, row * hd + i, run_o[d]);
    } else {
      scratch[(row * grid_splits + z) * hd + i] = run_o[d];
      if (i == 0) {
        scratch[total_rows * grid_splits * hd + row * grid_splits + z] = stat[2 * kGroup + g];
        scratch[total_rows * grid_splits * (hd + 1) + row * grid_splits + z] = stat[3 * kGroup + g];
      }
    }
  }
  if (direct) return;
  // The block's rows are (t, h0 .. h0 + nh): counted under their first.
  if (!LastSplitIn(counters + static_cast<size_t>(t) * a.num_heads + h0, row_splits, last_flag)) {
    return;
  }
  for (int32_t d = tid; d < nh * hd; d += kVecThreads) {
    const int g = d / hd, i = d % hd;
    const size_t row = static_cast<size_t>(t) * a.num_heads + h0 + g;
    StoreOut(a, row * hd + i,
             FoldStoredSplits(scratch, total_rows, grid_splits, hd, row, i, row_splits));
  }
}

template <typename KV, int kGroup, int kRows>
void LaunchVec(dim3 grid, size_t smem, cudaStream_t stream, const PagedAttentionArgs& a,
               int32_t num_splits, int32_t chunks, float* scratch, int32_t* counters) {
  // (A name for the launch macro, whose arguments cannot hold the template's commas; GCC calls it
  // unused, as the host build's lambda reads it without a capture.)
  [[maybe_unused]] static constexpr auto* vec_attention = &VecAttentionKernel<KV, kGroup, kRows>;
  TS_LAUNCH(vec_attention, grid, kVecThreads, smem, stream, a, num_splits, chunks, scratch,
            counters);
}

size_t VecAttentionSharedBytes(int group, int32_t head_dim) {
  return 4 * (static_cast<size_t>(group) * kVecSplit + 2 * static_cast<size_t>(group) * head_dim);
}

// grid (num_heads, num_tokens, grid_splits), block kThreads. grid_splits == 1: the block attends
// all of its row's splits; else block z attends split z and, for rows of more than one split,
// writes it to scratch: out [tokens, heads, grid_splits, head_dim] | max, sum [tokens, heads,
// grid_splits].
template <typename KV>
__global__ void PagedAttentionKernel(PagedAttentionArgs a, int32_t grid_splits, float* scratch,
                                     int32_t* counters) {
  TS_SHARED_ARRAY(float, sq, kMaxAttentionHeadDim);
  TS_SHARED_ARRAY(int32_t, last_flag, 1);
  TS_SHARED_ARRAY(float, scores, kChunk);
  TS_SHARED_ARRAY(float, partial, kThreads);
  TS_SHARED_ARRAY(float, red, 32);
  TS_SHARED_VAR(int32_t, seq_shared);

  const int32_t h = blockIdx.x, t = blockIdx.y, z = blockIdx.z;
  const int32_t hd = a.head_dim;
  const int tid = threadIdx.x;
  const int32_t len = a.positions[t] + 1;
  const int32_t row_splits = NumSplits(len);
  const int32_t first = grid_splits == 1 ? 0 : z;
  const int32_t last = grid_splits == 1 ? row_splits : min(z + 1, row_splits);  // exclusive
  // Past this row's context (the fold below never reads it), or not this kernel's row.
  if (first >= last || LeftToFlashPrefill(a, t)) return;
  const size_t row = static_cast<size_t>(t) * a.num_heads + h;  // (token, head)

  if (tid == 0) seq_shared = SequenceOf(a.query_start, a.num_seqs, t);
  for (int32_t i = tid; i < hd; i += kThreads)
    sq[i] = a.q[static_cast<size_t>(t) * a.q_stride + h * hd + i];
  __syncthreads();
  const int32_t* table = BlockTableRow(a, seq_shared);
  const int32_t kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * hd;

  SplitResult r{};
  for (int32_t s = first; s < last; ++s) {
    const SplitResult split =
        AttendSplit(static_cast<const KV*>(a.k_cache), static_cast<const KV*>(a.v_cache), sq, table,
                    a.block_size, hd, kvh * hd, kv_width, a.k_scale, s * kSplitLength,
                    min((s + 1) * kSplitLength, len), scores, partial, red);
    r = s == first ? split : FoldSplit(r, split);
  }
  if (grid_splits == 1 || row_splits == 1) {
    if (tid < hd) StoreOut(a, row * hd + tid, r.o);
    return;
  }
  const size_t total_rows = static_cast<size_t>(a.num_tokens) * a.num_heads;
  float* split_out = scratch;
  float* split_max = scratch + total_rows * grid_splits * hd;
  float* split_sum = split_max + total_rows * grid_splits;
  if (tid < hd) split_out[(row * grid_splits + z) * hd + tid] = r.o;
  if (tid == 0) {
    split_max[row * grid_splits + z] = r.m;
    split_sum[row * grid_splits + z] = r.l;
  }
  if (!LastSplitIn(counters + row, row_splits, last_flag)) return;
  if (tid < hd) {
    StoreOut(a, row * hd + tid,
             FoldStoredSplits(scratch, total_rows, grid_splits, hd, row, tid, row_splits));
  }
}

// The vectorized kernel takes rows of whole vectors (head_dim a multiple of 4 for fp32, 8 for bf16
// and fp8), at most two vectors a lane, on 16-byte aligned caches.
int32_t VecElems(KvElem kv) { return kv == KvElem::kF32 ? 4 : 8; }
bool VecHeadDim(int32_t head_dim, KvElem kv) {
  const int32_t vec = VecElems(kv);
  return head_dim > 0 && head_dim % vec == 0 && head_dim <= 2 * 32 * vec;
}
bool UsesVecKernel(int32_t head_dim, KvElem kv, const void* k_cache, const void* v_cache) {
  return VecHeadDim(head_dim, kv) && reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(v_cache) % 16 == 0;
}

// The query heads a block of the vectorized kernel serves: the group rounded up to 1, 2, 4 or 8
// (a larger group is served in chunks of 8).
int VecGroup(int32_t group) { return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8; }

int32_t SplitLength(bool vec) { return vec ? kVecSplit : kSplitLength; }

}  // namespace

int32_t ChooseAttentionSplits(int32_t num_tokens, int32_t num_heads, int32_t num_kv_heads,
                              int32_t head_dim, KvElem kv, int32_t max_context, int32_t num_sms) {
  // Both shapes give the same bits (see the top of the file); this only picks the faster one.
  // The caches are cudaMalloc-ed (aligned): head_dim and the dtype decide the kernel.
  const bool vec = VecHeadDim(head_dim, kv);
  const int32_t split = SplitLength(vec);
  const int32_t widest = std::max<int32_t>(1, (max_context + split - 1) / split);
  if (!vec) {
    const int64_t rows = static_cast<int64_t>(num_tokens) * num_heads;
    return rows >= 2LL * num_sms ? 1 : widest;
  }
  const int32_t group = num_kv_heads > 0 ? num_heads / num_kv_heads : 1;
  const int64_t blocks = static_cast<int64_t>(num_tokens) * num_kv_heads *
                         ((group + VecGroup(group) - 1) / VecGroup(group));
  return blocks >= 4LL * num_sms ? 1 : widest;
}

size_t PagedAttentionScratchFloats(int32_t num_tokens, int32_t num_heads, int32_t head_dim,
                                   int32_t num_splits) {
  if (num_splits <= 1) return 0;
  return static_cast<size_t>(num_tokens) * num_heads * num_splits * (head_dim + 2);
}

size_t PagedAttentionCounters(int32_t num_tokens, int32_t num_heads) {
  return static_cast<size_t>(num_tokens) * num_heads;
}

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, int32_t num_splits, float* scratch,
                                 int32_t* counters, cudaStream_t stream) {
  if (args.num_tokens <= 0) return cudaSuccess;
  if (args.head_dim <= 0 || args.head_dim > kMaxAttentionHeadDim || num_splits < 1 ||
      num_splits > 65535 || args.num_kv_heads <= 0 || args.num_heads % args.num_kv_heads != 0 ||
      args.num_heads > 65535 || args.num_tokens > 65535) {
    return cudaErrorInvalidValue;
  }
  const bool flash = FlashPrefillApplies(args);
  if (flash && args.min_query_len >= kFlashMinQueryTokens) {
    return LaunchFlashPrefill(args, stream);  // prompt chunks only: no row is left to this kernel
  }
  PagedAttentionArgs a = args;
  a.prefill_rows_elsewhere = flash;
  const bool vec = UsesVecKernel(a.head_dim, a.kv, a.k_cache, a.v_cache);
  const int32_t split = SplitLength(vec);
  // One block per split needs a block for every split of the widest table (1: one per row).
  const int64_t widest =
      (static_cast<int64_t>(a.max_blocks_per_seq) * a.block_size + split - 1) / split;
  if (num_splits > 1 && (num_splits < widest || scratch == nullptr || counters == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (vec) {
    const int32_t group = a.num_heads / a.num_kv_heads;
    const int kg = VecGroup(group);
    const int32_t chunks = (group + kg - 1) / kg;
    const dim3 grid(a.num_kv_heads * chunks, a.num_tokens, num_splits);
    const size_t smem = VecAttentionSharedBytes(kg, a.head_dim);
    // [element][log2 of the group served][vectors a lane - 1]; bf16 and fp8 rows (8 values a
    // vector, head_dim <= 256) take one vector a lane.
    using Launcher = void (*)(dim3, size_t, cudaStream_t, const PagedAttentionArgs&, int32_t,
                              int32_t, float*, int32_t*);
    static constexpr Launcher kLaunchers[3][4][2] = {
        {{LaunchVec<float, 1, 1>, LaunchVec<float, 1, 2>},
         {LaunchVec<float, 2, 1>, LaunchVec<float, 2, 2>},
         {LaunchVec<float, 4, 1>, LaunchVec<float, 4, 2>},
         {LaunchVec<float, 8, 1>, LaunchVec<float, 8, 2>}},
        {{LaunchVec<__nv_bfloat16, 1, 1>, nullptr},
         {LaunchVec<__nv_bfloat16, 2, 1>, nullptr},
         {LaunchVec<__nv_bfloat16, 4, 1>, nullptr},
         {LaunchVec<__nv_bfloat16, 8, 1>, nullptr}},
        {{LaunchVec<Fp8E4m3, 1, 1>, nullptr},
         {LaunchVec<Fp8E4m3, 2, 1>, nullptr},
         {LaunchVec<Fp8E4m3, 4, 1>, nullptr},
         {LaunchVec<Fp8E4m3, 8, 1>, nullptr}}};
    const int log2_group = kg == 1 ? 0 : kg == 2 ? 1 : kg == 4 ? 2 : 3;
    const int rows = a.head_dim > 32 * VecElems(a.kv) ? 2 : 1;
    kLaunchers[static_cast<int>(a.kv)][log2_group][rows - 1](grid, smem, stream, a, num_splits,
                                                             chunks, scratch, counters);
  } else {
    const dim3 grid(a.num_heads, a.num_tokens, num_splits);
    switch (a.kv) {
      case KvElem::kBf16:
        TS_LAUNCH(PagedAttentionKernel<__nv_bfloat16>, grid, kThreads, 0, stream, a, num_splits,
                  scratch, counters);
        break;
      case KvElem::kFp8:
        TS_LAUNCH(PagedAttentionKernel<Fp8E4m3>, grid, kThreads, 0, stream, a, num_splits, scratch,
                  counters);
        break;
      default:
        TS_LAUNCH(PagedAttentionKernel<float>, grid, kThreads, 0, stream, a, num_splits, scratch,
                  counters);
    }
  }
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess || !flash) return launched;
  return LaunchFlashPrefill(a, stream);
}

}  // namespace tinyserve::cuda
