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

// The KV cache's element: fp32, __nv_bfloat16 (nearest even) or fp8 e4m3 (kernels/fp8.h: nearest
// even, saturating to +-448; no scale, as vLLM without calibrated scales: 1.0).
enum class KvElem { kF32, kBf16, kFp8 };

// out[t, :] = table[ids[t], :].  table [vocab, dim] fp32 or bf16 (`bf16`), out [n, dim] fp32.
cudaError_t LaunchEmbedding(const void* table, bool bf16, const int32_t* ids, int32_t n,
                            int32_t dim, float* out, cudaStream_t stream);

// RMSNorm; with `residual` non-null, first residual += delta (fused add) and normalize residual.
// x [n, dim] (ignored when residual is set), delta/residual/out [n, dim], weight [dim]. With
// `out_bf16` (__nv_bfloat16 [n, dim]) non-null, out rounded to bf16 (nearest even) there too, for
// the GEMM that reads it next (what LaunchFloatToBf16 of out would give).
cudaError_t LaunchRmsNorm(const float* x, float* residual, const float* delta, const float* weight,
                          int32_t n, int32_t dim, float eps, float* out, void* out_bf16,
                          cudaStream_t stream);

// RoPE in place at angle positions[t] * inv_freq[i] (inv_freq [head_dim / 2], device); `neox`
// selects the half-split layout (else interleaved pairs).
cudaError_t LaunchRope(float* q, int32_t q_stride, float* k, int32_t k_stride,
                       const int32_t* positions, int32_t n, int32_t num_heads, int32_t num_kv_heads,
                       int32_t head_dim, const float* inv_freq, bool neox, cudaStream_t stream);

// RoPE on q and k (rows of `stride` floats) and the KV-cache write of the rotated k and of v, in
// one kernel: the same bits as LaunchRope then LaunchWriteKvCache.
cudaError_t LaunchRopeWriteKvCache(float* q, float* k, const float* v, int32_t stride,
                                   const int32_t* positions, const int64_t* slots, int32_t n,
                                   int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                   const float* inv_freq, bool neox, KvElem kv, void* k_cache,
                                   void* v_cache, float k_scale, float v_scale,
                                   cudaStream_t stream);

// The caches hold `kv` elements (KvElem); an fp8 cache holds e4m3(x / scale) (k_scale for k,
// v_scale for v), other caches ignore the scales.
cudaError_t LaunchWriteKvCache(const float* k, const float* v, int32_t stride, const int64_t* slots,
                               int32_t n, int32_t kv_width, KvElem kv, void* k_cache, void* v_cache,
                               float k_scale, float v_scale, cudaStream_t stream);

// out [n, hidden] = silu(gate) * up of gate_up [n, 2 * hidden]; out_bf16 as for LaunchRmsNorm.
cudaError_t LaunchSiluAndMul(const float* gate_up, int32_t n, int32_t hidden, float* out,
                             void* out_bf16, cudaStream_t stream);

// out[0] = max |x[t, c]| over [n, cols] (row stride `stride`), NaNs skipped; one block.
cudaError_t LaunchAbsMax(const float* x, int32_t n, int32_t cols, int32_t stride, float* out,
                         cudaStream_t stream);

cudaError_t LaunchGatherRows(const float* x, const int32_t* rows, int32_t m, int32_t dim,
                             float* out, cudaStream_t stream);

cudaError_t LaunchAddBias(float* y, const float* bias, int32_t m, int32_t n, cudaStream_t stream);

// dst[i] = bf16(src[i]) (round to nearest even).  dst is __nv_bfloat16 [count].
cudaError_t LaunchFloatToBf16(const float* src, size_t count, void* dst, cudaStream_t stream);

// ---- small_m_linear.cu: y [m, n] = x [m, k] w [n, k]^T for decode-sized m, w bf16, x and y fp32
// (x not rounded), a weight stream with 16-byte loads; each output's order depends on k only.
constexpr int32_t kSmallMLinearRows = 8;
// Whether LaunchSmallMLinear takes these: 1 <= m <= kSmallMLinearRows, k % 8 == 0, x and w
// 16-byte aligned.
bool SmallMLinearApplies(const float* x, const void* w, int32_t m, int32_t k);
cudaError_t LaunchSmallMLinear(const float* x, const void* w, int32_t m, int32_t n, int32_t k,
                               float* y, cudaStream_t stream);
// out [m, hidden] = LaunchSiluAndMul of LaunchSmallMLinear(x, w13 [2 * hidden, k]), bitwise, in
// one kernel (the [m, 2 * hidden] product is never stored). The same requirements.
cudaError_t LaunchSmallMLinearSiluAndMul(const float* x, const void* w13, int32_t m, int32_t hidden,
                                         int32_t k, float* out, cudaStream_t stream);

// ---- mid_m_linear.cu: y [m, n] fp32 = x [m, k] bf16 * w [n, k]^T bf16 for m up to 64, on tensor
// cores (mma.sync, fp32 accumulation), a weight stream with 16-byte loads; each output's order
// depends on k only. The backend runs it for kSmallMLinearRows < m <= kMidMLinearRows.
constexpr int32_t kMidMLinearRows = 64;
// Whether LaunchMidMLinear takes these: 1 <= m <= kMidMLinearRows, k % 8 == 0, x and w 16-byte
// aligned.
bool MidMLinearApplies(const void* x, const void* w, int32_t m, int32_t k);
cudaError_t LaunchMidMLinear(const void* x, const void* w, int32_t m, int32_t n, int32_t k,
                             float* y, cudaStream_t stream);
// out [m, hidden] = silu(gate) * up of LaunchMidMLinear(x, w13 [2 * hidden, k]) (gate columns
// first), SiluAndMulKernel's arithmetic on the same sums (bitwise), and out_bf16 [m, hidden] (if
// not null) its bf16 copy; one kernel. The same requirements; out_bf16 must not overlap x.
cudaError_t LaunchMidMLinearSiluAndMul(const void* x, const void* w13, int32_t m, int32_t hidden,
                                       int32_t k, float* out, void* out_bf16, cudaStream_t stream);

// The batch-invariant GEMM (invariant_gemm.cu): y [m, n] fp32 = x [m, k] fp32 * w [n, k]^T, w fp32
// or bf16 (`bf16`, widened exactly; x is not rounded). Every y element is one fmaf chain over k in
// increasing order from 0.0f, as the CPU backend's GEMM: bitwise equal to it on equal inputs, and
// the same for a row whatever m.
cudaError_t LaunchInvariantGemm(const float* x, const void* w, bool bf16, int32_t m, int32_t n,
                                int32_t k, float* y, cudaStream_t stream);

// Paged attention (see Backend::PagedAttention). Each (token, head) row's context is cut into
// splits of a fixed length (256 positions for the vectorized kernel, which takes head dims of whole
// 16-byte vectors; 512 for the generic one), attended separately and folded in order, so that a
// row's result depends on nothing but its own query, length and keys (not on the batch, the block
// table's width or `num_splits`). `num_splits` picks the launch shape only: 1, one block per row;
// or at least the widest table's split count, one block per split, whose results go through
// `scratch` (PagedAttentionScratchFloats floats); the last block of a row to finish folds them
// (`counters`, PagedAttentionCounters int32 zeros, count the finished ones and are left zero again,
// so a recorded graph replays on them: one kernel, no separate merge).
struct PagedAttentionArgs {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride q_stride
  int32_t q_stride = 0;
  const void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v_cache = nullptr;
  KvElem kv = KvElem::kF32;               // what the caches hold
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* block_tables = nullptr;  // [num_seqs, *table_stride or max_blocks_per_seq]
  const int32_t* table_stride = nullptr;  // device scalar, or null (AttentionMetadata)
  int32_t num_tokens = 0, num_seqs = 0, max_blocks_per_seq = 0, block_size = 0;
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float* out = nullptr;      // [num_tokens, num_heads * head_dim]
  void* out_bf16 = nullptr;  // optional __nv_bfloat16 copy of out (nearest even), for the next GEMM
  // Allows the tensor-core prefill kernel (flash_prefill.cu) for the rows of sequences with at
  // least kFlashMinQueryTokens query tokens, where FlashPrefillApplies (bf16 or fp8 cache, head_dim
  // 64 or 128). Its bits are not the CUDA-core kernels' (bf16 queries and probabilities, the MMA's
  // order): off for --batch-invariant.
  bool tensor_core_prefill = false;
  // An fp8 cache's per-tensor scales (Backend's KvScales): scores use k * k_scale, outputs
  // v * v_scale. 1.0 for other caches.
  float k_scale = 1.0f, v_scale = 1.0f;
  // Set by LaunchPagedAttention only: the CUDA-core kernels leave those rows to it.
  bool prefill_rows_elsewhere = false;
  // Host-known, as AttentionMetadata::min_query_len (0: not known). When it is at least
  // kFlashMinQueryTokens and the tensor-core kernel applies, every row is that kernel's and the
  // CUDA-core kernel is not launched.
  int32_t min_query_len = 0;
};

// The largest head_dim the attention kernel handles.
constexpr int32_t kMaxAttentionHeadDim = 256;

// The launch shape for LaunchPagedAttention: 1 (one block per row) when the rows alone fill
// `num_sms` multiprocessors twice, else one block per split of a `max_context`-long table. Depends
// only on host-known shapes; the results are the same bits either way.
int32_t ChooseAttentionSplits(int32_t num_tokens, int32_t num_heads, int32_t num_kv_heads,
                              int32_t head_dim, KvElem kv, int32_t max_context, int32_t num_sms);
size_t PagedAttentionScratchFloats(int32_t num_tokens, int32_t num_heads, int32_t head_dim,
                                   int32_t num_splits);
size_t PagedAttentionCounters(int32_t num_tokens, int32_t num_heads);
cudaError_t LaunchPagedAttention(const PagedAttentionArgs& args, int32_t num_splits, float* scratch,
                                 int32_t* counters, cudaStream_t stream);

// The tensor-core prefill attention (flash_prefill.cu): the rows of every sequence with at least
// kFlashMinQueryTokens query tokens, when FlashPrefillApplies (args.tensor_core_prefill, a bf16 or
// fp8 cache, head_dim 64 or 128, 16-byte aligned caches, more tokens than sequences). Launched by
// LaunchPagedAttention; the other rows are the CUDA-core kernels'.
constexpr int32_t kFlashMinQueryTokens = 2;
bool FlashPrefillApplies(const PagedAttentionArgs& args);
cudaError_t LaunchFlashPrefill(const PagedAttentionArgs& args, cudaStream_t stream);

// ---- sampling (sampling.cu; the CPU twin is CpuSampler, kernels/cpu/cpu_sampler.h)
// --------------- One sampled row's parameters (SamplingSpec + the step's output index), its lists
// given as ranges of SampleArgs::ids (and, for logit_bias, of SampleArgs::bias at the same
// offsets).
struct DeviceSampleRow {
  uint64_t seed = 0;
  uint64_t output_index = 0;  // the Philox counter
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  int32_t top_k = 0;
  int32_t num_logprobs = -1;  // < 0: none
  int32_t mask_stops = 0;     // 1: this step masks the stop ids (output_index < min_tokens)
  int32_t penalty_slot = -1;  // the row of the penalty tables; -1: no penalties
  int32_t allowed_offset = 0, num_allowed = 0;
  int32_t stop_offset = 0, num_stops = 0;
  int32_t bias_offset = 0, num_bias = 0;
};

// A row's result: the token, and when asked its raw logprob, rank and the number of top entries.
struct SampleResult {
  int32_t token;
  float logprob;
  int32_t rank;
  int32_t num_top;
};
struct TopLogprob {
  int32_t token_id;
  float logprob;
};
// What crosses to the host per row (bench/RESULTS.md counts on these sizes).
static_assert(sizeof(SampleResult) == 16 && sizeof(TopLogprob) == 8);
static_assert(sizeof(DeviceSampleRow) == 80);

struct SampleArgs {
  const float* logits = nullptr;  // [n, vocab]
  int32_t vocab = 0;
  const DeviceSampleRow* rows = nullptr;  // [n]
  const int32_t* ids = nullptr;           // the rows' allowed / stop / bias id lists
  const float* bias = nullptr;            // logit_bias values, at the bias ids' offsets
  // Structured-output masks (SampleRow::token_bitmask): row i's mask is bitmask + bitmask_row[i] *
  // bitmask_words; bitmask_row null (no row masked) or [n] with -1 = none.
  const uint32_t* bitmask = nullptr;  // [num_masked_rows, bitmask_words]
  const int32_t* bitmask_row = nullptr;
  int32_t bitmask_words = 0;
  const int32_t* in_prompt = nullptr;      // [slots, vocab] 0/1: the id occurs in the prompt
  const int32_t* output_counts = nullptr;  // [slots, vocab] occurrences among the outputs
  float* scratch = nullptr;         // [n, vocab] processed rows (rows with lists or penalties)
  SampleResult* results = nullptr;  // [n]
  TopLogprob* top = nullptr;        // [n, top_stride]
  int32_t top_stride = 0;
};
// One block per row: out row i = CpuSampler::Sample of row i. Batch-invariant: a row's result
// depends only on that row's inputs.
cudaError_t LaunchSample(const SampleArgs& args, int32_t n, cudaStream_t stream);

struct ScoreArgs {
  const float* logits = nullptr;  // [n, vocab]
  int32_t vocab = 0;
  const int32_t* targets = nullptr;  // [n]
  const int32_t* num_top = nullptr;  // [n]
  SampleResult* results = nullptr;   // [n]
  TopLogprob* top = nullptr;         // [n, top_stride]
  int32_t top_stride = 0;
};
// Row i's CpuSampler::FillLogprobs(targets[i], num_top[i]).
cudaError_t LaunchScore(const ScoreArgs& args, int32_t n, cudaStream_t stream);

// Penalty tables in_prompt, output_counts [slots, vocab] int32: row `slot` set to the history of
// token_ids [num_tokens] (the first num_prompt the prompt), as PenaltyState::Reset.
cudaError_t LaunchPenaltySet(int32_t* in_prompt, int32_t* output_counts, int32_t vocab,
                             int32_t slot, const int32_t* token_ids, int32_t num_tokens,
                             int32_t num_prompt, cudaStream_t stream);
// output_counts[slots[i], tokens[i]] += 1 for i < n (PenaltyState::AddOutput).
cudaError_t LaunchPenaltyAdd(int32_t* output_counts, int32_t vocab, const int32_t* slots,
                             const int32_t* tokens, int32_t n, cudaStream_t stream);

// ---- ggml-quantized weights (quant_gemm.cu; the CPU twin is kernels/cpu/quant_gemm.h) ---------
// `type` is a ggml type id of kernels/ggml_quant.h's QuantType (Q4_0 ... Q6_K).
//
// Rows of activations quantized for the dot products, as QuantizeActivations lays one row out,
// m rows stacked: Q8_0 blocks (legacy types; nb = k / 32, sums per 32) or Q8_K (K-quants; nb =
// k / 256, sums per 16).
struct Q8Activations {
  int8_t* qs = nullptr;     // [m, k]
  float* d = nullptr;       // [m, nb]
  float* s = nullptr;       // [m, nb] (Q8_0 only: q8_1's f16 d * sum(q))
  int16_t* sums = nullptr;  // [m, k / 32] (Q8_0) or [m, k / 16] (Q8_K)
};
// out = x [m, k] quantized as Q8_K (`k_quant`) or Q8_0. REQUIRES: k % 256 (Q8_K) or 32 == 0.
cudaError_t LaunchQuantizeActivations(bool k_quant, const float* x, int32_t m, int32_t k,
                                      Q8Activations out, cudaStream_t stream);
// y[i * ldy + j] = DotRowReference(type, row j of w, row i of x) for i < m, j < n: w [n rows of k
// weights] as ggml blocks, x quantized for `type` (Q8_K for the K-quants). The CPU backend's bits,
// the same for a row whatever m.
cudaError_t LaunchQuantDot(int type, const void* w, const Q8Activations& x, int32_t m, int32_t n,
                           int32_t k, float* y, int32_t ldy, cudaStream_t stream);
// out[r, :] = DequantizeRow of row rows[r] of w (rows == nullptr: row r) for r < num_rows, as
// fp32 or (`bf16`) rounded to bf16.  out [num_rows, cols].
cudaError_t LaunchDequantizeRows(int type, const void* w, const int32_t* rows, int32_t num_rows,
                                 int32_t cols, bool bf16, void* out, cudaStream_t stream);

}  // namespace tinyserve::cuda
