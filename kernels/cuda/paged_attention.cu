// Paged attention on CUDA: prefill chunks over a cached prefix and decode alike (the CPU twin is
// CpuBackend::PagedAttention). One block handles one (head, token, context range). The block walks
// its range in chunks of kChunk positions with an online softmax: a warp per key computes the
// scaled scores q.k / sqrt(head_dim) into shared memory; the chunk's max rescales the running sum
// and the output accumulator; groups of head_dim threads accumulate p * v over the chunk's rows.
// With more than one range per (token, head) (flash-decoding, for long contexts in small batches)
// each range writes its normalized output, max and sum, and a second kernel merges the ranges.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace tinyserve::cuda {
namespace {

constexpr int kThreads = 256;  // >= kMaxAttentionHeadDim: every head dim has a thread
constexpr int kChunk = 256;    // positions scored per pass through shared memory
constexpr int kMinSplitLength = 256;
static_assert(kThreads >= kMaxAttentionHeadDim, "one thread per output dimension");

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

// grid (num_heads, num_tokens, num_splits), block kThreads.
// scratch (num_splits > 1): out [tokens, heads, splits, head_dim] | max, sum [tokens, heads,
// splits]
__global__ void PagedAttentionKernel(PagedAttentionArgs a, int32_t num_splits, float* scratch) {
  TS_SHARED_ARRAY(float, sq, kMaxAttentionHeadDim);
  TS_SHARED_ARRAY(float, scores, kChunk);
  TS_SHARED_ARRAY(float, partial, kThreads);
  TS_SHARED_ARRAY(float, red, 32);
  TS_SHARED_VAR(int32_t, seq_shared);

  const int32_t h = blockIdx.x, t = blockIdx.y, split = blockIdx.z;
  const int32_t hd = a.head_dim;
  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32, num_warps = kThreads / 32;
  const int32_t len = a.positions[t] + 1;
  const int32_t split_len = (a.max_blocks_per_seq * a.block_size + num_splits - 1) / num_splits;
  const int32_t start = split * split_len;
  const int32_t end = min(start + split_len, len);
  const size_t row = static_cast<size_t>(t) * a.num_heads + h;  // (token, head)
  const size_t total_rows = static_cast<size_t>(a.num_tokens) * a.num_heads;
  // Only with num_splits > 1: scratch is null otherwise (no offsets from a null pointer).
  float* split_out = scratch;
  float* split_max = num_splits > 1 ? scratch + total_rows * num_splits * hd : nullptr;
  float* split_sum = num_splits > 1 ? split_max + total_rows * num_splits : nullptr;

  if (start >= end) {  // nothing of this sequence's context falls in this range
    if (tid == 0 && num_splits > 1) {
      split_max[row * num_splits + split] = -INFINITY;
      split_sum[row * num_splits + split] = 0.0f;
    }
    return;
  }
  if (tid == 0) seq_shared = SequenceOf(a.query_start, a.num_seqs, t);
  for (int32_t i = tid; i < hd; i += kThreads)
    sq[i] = a.q[static_cast<size_t>(t) * a.q_stride + h * hd + i];
  __syncthreads();

  const int32_t* table = a.block_tables + static_cast<size_t>(seq_shared) * a.max_blocks_per_seq;
  const int32_t kvh = h / (a.num_heads / a.num_kv_heads);
  const int64_t kv_width = static_cast<int64_t>(a.num_kv_heads) * hd;
  const int32_t bs = a.block_size;
  const float denom = sqrtf(static_cast<float>(hd));
  // Output dimension i of group g: groups split a chunk's positions between them.
  const int32_t groups = kThreads / hd;
  const int32_t g = tid / hd, i = tid % hd;

  float m_run = -INFINITY, l_run = 0.0f, acc = 0.0f;
  for (int32_t c0 = start; c0 < end; c0 += kChunk) {
    const int32_t c1 = min(c0 + kChunk, end);
    for (int32_t p = c0 + warp; p < c1; p += num_warps) {
      const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
      const float* kp = a.k_cache + slot * kv_width + kvh * hd;
      float s = 0.0f;
      for (int32_t j = lane; j < hd; j += 32) s += sq[j] * kp[j];
      s = WarpSum(s);
      if (lane == 0) scores[p - c0] = s / denom;
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
        acc += scores[p - c0] * a.v_cache[slot * kv_width + kvh * hd + i];
      }
    }
    m_run = m_new;
    __syncthreads();  // the next chunk overwrites scores
  }
  if (g < groups) partial[g * hd + i] = acc;
  __syncthreads();
  if (tid < hd) {
    float o = 0.0f;
    for (int32_t gg = 0; gg < groups; ++gg) o += partial[gg * hd + tid];
    o /= l_run;
    if (num_splits == 1) {
      a.out[row * hd + tid] = o;
    } else {
      split_out[(row * num_splits + split) * hd + tid] = o;
    }
  }
  if (tid == 0 && num_splits > 1) {
    split_max[row * num_splits + split] = m_run;
    split_sum[row * num_splits + split] = l_run;
  }
}

// grid (num_heads, num_tokens), block head_dim: out = sum_s w_s * out_s / sum_s w_s with
// w_s = exp(max_s - max) * sum_s over the non-empty ranges s.
__global__ void MergeSplitsKernel(PagedAttentionArgs a, int32_t num_splits, const float* scratch) {
  const int32_t h = blockIdx.x, t = blockIdx.y, i = threadIdx.x;
  const int32_t hd = a.head_dim;
  const size_t row = static_cast<size_t>(t) * a.num_heads + h;
  const size_t total_rows = static_cast<size_t>(a.num_tokens) * a.num_heads;
  const float* split_out = scratch;
  const float* split_max = scratch + total_rows * num_splits * hd;
  const float* split_sum = split_max + total_rows * num_splits;
  float m = -INFINITY;
  for (int32_t s = 0; s < num_splits; ++s) {
    if (split_sum[row * num_splits + s] > 0.0f) m = fmaxf(m, split_max[row * num_splits + s]);
  }
  float total = 0.0f, o = 0.0f;
  for (int32_t s = 0; s < num_splits; ++s) {
    const float l = split_sum[row * num_splits + s];
    if (!(l > 0.0f)) continue;
    const float w = expf(split_max[row * num_splits + s] - m) * l;
    total += w;
    o += w * split_out[(row * num_splits + s) * hd + i];
  }
  a.out[row * hd + i] = o / total;
}

}  // namespace

int32_t ChooseAttentionSplits(int32_t num_tokens, int32_t num_heads, int32_t max_context,
                              int32_t num_sms) {
  const int64_t blocks = static_cast<int64_t>(num_tokens) * num_heads;
  const int64_t want = (2LL * num_sms + blocks - 1) / std::max<int64_t>(1, blocks);
  const int64_t most = std::max<int64_t>(1, max_context / kMinSplitLength);
  return static_cast<int32_t>(std::clamp<int64_t>(want, 1, most));
}

size_t PagedAttentionScratchFloats(int32_t num_tokens, int32_t num_heads, int32_t head_dim,
                                   int32_t num_splits) {
  if (num_splits <= 1) return 0;
  return static_cast<size_t>(num_tokens) * num_heads * num_splits * (head_dim + 2);
}

cudaError_t LaunchPagedAttention(const PagedAttentionArgs& a, int32_t num_splits, float* scratch,
                                 cudaStream_t stream) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (a.head_dim <= 0 || a.head_dim > kMaxAttentionHeadDim || num_splits < 1 ||
      a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.num_heads > 65535 ||
      a.num_tokens > 65535) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(a.num_heads, a.num_tokens, num_splits);
  TS_LAUNCH(PagedAttentionKernel, grid, kThreads, 0, stream, a, num_splits, scratch);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess || num_splits == 1) return err;
  TS_LAUNCH(MergeSplitsKernel, dim3(a.num_heads, a.num_tokens), a.head_dim, 0, stream, a,
            num_splits, scratch);
  return cudaGetLastError();
}

}  // namespace tinyserve::cuda
