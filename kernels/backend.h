// Backend: the op set every device implements (DESIGN §7), over raw device pointers.
//
// A Backend owns a device (the CPU, or one CUDA device) and runs the ops of the Llama forward pass
// on memory it allocated. All pointers passed to ops are this backend's device pointers; shapes
// and dtypes are given next to each parameter. Ops may run asynchronously on the backend's stream;
// Synchronize() waits and reports any device error. Not thread-safe: one engine thread drives it.
//
// KV cache layout (DESIGN §3), per layer: K and V each [num_blocks, block_size, num_kv_heads,
// head_dim] fp32; slot = block_id * block_size + offset; slot -1 is a padding row (skipped).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "base/token_logprobs.h"
#include "kernels/ggml_quant.h"
#include "kernels/sampling.h"

namespace tinyserve {

// How RoPE pairs the dimensions of a head: llama2.c / Meta interleaved pairs (2i, 2i+1), or the
// Hugging Face / GPT-NeoX half split (i, i + head_dim/2).
enum class RopeStyle { kInterleaved, kNeox };

// The element type a backend stores weight matrices (fp32, bf16) or the KV cache (those and fp8
// e4m3, kernels/fp8.h) in.
enum class DType { kFloat32, kBFloat16, kFp8E4m3 };

// vLLM's names (--dtype, --kv-cache-dtype, cache_config_info's cache_dtype).
inline const char* DTypeName(DType t) {
  return t == DType::kFloat32 ? "float32" : t == DType::kBFloat16 ? "bfloat16" : "fp8_e4m3";
}
inline size_t DTypeBytes(DType t) {
  return t == DType::kFloat32 ? 4 : t == DType::kBFloat16 ? 2 : 1;
}

// How a backend lays out a weight matrix [rows, cols] in its memory: row-major as given, the
// CPU backend's panel16 packing for its GEMM (kernels/cpu/packed_gemm.h), or ggml quantized
// blocks read in place (the CPU backend: data is a kernels/cpu/quant_gemm.h QuantMatrix).
enum class WeightLayout { kRowMajor, kPanel16, kGgmlBlocks };

// One part of a quantized weight matrix as a model file stores it: `rows` rows of `cols` weights
// as ggml blocks of `type` (kernels/ggml_quant.h) at `blocks`, host memory.
struct QuantPart {
  QuantType type = QuantType::kQ8_0;
  const void* blocks = nullptr;
  int32_t rows = 0;
};

// A weight matrix in a backend's memory, stored in `dtype` and `layout` (what UploadWeight or
// UploadMatrix returned). rows and cols are 0 when the upload did not say (UploadWeight).
struct WeightRef {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
  WeightLayout layout = WeightLayout::kRowMajor;
  int32_t rows = 0;
  int32_t cols = 0;
};

// Attention metadata for one forward pass; every array is a device pointer.
struct AttentionMetadata {
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* block_tables = nullptr;  // [num_seqs, TableStride()]
  // The widest table the step may pass (what kernels size their launch for), and the row stride
  // of block_tables unless `table_stride` is set.
  int32_t max_blocks_per_seq = 0;
  int32_t block_size = 0;
  // Optional device scalar: the row stride of block_tables when it is narrower than
  // max_blocks_per_seq (a replayed CUDA graph keeps its launch for the widest table while each
  // step uploads only its own width). Null: max_blocks_per_seq.
  const int32_t* table_stride = nullptr;
  // Host-known: the fewest query tokens of any sequence in the step (1 when a row decodes), or 0
  // when the caller does not say. A backend may skip a kernel meant only for shorter sequences
  // (CUDA: the decode attention kernel in a step of prompt chunks only).
  int32_t min_query_len = 0;
};

// The largest step an executor can hand its backend (ModelRunner::Init: the scheduler's limits and
// the model's shapes), for Backend::ReserveScratch.
struct StepLimits {
  int32_t max_tokens = 0;   // rows of a step's activations (max_num_batched_tokens)
  int32_t max_seqs = 0;     // sequences in a step, each sampled at most once; penalty histories
  int32_t max_context = 0;  // the widest block table a step passes, in positions
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int32_t max_linear_k = 0;  // the widest input of any weight matrix (its cols)
  int32_t vocab = 0;
  int32_t max_top_logprobs = 0;  // top logprobs a sampled row may ask for (the API's cap)
};

// Per-tensor scales of an fp8 KV cache (vLLM's `k_scale` / `v_scale`, read from a checkpoint's
// `self_attn.k_scale` / `v_scale`): the cache holds e4m3(x / scale) and attention reads value *
// scale. 1.0 (the default, vLLM's without calibrated scales) leaves every bit as it was; caches of
// other dtypes ignore them, as vLLM's do.
struct KvScales {
  float k = 1.0f, v = 1.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // True iff device pointers are host pointers (the CPU): host data can be used in place.
  virtual bool is_host() const { return false; }
  // Makes the backend's device current on the calling thread (CUDA: cudaSetDevice), so a backend
  // made on one thread runs on another (the engine thread); the executor calls it at every step.
  virtual void BindToCallingThread() {}

  // ---- memory -----------------------------------------------------------------------------------
  // Returns zeroed device memory of `bytes` bytes, or nullptr if it cannot be had.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* ptr) = 0;
  // Host memory (64-byte aligned) the device copies from directly (CUDA: page-locked), for the
  // inputs uploaded every step; nullptr if it cannot be had. Free it with FreeHostStaging.
  virtual void* AllocateHostStaging(size_t bytes);
  virtual void FreeHostStaging(void* ptr);
  // Copies host memory to the device. From ordinary host memory the call returns once `host_src`
  // may be reused; from AllocateHostStaging memory it may return before the device has read it
  // (CUDA: one asynchronous DMA from pinned memory): keep that unchanged until Synchronize().
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  virtual Status Synchronize() = 0;
  // Sets *free_bytes and *total_bytes of device memory and returns true, or returns false when the
  // device has no such notion (the CPU).
  virtual bool MemoryInfo(size_t* /*free_bytes*/, size_t* /*total_bytes*/) const { return false; }
  // Allocates now every scratch buffer a step within `limits` needs (after the weights are
  // uploaded, before the KV cache is sized from MemoryInfo), so that such a step allocates nothing
  // and what is left for the KV cache is what is really left. Rarer needs beyond the limits
  // (prompt-logprob rows, more top logprobs, long token lists, more penalty histories than
  // sequences) still grow on demand. Returns ResourceExhausted when the memory cannot be had.
  virtual Status ReserveScratch(const StepLimits& /*limits*/) { return Status::Ok(); }

  // ---- weights ----------------------------------------------------------------------------------
  // The dtype UploadWeight stores matrices in: fp32 on the CPU; bf16 or fp32 on CUDA.
  virtual DType weight_dtype() const { return DType::kFloat32; }
  // The dtype of the KV cache's elements (WriteKvCache, PagedAttention): fp32 (the default) or bf16
  // on the CPU; bf16 (the default), fp32 or fp8 e4m3 on CUDA. KvCacheElementBytes: its size.
  virtual DType kv_cache_dtype() const { return DType::kFloat32; }
  size_t KvCacheElementBytes() const { return DTypeBytes(kv_cache_dtype()); }
  // Returns new device memory holding the `count` host fp32 values converted to weight_dtype()
  // (free it with Deallocate), or a null ref if the memory cannot be had.
  virtual WeightRef UploadWeight(const float* host, size_t count) {
    void* p = Allocate(count * sizeof(float));
    if (p != nullptr) CopyToDevice(p, host, count * sizeof(float));
    return {p, DType::kFloat32};
  }
  // Returns new device memory holding the host fp32 matrix [rows, cols] row-major in the dtype and
  // layout this backend's Linear and EmbeddingLookup read fastest (free it with Deallocate), or a
  // null ref if the memory cannot be had. The default stores it as UploadWeight does.
  virtual WeightRef UploadMatrix(const float* host, int32_t rows, int32_t cols) {
    WeightRef w = UploadWeight(host, static_cast<size_t>(rows) * static_cast<size_t>(cols));
    w.rows = rows;
    w.cols = cols;
    return w;
  }
  // Returns the matrix [sum of parts' rows, cols] whose rows are the parts' rows stacked in order,
  // in whatever form this backend's Linear and EmbeddingLookup read (free it with Deallocate), or
  // a null ref. The CPU backend keeps the blocks where they are (the caller keeps that memory
  // alive while the ref lives) and runs integer dot products on them; the default dequantizes
  // to fp32 and stores that as UploadMatrix does. REQUIRES: 1 <= num_parts <= 4; cols a multiple
  // of every part's block size.
  virtual WeightRef UploadQuantMatrix(const QuantPart* parts, int32_t num_parts, int32_t cols);
  // y = x * w^T with w in its stored dtype, fp32 accumulation.  x [m, k] fp32, w [n, k], y [m, n]
  // fp32. The default serves fp32 row-major weights through Gemm. REQUIRES: w.dtype ==
  // weight_dtype(); w.rows == n and w.cols == k when the upload gave them.
  virtual void Linear(const float* x, WeightRef w, int32_t m, int32_t n, int32_t k, float* y) {
    Gemm(x, static_cast<const float*>(w.data), m, n, k, y);
  }
  // Embedding over a stored table: out[t, :] = float(table[ids[t], :]).  table [vocab, dim].
  // REQUIRES: table.dtype == weight_dtype().
  virtual void EmbeddingLookup(WeightRef table, const int32_t* ids, int32_t n, int32_t dim,
                               float* out) {
    Embedding(static_cast<const float*>(table.data), ids, n, dim, out);
  }

  // ---- graphs -----------------------------------------------------------------------------------
  // Backends that can record a fixed sequence of ops and replay it (CUDA graphs) say so here. While
  // capturing, ops are recorded, not run; no copies, allocations or Synchronize are allowed. A
  // recorded graph keeps the pointers it was recorded with: they must stay valid while it lives.
  virtual bool SupportsGraphs() const { return false; }
  virtual Status BeginGraphCapture() { return Unavailable(name() + " cannot record graphs"); }
  // Ends the capture; returns the id of the recorded graph.
  virtual StatusOr<int32_t> EndGraphCapture() {
    return Unavailable(name() + " cannot record graphs");
  }
  // Runs recorded graph `id` on the backend's stream.
  virtual Status ReplayGraph(int32_t /*id*/) {
    return Unavailable(name() + " cannot record graphs");
  }
  // Destroys every recorded graph.
  virtual void ClearGraphs() {}

  // ---- sampling ---------------------------------------------------------------------------------
  // One token per row: row i of `logits` ([n, vocab] fp32 in this backend's memory) sampled by
  // rows[i] (kernels/sampling.h, the rules of kernels/cpu/cpu_sampler.h); out[i].token_id always,
  // and the token's raw logprob, rank and top-n when rows[i].spec->num_logprobs >= 0. Only out[]
  // comes back to the host. The default runs the CPU sampler: in place on a host backend, on a host
  // copy of the rows otherwise; the CUDA backend samples on the device (kernels/cuda/sampling.cu).
  virtual Status SampleRows(const float* logits, int32_t vocab, const SampleRow* rows, int32_t n,
                            TokenLogprobs* out);
  // Scores given tokens (prompt logprobs): out[i] = the raw logprob and rank of targets[i] under
  // row i of `logits` ([n, vocab] fp32, this backend's memory) and its top num_top[i].
  virtual Status ScoreRows(const float* logits, int32_t vocab, const int32_t* targets,
                           const int32_t* num_top, int32_t n, TokenLogprobs* out);

  // ---- penalty history --------------------------------------------------------------------------
  // A device backend keeps each penalised request's token history in its own memory, in a slot
  // the executor picks (small ints, reused after the request goes), so that sampling reads it
  // there and it never crosses per step: the executor sets a slot from the request's prompt and
  // outputs when it registers (again after a preemption's recompute), then adds each accepted
  // token. Returns true iff this backend does (it then reads SampleRow::penalty_slot, not
  // SampleRow::penalties); the defaults keep nothing.
  virtual bool KeepsPenaltyHistory() const { return false; }
  // Slot `slot` (>= 0) := the history of token_ids [num_tokens] host, whose first
  // `num_prompt_tokens` are the prompt, over a vocabulary of `vocab` ids (all in range). Errors are
  // reported by Synchronize().
  virtual void SetPenaltyHistory(int32_t /*slot*/, int32_t /*vocab*/, const int32_t* /*token_ids*/,
                                 int32_t /*num_tokens*/, int32_t /*num_prompt_tokens*/) {}
  // Adds output tokens[i] to the history in slot slots[i], for i < n (host arrays; slots set).
  virtual void AddPenaltyOutputs(const int32_t* /*slots*/, const int32_t* /*tokens*/,
                                 int32_t /*n*/) {}

  // ---- ops --------------------------------------------------------------------------------------
  // out[t, :] = table[ids[t], :].  table [vocab, dim], ids [n], out [n, dim].
  virtual void Embedding(const float* table, const int32_t* ids, int32_t n, int32_t dim,
                         float* out) = 0;

  // out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight.  x, out [n, dim]; weight [dim].
  virtual void RmsNorm(const float* x, const float* weight, int32_t n, int32_t dim, float eps,
                       float* out) = 0;

  // Fused residual add + RMSNorm: residual += delta; out = RmsNorm(residual) * weight.
  // residual, delta, out [n, dim] (residual in/out); weight [dim].
  virtual void AddRmsNorm(float* residual, const float* delta, const float* weight, int32_t n,
                          int32_t dim, float eps, float* out) = 0;

  // y = x * w^T.  x [m, k], w [n, k] row-major (out-features first), y [m, n]. On the CPU (and on
  // CUDA with --batch-invariant) each y[i, j] is one fma chain over k in increasing order
  // (kernels/cpu/packed_gemm.h), so a row's result does not depend on m.
  virtual void Gemm(const float* x, const float* w, int32_t m, int32_t n, int32_t k, float* y) = 0;

  // y[i, j] += bias[j].  y [m, n] contiguous; bias [n].
  virtual void AddBias(float* y, const float* bias, int32_t m, int32_t n) = 0;

  // Rotates q and k in place at each token's position: pair i of a head turns by the angle
  // float(pos) * inv_freq[i] (fp32), the pairs as `style` says. q [n, num_heads, head_dim] with row
  // stride `q_stride` floats; k [n, num_kv_heads, head_dim] with row stride `k_stride`;
  // inv_freq [head_dim / 2] fp32 (ModelConfig::RopeInvFreq: theta and any rope scaling).
  virtual void Rope(float* q, int32_t q_stride, float* k, int32_t k_stride,
                    const int32_t* positions, int32_t n, int32_t num_heads, int32_t num_kv_heads,
                    int32_t head_dim, const float* inv_freq, RopeStyle style) = 0;

  // out[0] (a device float) = the largest |x[t, c]| over rows t < n and columns c < cols of x (row
  // stride `stride`); 0 when there are none. NaNs are skipped (fmax). Exact in any order: for the
  // fp8 cache's scales computed from data (ModelRunnerOptions::calculate_kv_scales).
  virtual void AbsMax(const float* x, int32_t n, int32_t cols, int32_t stride, float* out) = 0;

  // Writes each token's K and V row into the cache at its slot; slot -1 is skipped.
  // k, v [n, kv_width] with row stride `stride`; slots [n] int64; caches as in the file comment.
  // The caches hold kv_cache_dtype() values (bf16: rounded to nearest even; fp8: FloatToE4m3 of
  // the value divided by its scale).
  virtual void WriteKvCache(const float* k, const float* v, int32_t stride, const int64_t* slots,
                            int32_t n, int32_t kv_width, void* k_cache, void* v_cache,
                            KvScales scales = {}) = 0;

  // Rope on q and k, then WriteKvCache of the rotated k and of v (rows of `stride` floats, kv width
  // num_kv_heads * head_dim): what a layer does before attention, which a backend may fuse (CUDA:
  // one kernel instead of two, the same bits).
  virtual void RopeAndWriteKvCache(float* q, float* k, const float* v, int32_t stride,
                                   const int32_t* positions, const int64_t* slots, int32_t n,
                                   int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                   const float* inv_freq, RopeStyle style, void* k_cache,
                                   void* v_cache, KvScales scales = {}) {
    Rope(q, stride, k, stride, positions, n, num_heads, num_kv_heads, head_dim, inv_freq, style);
    WriteKvCache(k, v, stride, slots, n, num_kv_heads * head_dim, k_cache, v_cache, scales);
  }

  // RopeAndWriteKvCache on q, k and v (rows of `stride` floats, positions meta.positions,
  // meta.num_tokens rows), then PagedAttention of the rotated q (row stride `stride`) into out:
  // a layer's steps from its qkv projection to its attention output, which a backend may fuse
  // (the CPU in decode steps; the same bits).
  virtual void RopeWriteKvAndAttend(float* q, float* k, const float* v, int32_t stride,
                                    const int64_t* slots, const AttentionMetadata& meta,
                                    int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                    const float* inv_freq, RopeStyle style, void* k_cache,
                                    void* v_cache, float* out, KvScales scales = {}) {
    RopeAndWriteKvCache(q, k, v, stride, meta.positions, slots, meta.num_tokens, num_heads,
                        num_kv_heads, head_dim, inv_freq, style, k_cache, v_cache, scales);
    PagedAttention(q, stride, k_cache, v_cache, meta, num_heads, num_kv_heads, head_dim, out,
                   scales);
  }

  // Causal paged attention: query token t of sequence s attends to positions [0, positions[t]] of
  // s through s's block table (prefill chunks over a cached prefix and decode alike). GQA: query
  // head h reads kv head h / (num_heads / num_kv_heads). Scale 1/sqrt(head_dim).
  // q [num_tokens, num_heads, head_dim] with row stride `q_stride`; out [num_tokens, num_heads *
  // head_dim] contiguous. An fp8 cache's values are multiplied by `scales` (see KvScales).
  virtual void PagedAttention(const float* q, int32_t q_stride, const void* k_cache,
                              const void* v_cache, const AttentionMetadata& meta, int32_t num_heads,
                              int32_t num_kv_heads, int32_t head_dim, float* out,
                              KvScales scales = {}) = 0;

  // out[t, i] = silu(gate_up[t, i]) * gate_up[t, hidden + i].  gate_up [n, 2*hidden], out [n,
  // hidden].
  virtual void SiluAndMul(const float* gate_up, int32_t n, int32_t hidden, float* out) = 0;
  // The feed-forward's gate and up projections and SiLU-and-mul: gate_up = Linear(x, w13) [n,
  // 2*hidden], then out = SiluAndMul(gate_up) [n, hidden]; x [n, k]. A backend may fuse the two
  // (CUDA at decode sizes: one kernel, the same bits) and then leave gate_up unwritten.
  virtual void LinearSiluAndMul(const float* x, WeightRef w13, int32_t n, int32_t hidden, int32_t k,
                                float* gate_up, float* out) {
    Linear(x, w13, n, 2 * hidden, k, gate_up);
    SiluAndMul(gate_up, n, hidden, out);
  }

  // out[i, :] = x[rows[i], :].  x [*, dim], rows [m], out [m, dim].
  virtual void GatherRows(const float* x, const int32_t* rows, int32_t m, int32_t dim,
                          float* out) = 0;
};

// Owns one device allocation of a Backend. Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* backend, size_t bytes)
      : backend_(backend), ptr_(backend->Allocate(bytes)), bytes_(bytes) {}
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : backend_(o.backend_), ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      backend_ = o.backend_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  bool ok() const { return ptr_ != nullptr || bytes_ == 0; }

  void Reset() {
    if (ptr_ != nullptr) backend_->Deallocate(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The CPU backend: fp32, the packed batch-invariant GEMM (kernels/cpu/packed_gemm.h), its own
// thread pool. `num_threads` <= 0 means all hardware threads. `kv_cache_dtype` kFloat32 or
// kBFloat16 (half the bytes a token; attention widens the elements and computes in fp32, the same
// order as over an fp32 cache); kFp8E4m3 is CUDA's only (SelectBackend refuses it for the CPU;
// given it here, the process stops with a message).
std::unique_ptr<Backend> CreateCpuBackend(int num_threads, DType kv_cache_dtype = DType::kFloat32);

}  // namespace tinyserve
