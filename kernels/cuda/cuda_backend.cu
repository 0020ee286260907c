// The CUDA backend: one device, one non-blocking stream, one cuBLAS handle. Ops are launched
// asynchronously on the stream; the first CUDA or cuBLAS error is kept and reported by
// Synchronize() (and by the graph calls). GEMMs: cuBLAS, bf16 weights x bf16-rounded activations
// with fp32 accumulation and fp32 outputs, or fp32 throughout (no TF32) for parity with the CPU;
// or, with CudaBackendOptions::batch_invariant, the batch-invariant kernel (invariant_gemm.cu) on
// fp32 activations, whose results do not depend on the number of rows.
// Quantized (ggml block) weights are uploaded as the file stores them and read by quant_gemm.cu:
// activations quantized to int8 and integer dot products for every m with --batch-invariant and
// for decode-sized m (<= kQuantDotRows) otherwise, giving the CPU backend's bits; larger m without
// --batch-invariant dequantize slices of the weights to bf16 for cuBLAS.
// Scratch buffers (attention splits, bf16 activations, sampling) are reserved at start-up for the
// largest step (ReserveScratch) and only grow beyond it on rarer needs; outgrown ones are kept
// until the backend goes, so recorded CUDA graphs never point at freed memory.
//
// cuBLAS is loaded with dlopen when the first CUDA backend is created, not linked into the binary:
// libcublas + libcublasLt are ~700 MB whose loading and relocation would cost every run, CPU-only
// ones included, seconds at start-up and 200+ MB of memory.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda/ops.h"
#include "kernels/device.h"
#include "kernels/ggml_quant.h"

namespace tinyserve {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// The cuBLAS entry points the backend uses (the _v2 names the cublas_v2.h macros stand for).
struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  // (cublas_api.h overloads cublasGemmEx in C++; this is the exported C function.)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// Loads libcublas.so.<major of the headers> once: from the library search path (the binary's
// RUNPATH holds the CUDA library folder), else from the toolkit's folder found at build time.
StatusOr<const CublasApi*> LoadCublas() {
  static CublasApi api;
  static const std::string error = [] {
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      lib = dlopen((std::string(TINYSERVE_CUDA_LIBRARY_DIR) + "/" + name).c_str(),
                   RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == nullptr) return "cannot load " + name + ": " + dlerror();
    bool ok = true;
    auto load = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      ok = ok && fn != nullptr;
    };
    load(api.create, "cublasCreate_v2");
    load(api.destroy, "cublasDestroy_v2");
    load(api.set_stream, "cublasSetStream_v2");
    load(api.set_workspace, "cublasSetWorkspace_v2");
    load(api.set_math_mode, "cublasSetMathMode");
    load(api.sgemm, "cublasSgemm_v2");
    load(api.gemm_ex, "cublasGemmEx");
    load(api.status_string, "cublasGetStatusString");
    return ok ? std::string() : name + " lacks an expected cuBLAS function";
  }();
  if (!error.empty()) return Unavailable(error);
  return &api;
}

std::string CudaError(const char* what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorString(err) + " (error " +
         std::to_string(static_cast<int>(err)) + ")";
}

// The errors that leave the CUDA context unusable (every later call fails with them): a kernel's
// illegal address, instruction or alignment, an assert, a stack overflow, a launch failure or
// timeout, an uncorrectable ECC error. Everything else (an allocation that failed, a launch the
// kernels refused as cudaErrorInvalidValue, a bad configuration) fails the call and no more.
bool IsStickyCudaError(cudaError_t err) {
  switch (static_cast<int>(err)) {
    case 214:  // cudaErrorECCUncorrectable
    case 700:  // cudaErrorIllegalAddress
    case 702:  // cudaErrorLaunchTimeout
    case 709:  // cudaErrorContextIsDestroyed
    case 710:  // cudaErrorAssert
    case 714:  // cudaErrorHardwareStackError
    case 715:  // cudaErrorIllegalInstruction
    case 716:  // cudaErrorMisalignedAddress
    case 717:  // cudaErrorInvalidAddressSpace
    case 718:  // cudaErrorInvalidPc
    case 719:  // cudaErrorLaunchFailure
      return true;
    default:
      return false;
  }
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const CudaBackendOptions& options, const CublasApi* blas)
      : device_(options.device),
        dtype_(options.weight_dtype),
        kv_dtype_(options.kv_cache_dtype),
        batch_invariant_(options.batch_invariant),
        decode_gemms_(options.decode_gemm_kernels),
        blas_(*blas) {}

  ~CudaBackend() override {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    ClearGraphs();
    for (void* p : retired_) cudaFree(p);
    for (void* p : {d_upload_, d_sample_scratch_, d_results_, d_top_, d_penalty_tokens_,
                    static_cast<void*>(d_in_prompt_), static_cast<void*>(d_output_counts_)}) {
      if (p != nullptr) cudaFree(p);
    }
    if (h_upload_ != nullptr) cudaFreeHost(h_upload_);
    if (attn_scratch_ != nullptr) cudaFree(attn_scratch_);
    if (attn_counters_ != nullptr) cudaFree(attn_counters_);
    if (bf16_scratch_ != nullptr) cudaFree(bf16_scratch_);
    for (void* p : {q8_0_scratch_, q8k_scratch_, dequant_scratch_}) {
      if (p != nullptr) cudaFree(p);
    }
    if (cublas_ != nullptr) blas_.destroy(cublas_);
    if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    cudaError_t err = cudaSetDevice(device_);
    if (err != cudaSuccess) return Unavailable(CudaError("cudaSetDevice", err));
    err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (err != cudaSuccess) return Unavailable(CudaError("cudaStreamCreate", err));
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, device_);
    if (err != cudaSuccess) return Unavailable(CudaError("cudaGetDeviceProperties", err));
    num_sms_ = prop.multiProcessorCount;
    device_name_ = prop.name;
    if (blas_.create(&cublas_) != CUBLAS_STATUS_SUCCESS) return Unavailable("cublasCreate failed");
    // A fixed workspace: cuBLAS must not allocate while a CUDA graph is being recorded.
    err = cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes);
    if (err != cudaSuccess) return ResourceExhausted(CudaError("cudaMalloc", err));
    if (blas_.set_stream(cublas_, stream_) != CUBLAS_STATUS_SUCCESS ||
        blas_.set_workspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes) !=
            CUBLAS_STATUS_SUCCESS ||
        blas_.set_math_mode(cublas_, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
      return Unavailable("cuBLAS setup failed");
    }
    return Status::Ok();
  }

  std::string name() const override {
    return "cuda (" + device_name_ + ", " + DTypeName(dtype_) + " weights, " +
           DTypeName(kv_dtype_) + " KV cache, " +
           (batch_invariant_ ? "batch-invariant GEMM" : "cuBLAS") + ")";
  }

  void BindToCallingThread() override { Check(cudaSetDevice(device_), "cudaSetDevice"); }

  // ---- memory -----------------------------------------------------------------------------------
  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is an answer, not a sticky error
      return nullptr;
    }
    Check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
    return p;
  }
  void Deallocate(void* ptr) override {
    if (ptr == nullptr) return;
    quant_.erase(ptr);
    cudaStreamSynchronize(stream_);  // no queued op may still use it
    cudaFree(ptr);
  }
  void* AllocateHostStaging(size_t bytes) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();  // an answer, not a sticky error
      return nullptr;
    }
    return p;
  }
  void FreeHostStaging(void* ptr) override {
    if (ptr == nullptr) return;
    cudaStreamSynchronize(stream_);  // no queued copy may still read it
    cudaFreeHost(ptr);
  }
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    // From pageable memory the call returns once `host_src` has been staged: the caller may reuse
    // it; from pinned memory (AllocateHostStaging) it is one DMA the stream runs later.
    if (bytes > 0)
      Check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "H2D copy");
  }
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "D2H copy");
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  // Reports the first error since the last call. A recoverable one (an allocation, a launch the
  // kernels refused, a cuBLAS status) fails this step only: it is reported once and forgotten, and
  // the backend serves on. A sticky device error is kDeviceLost and stays (the engine dies).
  Status Synchronize() override {
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return TakeError();
  }
  bool MemoryInfo(size_t* free_bytes, size_t* total_bytes) const override {
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
  }

  // Every scratch buffer at the size the largest step within `l` asks of it (the same
  // computations as the ops below), so that no such step allocates: the attention splits, the bf16
  // activations of the cuBLAS path, the quantized activations and dequantized slices (for the
  // matrices uploaded so far: call after the weights), the sampling rows, results and top-20
  // entries, the processed logits, the structured-output masks, and penalty histories for
  // max_seqs requests (vLLM's profile run samples max_num_seqs rows with penalties likewise).
  Status ReserveScratch(const StepLimits& l) override {
    if (l.max_tokens <= 0 || l.max_seqs <= 0 || l.max_context <= 0 || l.vocab <= 0 ||
        l.max_linear_k <= 0) {
      return InvalidArgument("ReserveScratch: limits must be positive");
    }
    const size_t tokens = static_cast<size_t>(l.max_tokens);
    const size_t seqs = static_cast<size_t>(l.max_seqs);
    const size_t vocab = static_cast<size_t>(l.vocab);
    auto reserve = [&](void** buf, size_t* cap, size_t bytes) {
      return bytes == 0 || Scratch(buf, cap, bytes) != nullptr;
    };
    bool ok = true;
    size_t attn_floats = 0;  // ChooseAttentionSplits is 1 from some row count on: try each
    for (int32_t t = 1; t <= l.max_tokens; ++t) {
      const int32_t splits = cuda::ChooseAttentionSplits(t, l.num_heads, l.num_kv_heads, l.head_dim,
                                                         kv_elem(), l.max_context, num_sms_);
      attn_floats = std::max(attn_floats,
                             cuda::PagedAttentionScratchFloats(t, l.num_heads, l.head_dim, splits));
    }
    ok = ok && reserve(&attn_scratch_, &attn_scratch_bytes_, attn_floats * sizeof(float)) &&
         (attn_floats == 0 ||
          SplitCounters(cuda::PagedAttentionCounters(l.max_tokens, l.num_heads)) != nullptr);
    // Linear: bf16 x for cuBLAS (bf16 or quantized weights, rows beyond the small-m kernels).
    const bool any_quant = !quant_.empty();
    // The gated mid-m kernel writes the down GEMM's bf16 rows beside its own bf16 input.
    if (!batch_invariant_ && (dtype_ == DType::kBFloat16 || any_quant)) {
      const size_t rows = std::max(tokens, 2 * std::min<size_t>(tokens, cuda::kMidMLinearRows));
      ok = ok && reserve(&bf16_scratch_, &bf16_scratch_bytes_,
                         rows * l.max_linear_k * sizeof(__nv_bfloat16) + 16);
    }
    // The quantized matrices: each buffer at the largest any of them asks (one allocation each).
    const int32_t dot_rows =
        batch_invariant_ ? l.max_tokens : std::min(l.max_tokens, kQuantDotRows);
    size_t q8k_bytes = 0, q8_0_bytes = 0, dequant_bytes = 0;
    for (const auto& [data, q] : quant_) {
      for (int32_t p = 0; p < q.num_parts; ++p) {
        const bool kq = IsKQuant(q.parts[p].type);
        size_t& bytes = kq ? q8k_bytes : q8_0_bytes;
        bytes = std::max(bytes, QuantizedRows(kq, dot_rows, q.cols).bytes());
      }
      if (!batch_invariant_ && l.max_tokens > kQuantDotRows) {
        dequant_bytes = std::max(dequant_bytes,
                                 DequantSliceRows(q.cols, q.rows) * q.cols * sizeof(__nv_bfloat16));
      }
    }
    ok = ok && reserve(&q8k_scratch_, &q8k_scratch_bytes_, q8k_bytes) &&
         reserve(&q8_0_scratch_, &q8_0_scratch_bytes_, q8_0_bytes) &&
         reserve(&dequant_scratch_, &dequant_scratch_bytes_, dequant_bytes);
    const size_t top = static_cast<size_t>(std::min(l.max_top_logprobs, l.vocab));
    const size_t words = (vocab + 31) / 32;
    // SampleRows' one upload (UploadArgs): its rows, a few listed ids a row with their biases
    // (logit_bias, stop ids masked by min_tokens, allowed ids; longer lists grow the buffers) and
    // every row's token mask; ScoreRows' targets and counts are fewer bytes.
    const size_t upload = Align16(sizeof(cuda::DeviceSampleRow) * seqs) +
                          2 * Align16(4 * kReservedIdsPerRow * seqs) +
                          Align16(4 * (seqs * words + seqs));
    ok = ok && reserve(&d_upload_, &d_upload_bytes_, upload) && HostUpload(upload) &&
         reserve(&d_results_, &d_results_bytes_, sizeof(cuda::SampleResult) * seqs) &&
         reserve(&d_top_, &d_top_bytes_, sizeof(cuda::TopLogprob) * seqs * top) &&
         reserve(&d_sample_scratch_, &d_sample_scratch_bytes_, sizeof(float) * seqs * vocab) &&
         // AddPenaltyOutputs' slots and tokens
         reserve(&d_penalty_tokens_, &d_penalty_tokens_bytes_, 8 * seqs);
    if (ok && penalty_vocab_ != l.vocab) {
      FreePenaltyTables();
      penalty_vocab_ = l.vocab;
    }
    ok = ok && (penalty_slots_ >= l.max_seqs || GrowPenaltyTables(l.max_seqs));
    if (!ok) return TakeError();
    return Synchronize();
  }

  // ---- weights ----------------------------------------------------------------------------------
  DType weight_dtype() const override { return dtype_; }
  DType kv_cache_dtype() const override { return kv_dtype_; }
  cuda::KvElem kv_elem() const {
    return kv_dtype_ == DType::kBFloat16  ? cuda::KvElem::kBf16
           : kv_dtype_ == DType::kFp8E4m3 ? cuda::KvElem::kFp8
                                          : cuda::KvElem::kF32;
  }
  // The scales the kernels apply: an fp8 cache's; 1.0 for other caches (which ignore them).
  KvScales ScalesFor(KvScales s) const { return kv_dtype_ == DType::kFp8E4m3 ? s : KvScales{}; }

  WeightRef UploadWeight(const float* host, size_t count) override {
    if (dtype_ == DType::kFloat32) return Backend::UploadWeight(host, count);
    void* dst = Allocate(count * sizeof(__nv_bfloat16));
    if (dst == nullptr) return {};
    // Through an fp32 staging buffer of at most 16 Mi values, converted on the device.
    const size_t chunk = std::min<size_t>(count, size_t{16} << 20);
    float* staging = static_cast<float*>(Allocate(chunk * sizeof(float)));
    if (staging == nullptr) {
      Deallocate(dst);
      return {};
    }
    for (size_t off = 0; off < count; off += chunk) {
      const size_t c = std::min(chunk, count - off);
      CopyToDevice(staging, host + off, c * sizeof(float));
      Check(cuda::LaunchFloatToBf16(staging, c, static_cast<__nv_bfloat16*>(dst) + off, stream_),
            "FloatToBf16");
    }
    Deallocate(staging);
    return {dst, DType::kBFloat16};
  }

  // The blocks of every part, copied unchanged into one device buffer (parts in order).
  WeightRef UploadQuantMatrix(const QuantPart* parts, int32_t num_parts, int32_t cols) override {
    if (num_parts < 1 || num_parts > QuantDesc::kMaxParts) return {};
    QuantDesc desc;
    desc.cols = cols;
    desc.num_parts = num_parts;
    size_t bytes = 0;
    for (int32_t p = 0; p < num_parts; ++p) {
      if (cols % QuantBlockElements(parts[p].type) != 0) return {};
      bytes += QuantRowBytes(parts[p].type, cols) * static_cast<size_t>(parts[p].rows);
    }
    auto* dst = static_cast<uint8_t*>(Allocate(std::max<size_t>(bytes, 1)));
    if (dst == nullptr) return {};
    size_t off = 0;
    for (int32_t p = 0; p < num_parts; ++p) {
      const size_t part_bytes =
          QuantRowBytes(parts[p].type, cols) * static_cast<size_t>(parts[p].rows);
      CopyToDevice(dst + off, parts[p].blocks, part_bytes);
      desc.parts[p] = {parts[p].type, dst + off, parts[p].rows};
      desc.rows += parts[p].rows;
      off += part_bytes;
    }
    quant_[dst] = desc;
    return {dst, dtype_, WeightLayout::kGgmlBlocks, desc.rows, cols};
  }

  void Gemm(const float* x, const float* w, int32_t m, int32_t n, int32_t k, float* y) override {
    if (m <= 0 || n <= 0) return;
    if (batch_invariant_) {
      Check(cuda::LaunchInvariantGemm(x, w, /*bf16=*/false, m, n, k, y, stream_), "InvariantGemm");
      return;
    }
    // Row-major y [m, n] = x [m, k] * w [n, k]^T is column-major y^T [n, m] = w^T-op(w) * x.
    const float alpha = 1.0f, beta = 0.0f;
    CheckBlas(
        blas_.sgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, k, x, k, &beta, y, n),
        "cublasSgemm");
  }

  void Linear(const float* x, WeightRef w, int32_t m, int32_t n, int32_t k, float* y) override {
    if (w.layout == WeightLayout::kGgmlBlocks) {
      QuantLinear(x, w, m, y);
      return;
    }
    if (w.dtype == DType::kFloat32) {
      Gemm(x, static_cast<const float*>(w.data), m, n, k, y);
      return;
    }
    if (m <= 0 || n <= 0) return;
    if (batch_invariant_) {
      // bf16 weights widened exactly, x kept in fp32 (not rounded to bf16 as for cuBLAS below).
      Check(cuda::LaunchInvariantGemm(x, w.data, /*bf16=*/true, m, n, k, y, stream_),
            "InvariantGemm");
      return;
    }
    if (decode_gemms_ && cuda::SmallMLinearApplies(x, w.data, m, k)) {  // small_m_linear.cu
      Check(cuda::LaunchSmallMLinear(x, w.data, m, n, k, y, stream_), "SmallMLinear");
      return;
    }
    const __nv_bfloat16* xb = Bf16Rows(x, m, k);
    if (xb == nullptr) return;
    if (decode_gemms_ && cuda::MidMLinearApplies(xb, w.data, m, k)) {  // mid_m_linear.cu
      Check(cuda::LaunchMidMLinear(xb, w.data, m, n, k, y, stream_), "MidMLinear");
      return;
    }
    const float alpha = 1.0f, beta = 0.0f;
    CheckBlas(blas_.gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w.data, CUDA_R_16BF,
                            k, xb, CUDA_R_16BF, k, &beta, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
  }

  // Decode-sized rows on bf16 weights: the gated small-m kernel, or from 9 to 64 rows the gated
  // mid-m kernel, which also writes the down GEMM's bf16 rows (one kernel, SiluAndMul's bits);
  // otherwise the Linear, then SiLU-and-mul (which writes the next GEMM's bf16 rows).
  void LinearSiluAndMul(const float* x, WeightRef w13, int32_t n, int32_t hidden, int32_t k,
                        float* gate_up, float* out) override {
    if (w13.layout == WeightLayout::kRowMajor && w13.dtype == DType::kBFloat16 &&
        !batch_invariant_ && decode_gemms_) {
      if (cuda::SmallMLinearApplies(x, w13.data, n, k)) {
        Check(cuda::LaunchSmallMLinearSiluAndMul(x, w13.data, n, hidden, k, out, stream_),
              "SmallMLinearSiluAndMul");
        return;
      }
      if (n <= cuda::kMidMLinearRows && hidden > 0) {
        const __nv_bfloat16* xb = Bf16Rows(x, n, k);
        if (xb == nullptr) return;
        if (cuda::MidMLinearApplies(xb, w13.data, n, k)) {
          void* ob = Bf16MirrorBeside(xb, static_cast<size_t>(n) * k, n, hidden);
          Check(cuda::LaunchMidMLinearSiluAndMul(xb, w13.data, n, hidden, k, out, ob, stream_),
                "MidMLinearSiluAndMul");
          MirrorWritten(ob, out, n, hidden);
          return;
        }
      }
    }
    Backend::LinearSiluAndMul(x, w13, n, hidden, k, gate_up, out);
  }

  // ---- ops --------------------------------------------------------------------------------------
  void Embedding(const float* table, const int32_t* ids, int32_t n, int32_t dim,
                 float* out) override {
    Check(cuda::LaunchEmbedding(table, false, ids, n, dim, out, stream_), "Embedding");
  }
  void EmbeddingLookup(WeightRef table, const int32_t* ids, int32_t n, int32_t dim,
                       float* out) override {
    if (table.layout == WeightLayout::kGgmlBlocks) {
      const QuantDesc* q = FindQuant(table);
      if (q == nullptr) return;
      // The ids are on the device, so a row's part is not known here: one part only (a GGUF
      // token embedding is one tensor).
      if (q->num_parts != 1) {
        SetError(InvalidArgument("a quantized embedding table of more than one part"));
        return;
      }
      Check(cuda::LaunchDequantizeRows(static_cast<int>(q->parts[0].type), q->parts[0].blocks, ids,
                                       n, dim, /*bf16=*/false, out, stream_),
            "Dequantize");
      return;
    }
    Check(cuda::LaunchEmbedding(table.data, table.dtype == DType::kBFloat16, ids, n, dim, out,
                                stream_),
          "Embedding");
  }
  void RmsNorm(const float* x, const float* weight, int32_t n, int32_t dim, float eps,
               float* out) override {
    void* ob = Bf16MirrorFor(n, dim);
    Check(cuda::LaunchRmsNorm(x, nullptr, nullptr, weight, n, dim, eps, out, ob, stream_),
          "RmsNorm");
    MirrorWritten(ob, out, n, dim);
  }
  void AddRmsNorm(float* residual, const float* delta, const float* weight, int32_t n, int32_t dim,
                  float eps, float* out) override {
    void* ob = Bf16MirrorFor(n, dim);
    Check(cuda::LaunchRmsNorm(nullptr, residual, delta, weight, n, dim, eps, out, ob, stream_),
          "AddRmsNorm");
    MirrorWritten(ob, out, n, dim);
  }
  void Rope(float* q, int32_t q_stride, float* k, int32_t k_stride, const int32_t* positions,
            int32_t n, int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
            const float* inv_freq, RopeStyle style) override {
    Check(cuda::LaunchRope(q, q_stride, k, k_stride, positions, n, num_heads, num_kv_heads,
                           head_dim, inv_freq, style == RopeStyle::kNeox, stream_),
          "Rope");
  }
  void WriteKvCache(const float* k, const float* v, int32_t stride, const int64_t* slots, int32_t n,
                    int32_t kv_width, void* k_cache, void* v_cache, KvScales scales) override {
    scales = ScalesFor(scales);
    Check(cuda::LaunchWriteKvCache(k, v, stride, slots, n, kv_width, kv_elem(), k_cache, v_cache,
                                   scales.k, scales.v, stream_),
          "WriteKvCache");
  }
  void RopeAndWriteKvCache(float* q, float* k, const float* v, int32_t stride,
                           const int32_t* positions, const int64_t* slots, int32_t n,
                           int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                           const float* inv_freq, RopeStyle style, void* k_cache, void* v_cache,
                           KvScales scales) override {
    scales = ScalesFor(scales);
    Check(cuda::LaunchRopeWriteKvCache(q, k, v, stride, positions, slots, n, num_heads,
                                       num_kv_heads, head_dim, inv_freq, style == RopeStyle::kNeox,
                                       kv_elem(), k_cache, v_cache, scales.k, scales.v, stream_),
          "RopeWriteKvCache");
  }
  void PagedAttention(const float* q, int32_t q_stride, const void* k_cache, const void* v_cache,
                      const AttentionMetadata& meta, int32_t num_heads, int32_t num_kv_heads,
                      int32_t head_dim, float* out, KvScales scales) override {
    cuda::PagedAttentionArgs a;
    scales = ScalesFor(scales);
    a.k_scale = scales.k;
    a.v_scale = scales.v;
    a.q = q;
    a.q_stride = q_stride;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.kv = kv_elem();
    a.positions = meta.positions;
    a.query_start = meta.query_start;
    a.block_tables = meta.block_tables;
    a.num_tokens = meta.num_tokens;
    a.num_seqs = meta.num_seqs;
    a.max_blocks_per_seq = meta.max_blocks_per_seq;
    a.table_stride = meta.table_stride;
    a.block_size = meta.block_size;
    a.num_heads = num_heads;
    a.num_kv_heads = num_kv_heads;
    a.head_dim = head_dim;
    a.out = out;
    a.tensor_core_prefill = !batch_invariant_;  // prefill chunks on tensor cores (bf16/fp8 cache)
    a.min_query_len = meta.min_query_len;
    const int32_t splits =
        cuda::ChooseAttentionSplits(meta.num_tokens, num_heads, num_kv_heads, head_dim, kv_elem(),
                                    meta.max_blocks_per_seq * meta.block_size, num_sms_);
    const size_t floats =
        cuda::PagedAttentionScratchFloats(meta.num_tokens, num_heads, head_dim, splits);
    float* scratch = nullptr;
    int32_t* counters = nullptr;
    if (floats > 0) {
      scratch = static_cast<float*>(Scratch(&attn_scratch_, &attn_scratch_bytes_, floats * 4));
      counters = SplitCounters(cuda::PagedAttentionCounters(meta.num_tokens, num_heads));
      if (scratch == nullptr || counters == nullptr) return;
    }
    a.out_bf16 = Bf16MirrorFor(meta.num_tokens, num_heads * head_dim);
    Check(cuda::LaunchPagedAttention(a, splits, scratch, counters, stream_), "PagedAttention");
    MirrorWritten(a.out_bf16, out, meta.num_tokens, num_heads * head_dim);
  }
  void SiluAndMul(const float* gate_up, int32_t n, int32_t hidden, float* out) override {
    void* ob = Bf16MirrorFor(n, hidden);
    Check(cuda::LaunchSiluAndMul(gate_up, n, hidden, out, ob, stream_), "SiluAndMul");
    MirrorWritten(ob, out, n, hidden);
  }
  void GatherRows(const float* x, const int32_t* rows, int32_t m, int32_t dim,
                  float* out) override {
    Check(cuda::LaunchGatherRows(x, rows, m, dim, out, stream_), "GatherRows");
  }
  void AbsMax(const float* x, int32_t n, int32_t cols, int32_t stride, float* out) override {
    Check(cuda::LaunchAbsMax(x, n, cols, stride, out, stream_), "AbsMax");
  }
  void AddBias(float* y, const float* bias, int32_t m, int32_t n) override {
    Check(cuda::LaunchAddBias(y, bias, m, n, stream_), "AddBias");
  }

  // ---- sampling (kernels/cuda/sampling.cu)
  // -------------------------------------------------------- Only the rows' parameters and lists go
  // up, only SampleResults (16 bytes a row) and the asked top-n come back: the logits stay on the
  // device.
  Status SampleRows(const float* logits, int32_t vocab, const SampleRow* rows, int32_t n,
                    TokenLogprobs* out) override {
    if (n == 0) return Status::Ok();
    h_rows_.assign(n, cuda::DeviceSampleRow{});
    h_ids_.clear();
    h_bias_.clear();
    h_bitmask_.clear();
    h_bitmask_row_.clear();
    const int32_t words = (vocab + 31) / 32;
    bool processed = false;
    int32_t top_stride = 0;
    for (int32_t i = 0; i < n; ++i) {
      const SamplingSpec& sp = *rows[i].spec;
      cuda::DeviceSampleRow& d = h_rows_[i];
      d.seed = sp.seed;
      d.output_index = rows[i].output_index;
      d.temperature = sp.temperature;
      d.top_p = sp.top_p;
      d.min_p = sp.min_p;
      d.presence_penalty = sp.presence_penalty;
      d.frequency_penalty = sp.frequency_penalty;
      d.repetition_penalty = sp.repetition_penalty;
      d.top_k = sp.top_k;
      d.num_logprobs = sp.num_logprobs;
      if (sp.has_penalties()) {
        const int32_t slot = rows[i].penalty_slot;
        if (slot < 0 || slot >= penalty_slots_ || !penalty_set_[slot] || vocab != penalty_vocab_) {
          return InvalidArgument("SampleRows: row " + std::to_string(i) +
                                 " has penalties but no penalty history was set for its slot");
        }
        d.penalty_slot = slot;
      }
      auto append = [&](const std::vector<int32_t>& ids, int32_t* offset, int32_t* count) {
        *offset = static_cast<int32_t>(h_ids_.size());
        *count = static_cast<int32_t>(ids.size());
        h_ids_.insert(h_ids_.end(), ids.begin(), ids.end());
      };
      auto in_vocab = [&](int32_t id) { return id >= 0 && id < vocab; };
      bool ok =
          std::all_of(sp.allowed_token_ids.begin(), sp.allowed_token_ids.end(), in_vocab) &&
          std::all_of(sp.min_tokens_masked_ids.begin(), sp.min_tokens_masked_ids.end(), in_vocab);
      for (const auto& [id, bias] : sp.logit_bias) ok = ok && in_vocab(id);
      if (!ok) {
        return InvalidArgument("SampleRows: row " + std::to_string(i) +
                               " names a token id outside the vocabulary");
      }
      append(sp.allowed_token_ids, &d.allowed_offset, &d.num_allowed);
      if (rows[i].output_index < static_cast<uint64_t>(std::max(sp.min_tokens, 0))) {
        append(sp.min_tokens_masked_ids, &d.stop_offset, &d.num_stops);
        d.mask_stops = d.num_stops > 0;
      }
      d.bias_offset = static_cast<int32_t>(h_ids_.size());
      d.num_bias = static_cast<int32_t>(sp.logit_bias.size());
      h_bias_.resize(h_ids_.size(), 0.0f);
      for (const auto& [id, bias] : sp.logit_bias) {
        h_ids_.push_back(id);
        h_bias_.push_back(bias);
      }
      if (rows[i].token_bitmask != nullptr) {
        // Structured outputs: every masked row's words go up in one copy below.
        if (h_bitmask_row_.empty()) h_bitmask_row_.assign(n, -1);
        h_bitmask_row_[i] = static_cast<int32_t>(h_bitmask_.size() / words);
        h_bitmask_.insert(h_bitmask_.end(), rows[i].token_bitmask, rows[i].token_bitmask + words);
      }
      processed = processed || d.num_allowed > 0 || d.mask_stops || d.num_bias > 0 ||
                  d.penalty_slot >= 0 || rows[i].token_bitmask != nullptr;
      if (sp.num_logprobs >= 0) top_stride = std::max(top_stride, std::min(sp.num_logprobs, vocab));
    }
    h_bias_.resize(h_ids_.size(), 0.0f);
    // The masked rows' words, then the per-row index.
    for (int32_t r : h_bitmask_row_) h_bitmask_.push_back(static_cast<uint32_t>(r));
    void* dev[4];
    if (!UploadArgs({{h_rows_.data(), sizeof(cuda::DeviceSampleRow) * n},
                     {h_ids_.data(), 4 * h_ids_.size()},
                     {h_bias_.data(), 4 * h_bias_.size()},
                     {h_bitmask_.data(), 4 * h_bitmask_.size()}},
                    dev)) {
      return TakeError();
    }
    cuda::SampleArgs a;
    a.logits = logits;
    a.vocab = vocab;
    a.rows = static_cast<const cuda::DeviceSampleRow*>(dev[0]);
    if (!h_ids_.empty()) {
      a.ids = static_cast<const int32_t*>(dev[1]);
      a.bias = static_cast<const float*>(dev[2]);
    }
    if (!h_bitmask_.empty()) {
      const auto* d_mask = static_cast<const uint32_t*>(dev[3]);
      a.bitmask = d_mask;
      a.bitmask_row = reinterpret_cast<const int32_t*>(d_mask + h_bitmask_.size() - n);
      a.bitmask_words = words;
    }
    a.in_prompt = d_in_prompt_;
    a.output_counts = d_output_counts_;
    if (processed) {
      a.scratch = static_cast<float*>(Scratch(&d_sample_scratch_, &d_sample_scratch_bytes_,
                                              sizeof(float) * static_cast<size_t>(n) * vocab));
      if (a.scratch == nullptr) return TakeError();
    }
    a.top_stride = top_stride;
    if (!Results(n, top_stride, &a.results, &a.top)) return TakeError();
    Check(cuda::LaunchSample(a, n, stream_), "Sample");
    return FetchResults(n, top_stride, out, [&](int32_t i) { return rows[i].spec->num_logprobs; });
  }

  Status ScoreRows(const float* logits, int32_t vocab, const int32_t* targets,
                   const int32_t* num_top, int32_t n, TokenLogprobs* out) override {
    if (n == 0) return Status::Ok();
    int32_t top_stride = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (targets[i] < 0 || targets[i] >= vocab) {
        return InvalidArgument("ScoreRows: target " + std::to_string(targets[i]) +
                               " outside the vocabulary");
      }
      top_stride = std::max(top_stride, std::min(num_top[i], vocab));
    }
    cuda::ScoreArgs a;
    a.logits = logits;
    a.vocab = vocab;
    a.top_stride = top_stride;
    void* dev[2];
    if (!UploadArgs({{targets, 4 * size_t(n)}, {num_top, 4 * size_t(n)}}, dev) ||
        !Results(n, top_stride, &a.results, &a.top)) {
      return TakeError();
    }
    a.targets = static_cast<const int32_t*>(dev[0]);
    a.num_top = static_cast<const int32_t*>(dev[1]);
    Check(cuda::LaunchScore(a, n, stream_), "Score");
    return FetchResults(n, top_stride, out, [](int32_t) { return 0; });
  }

  // ---- penalty history: in_prompt and output_counts [slots, vocab] int32 on the device ----------
  bool KeepsPenaltyHistory() const override { return true; }
  void SetPenaltyHistory(int32_t slot, int32_t vocab, const int32_t* token_ids, int32_t num_tokens,
                         int32_t num_prompt_tokens) override {
    if (slot < 0 || vocab <= 0) {
      SetError(InvalidArgument("SetPenaltyHistory: bad slot or vocabulary"));
      return;
    }
    for (int32_t i = 0; i < num_tokens; ++i) {
      if (token_ids[i] < 0 || token_ids[i] >= vocab) {
        SetError(InvalidArgument("SetPenaltyHistory: token id " + std::to_string(token_ids[i]) +
                                 " outside the vocabulary"));
        return;
      }
    }
    if (vocab != penalty_vocab_) {  // a new vocabulary: the old histories mean nothing
      FreePenaltyTables();
      penalty_vocab_ = vocab;
    }
    if (slot >= penalty_slots_ && !GrowPenaltyTables(slot + 1)) return;
    int32_t* d_tokens = nullptr;
    if (num_tokens > 0) {
      d_tokens = static_cast<int32_t*>(
          Scratch(&d_penalty_tokens_, &d_penalty_tokens_bytes_, 4 * size_t(num_tokens)));
      if (d_tokens == nullptr) return;
      CopyToDevice(d_tokens, token_ids, 4 * size_t(num_tokens));
    }
    Check(cuda::LaunchPenaltySet(d_in_prompt_, d_output_counts_, vocab, slot, d_tokens, num_tokens,
                                 num_prompt_tokens, stream_),
          "PenaltySet");
    penalty_set_[slot] = true;
  }
  void AddPenaltyOutputs(const int32_t* slots, const int32_t* tokens, int32_t n) override {
    if (n <= 0) return;
    for (int32_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= penalty_vocab_) {
        SetError(InvalidArgument("AddPenaltyOutputs: token id outside the vocabulary"));
        return;
      }
      if (slots[i] < 0 || slots[i] >= penalty_slots_ || !penalty_set_[slots[i]]) {
        SetError(InvalidArgument("AddPenaltyOutputs: slot " + std::to_string(slots[i]) +
                                 " has no history"));
        return;
      }
    }
    int32_t* d =
        static_cast<int32_t*>(Scratch(&d_penalty_tokens_, &d_penalty_tokens_bytes_, 8 * size_t(n)));
    if (d == nullptr) return;
    // One copy from pageable memory (staged before the call returns: the vector may be reused).
    h_penalty_args_.assign(slots, slots + n);
    h_penalty_args_.insert(h_penalty_args_.end(), tokens, tokens + n);
    CopyToDevice(d, h_penalty_args_.data(), 8 * size_t(n));
    Check(cuda::LaunchPenaltyAdd(d_output_counts_, penalty_vocab_, d, d + n, n, stream_),
          "PenaltyAdd");
  }

  // ---- graphs -----------------------------------------------------------------------------------
  bool SupportsGraphs() const override { return true; }
  Status BeginGraphCapture() override {
    if (!error_.ok()) return TakeError();
    const cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) return Internal(CudaError("cudaStreamBeginCapture", err));
    capturing_ = true;
    return Status::Ok();
  }
  // A failed capture is reported here and forgotten: nothing ran, so the stream and the memory
  // are as they were before BeginGraphCapture (which required no earlier error).
  StatusOr<int32_t> EndGraphCapture() override {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(stream_, &graph);
    if (err != cudaSuccess) {
      cudaGetLastError();
      if (graph != nullptr) cudaGraphDestroy(graph);
      static_cast<void>(TakeError());  // what failed to record, if anything: the capture says it
      return Internal(CudaError("cudaStreamEndCapture", err));
    }
    if (!error_.ok()) {  // an op failed to record
      cudaGraphDestroy(graph);
      return TakeError();
    }
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return Internal(CudaError("cudaGraphInstantiate", err));
    }
    graphs_.push_back(exec);
    return static_cast<int32_t>(graphs_.size() - 1);
  }
  Status ReplayGraph(int32_t id) override {
    if (id < 0 || id >= static_cast<int32_t>(graphs_.size()) || graphs_[id] == nullptr) {
      return InvalidArgument("no recorded graph " + std::to_string(id));
    }
    Check(cudaGraphLaunch(graphs_[id], stream_), "cudaGraphLaunch");
    return TakeError();
  }
  void ClearGraphs() override {
    for (cudaGraphExec_t g : graphs_) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    graphs_.clear();
  }

 private:
  // Keeps the first error. (The cast: nvcc warns about discarding Status& from operator=.)
  void SetError(Status s) {
    if (error_.ok()) static_cast<void>(error_ = std::move(s));
  }
  // The first error since the last one taken, once (a sticky one, kDeviceLost, every time).
  Status TakeError() {
    if (error_.ok() || error_.code() == StatusCode::kDeviceLost) return error_;
    Status failed = std::move(error_);
    static_cast<void>(error_ = Status::Ok());
    return failed;
  }
  void Check(cudaError_t err, const char* what) {
    ++ops_;  // every launch and copy comes through here or CheckBlas (see Bf16Rows)
    if (err == cudaSuccess) return;
    if (IsStickyCudaError(err)) {
      // Kept over any recoverable error already recorded: the device is gone.
      static_cast<void>(error_ = Status(StatusCode::kDeviceLost, CudaError(what, err)));
      return;
    }
    cudaGetLastError();  // a non-sticky error is cleared, so later launches report their own
    SetError(Internal(CudaError(what, err)));
  }
  void CheckBlas(cublasStatus_t st, const char* what) {
    ++ops_;
    if (st != CUBLAS_STATUS_SUCCESS) {
      SetError(Internal(std::string(what) + ": " + blas_.status_string(st)));
    }
  }

  // A scratch buffer of at least `bytes`, grown by doubling; the outgrown one is retired (kept
  // until the backend goes). Growing while a graph is being recorded is an error.
  // A quantized matrix: its parts' types, device blocks and rows (UploadQuantMatrix).
  struct QuantDesc {
    static constexpr int kMaxParts = 4;
    struct Part {
      QuantType type = QuantType::kQ8_0;
      const uint8_t* blocks = nullptr;
      int32_t rows = 0;
    };
    int32_t rows = 0, cols = 0, num_parts = 0;
    Part parts[kMaxParts];
  };
  // Up to this many rows, the quantized Linear runs integer dot products even without
  // --batch-invariant (decode); above it, dequantized bf16 slices and cuBLAS (prefill).
  static constexpr int32_t kQuantDotRows = 8;
  // The bf16 slice of a quantized matrix that one cuBLAS call reads, at most (values).
  static constexpr size_t kDequantSliceValues = size_t{16} << 20;
  // The ids a sampled row may list (logit_bias, masked stop ids, allowed ids) within the scratch
  // reserved at start-up.
  static constexpr size_t kReservedIdsPerRow = 16;

  const QuantDesc* FindQuant(const WeightRef& w) {
    const auto it = quant_.find(const_cast<void*>(w.data));
    if (it == quant_.end()) {
      SetError(InvalidArgument("ggml blocks this backend did not upload (UploadQuantMatrix)"));
      return nullptr;
    }
    return &it->second;
  }

  // The bytes of m rows of k activations quantized as Q8_K (`k_quant`) or Q8_0, and where each
  // array starts (QuantizeRows' layout).
  struct QuantizedRowsLayout {
    size_t qs = 0, d = 0, sums = 0;
    size_t bytes() const { return qs + 2 * d + sums; }
  };
  static QuantizedRowsLayout QuantizedRows(bool k_quant, int32_t m, int32_t k) {
    auto up = [](size_t b) { return (b + 255) / 256 * 256; };
    const size_t rows = static_cast<size_t>(m);
    const size_t nb = static_cast<size_t>(k) / (k_quant ? 256 : 32);
    const size_t nsums = static_cast<size_t>(k) / (k_quant ? 16 : 32);
    return {up(rows * k), up(rows * nb * 4), up(rows * nsums * 2)};
  }

  // x [m, k] quantized as Q8_K (`k_quant`) or Q8_0 into its scratch buffer; false on failure.
  bool QuantizeRows(bool k_quant, const float* x, int32_t m, int32_t k, cuda::Q8Activations* a) {
    const QuantizedRowsLayout layout = QuantizedRows(k_quant, m, k);
    const size_t qs = layout.qs, d = layout.d;
    void** buf = k_quant ? &q8k_scratch_ : &q8_0_scratch_;
    size_t* cap = k_quant ? &q8k_scratch_bytes_ : &q8_0_scratch_bytes_;
    auto* base = static_cast<uint8_t*>(Scratch(buf, cap, layout.bytes()));
    if (base == nullptr) return false;
    a->qs = reinterpret_cast<int8_t*>(base);
    a->d = reinterpret_cast<float*>(base + qs);
    a->s = reinterpret_cast<float*>(base + qs + d);
    a->sums = reinterpret_cast<int16_t*>(base + qs + 2 * d);
    Check(cuda::LaunchQuantizeActivations(k_quant, x, m, k, *a, stream_), "QuantizeActivations");
    return true;
  }

  // y [m, w.rows] = x [m, w.cols] * w^T on a quantized matrix, part by part.
  void QuantLinear(const float* x, const WeightRef& w, int32_t m, float* y) {
    const QuantDesc* q = FindQuant(w);
    if (q == nullptr || m <= 0) return;
    const int32_t k = q->cols, n = q->rows;
    if (!batch_invariant_ && m > kQuantDotRows) {
      QuantLinearDequantized(x, *q, m, y);
      return;
    }
    cuda::Q8Activations legacy, kquant;
    bool have_legacy = false, have_kquant = false;
    int32_t row0 = 0;
    for (int32_t p = 0; p < q->num_parts; ++p) {
      const QuantDesc::Part& part = q->parts[p];
      const bool kq = IsKQuant(part.type);
      bool& have = kq ? have_kquant : have_legacy;
      cuda::Q8Activations& a = kq ? kquant : legacy;
      if (!have) {
        if (!QuantizeRows(kq, x, m, k, &a)) return;
        have = true;
      }
      Check(cuda::LaunchQuantDot(static_cast<int>(part.type), part.blocks, a, m, part.rows, k,
                                 y + row0, n, stream_),
            "QuantDot");
      row0 += part.rows;
    }
  }

  // The prefill path without --batch-invariant: bf16 x against bf16 slices of the dequantized
  // weights (DequantizeRow rounded to bf16), fp32 accumulation in cuBLAS.
  void QuantLinearDequantized(const float* x, const QuantDesc& q, int32_t m, float* y) {
    const int32_t k = q.cols, n = q.rows;
    const __nv_bfloat16* xb = Bf16Rows(x, m, k);
    if (xb == nullptr) return;
    const int32_t slice_rows =
        static_cast<int32_t>(std::max<size_t>(1, kDequantSliceValues / static_cast<size_t>(k)));
    auto* wb =
        static_cast<__nv_bfloat16*>(Scratch(&dequant_scratch_, &dequant_scratch_bytes_,
                                            DequantSliceRows(k, n) * k * sizeof(__nv_bfloat16)));
    if (wb == nullptr) return;
    int32_t row0 = 0;
    for (int32_t p = 0; p < q.num_parts; ++p) {
      const QuantDesc::Part& part = q.parts[p];
      const size_t row_bytes = QuantRowBytes(part.type, k);
      for (int32_t r0 = 0; r0 < part.rows; r0 += slice_rows) {
        const int32_t nr = std::min(slice_rows, part.rows - r0);
        Check(cuda::LaunchDequantizeRows(static_cast<int>(part.type), part.blocks + row_bytes * r0,
                                         nullptr, nr, k, /*bf16=*/true, wb, stream_),
              "Dequantize");
        // y[:, row0 + r0 .. + nr) (column-major y^T, leading dimension n) = slice * x^T.
        const float alpha = 1.0f, beta = 0.0f;
        CheckBlas(blas_.gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, nr, m, k, &alpha, wb,
                                CUDA_R_16BF, k, xb, CUDA_R_16BF, k, &beta, y + row0 + r0,
                                CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                  "cublasGemmEx");
      }
      row0 += part.rows;
    }
  }

  // At least `count` attention split counters, zero (the kernel leaves them zero): grown by
  // doubling, each new buffer zeroed; an outgrown one is retired as the other scratch.
  int32_t* SplitCounters(size_t count) {
    const size_t bytes = count * sizeof(int32_t);
    if (bytes <= attn_counters_bytes_) return static_cast<int32_t*>(attn_counters_);
    void* p = Scratch(&attn_counters_, &attn_counters_bytes_, bytes);
    if (p != nullptr) Check(cudaMemsetAsync(p, 0, attn_counters_bytes_, stream_), "memset");
    return static_cast<int32_t*>(p);
  }

  // The rows of one dequantized slice of an n x k quantized matrix.
  static size_t DequantSliceRows(int32_t k, int32_t n) {
    return std::min(std::max<size_t>(1, kDequantSliceValues / static_cast<size_t>(k)),
                    static_cast<size_t>(n));
  }

  // The bf16 copy of the activations a cuBLAS GEMM reads (rows of x rounded to nearest even),
  // written by the op that made x when it was the last op (RMSNorm, SiLU-and-mul, attention: one
  // conversion kernel fewer per GEMM), else converted here into the bf16 scratch.
  //
  // The producers write it only where the next GEMM will read it: bf16 or quantized weights
  // without --batch-invariant, and more rows than the small-m kernels take (which read fp32; all
  // rows without decode_gemm_kernels).
  void* Bf16MirrorFor(int32_t rows, int32_t cols) {
    const size_t count = static_cast<size_t>(std::max(rows, 0)) * std::max(cols, 0);
    if (batch_invariant_ || (decode_gemms_ && rows <= cuda::kSmallMLinearRows) ||
        (dtype_ != DType::kBFloat16 && quant_.empty()) ||
        count * sizeof(__nv_bfloat16) > bf16_scratch_bytes_) {
      return nullptr;
    }
    return bf16_scratch_;
  }
  // Where in the bf16 scratch a fused kernel that reads `in` [in_count] from it may write the bf16
  // copy of its [rows, cols] output: past `in` (16-byte aligned) or before it, where it fits and
  // Bf16MirrorFor allows; else null (the next GEMM then converts).
  void* Bf16MirrorBeside(const void* in, size_t in_count, int32_t rows, int32_t cols) {
    if (Bf16MirrorFor(rows, cols) == nullptr || !InBf16Scratch(in)) return nullptr;
    const size_t bytes = static_cast<size_t>(rows) * cols * sizeof(__nv_bfloat16);
    char* base = static_cast<char*>(bf16_scratch_);
    const size_t begin = static_cast<size_t>(static_cast<const char*>(in) - base);
    const size_t end = Align16(begin + in_count * sizeof(__nv_bfloat16));
    if (end + bytes <= bf16_scratch_bytes_) return base + end;
    return bytes <= begin ? base : nullptr;
  }
  bool InBf16Scratch(const void* p) const {
    const char* base = static_cast<const char*>(bf16_scratch_);
    return base != nullptr && static_cast<const char*>(p) >= base &&
           static_cast<const char*>(p) < base + bf16_scratch_bytes_;
  }
  // Records that the last op wrote `mirror` (Bf16MirrorFor's answer) as the bf16 copy of `of`.
  void MirrorWritten(void* mirror, const float* of, int32_t rows, int32_t cols) {
    mirror_ = {};
    if (mirror == nullptr) return;
    mirror_.of = of;
    mirror_.data = mirror;
    mirror_.count = static_cast<size_t>(rows) * cols;
    mirror_.ops = ops_;
  }
  const __nv_bfloat16* Bf16Rows(const float* x, int32_t m, int32_t k) {
    const size_t count = static_cast<size_t>(m) * k;
    if (mirror_.of == x && mirror_.count == count && mirror_.ops == ops_ &&
        InBf16Scratch(mirror_.data)) {
      return static_cast<const __nv_bfloat16*>(mirror_.data);  // written by the op just before
    }
    auto* xb = static_cast<__nv_bfloat16*>(
        Scratch(&bf16_scratch_, &bf16_scratch_bytes_, count * sizeof(__nv_bfloat16)));
    if (xb == nullptr) return nullptr;
    Check(cuda::LaunchFloatToBf16(x, count, xb, stream_), "FloatToBf16");
    MirrorWritten(xb, x, m, k);  // a caller that falls back to another GEMM reads it again
    return xb;
  }

  void* Scratch(void** buf, size_t* cap, size_t bytes) {
    if (bytes <= *cap) return *buf;
    if (capturing_) {
      SetError(Internal("scratch buffer grown while recording a CUDA graph"));
      return nullptr;
    }
    const size_t want = std::max(bytes, *cap * 2);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, want);
    if (err != cudaSuccess) {
      cudaGetLastError();
      SetError(ResourceExhausted(CudaError("scratch cudaMalloc", err)));
      return nullptr;
    }
    if (*buf != nullptr) retired_.push_back(*buf);
    *buf = p;
    *cap = want;
    return p;
  }

  static size_t Align16(size_t bytes) { return (bytes + 15) & ~size_t{15}; }

  // The pinned host half of UploadArgs, at least `bytes` (false, with the error set, if it
  // cannot be had).
  bool HostUpload(size_t bytes) {
    if (bytes <= h_upload_bytes_) return true;
    const size_t want = std::max(bytes, h_upload_bytes_ * 2);
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, want, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      cudaGetLastError();
      SetError(ResourceExhausted(CudaError("sampler upload cudaHostAlloc", err)));
      return false;
    }
    if (h_upload_ != nullptr) {
      cudaStreamSynchronize(stream_);  // no queued copy may still read it
      cudaFreeHost(h_upload_);
    }
    h_upload_ = p;
    h_upload_bytes_ = want;
    return true;
  }

  // A sampling or scoring call's arguments in one host-to-device copy: each part (host address,
  // bytes) packed at a 16-byte offset into the pinned upload buffer, which goes up to the device's;
  // dev[i] is part i's device address (null for an empty part). False, with the error set, if
  // memory cannot be had. A copy from pinned memory runs later on the stream, so the buffer is not
  // rewritten before the last one has run (FetchResults synchronizes; an early return does not).
  struct UploadPart {
    const void* host;
    size_t bytes;
  };
  bool UploadArgs(std::initializer_list<UploadPart> parts, void** dev) {
    size_t total = 0;
    for (const UploadPart& p : parts) total += Align16(p.bytes);
    if (upload_pending_) {
      cudaStreamSynchronize(stream_);
      upload_pending_ = false;
    }
    if (!HostUpload(total)) return false;
    auto* base = static_cast<char*>(Scratch(&d_upload_, &d_upload_bytes_, total));
    if (base == nullptr) return false;
    size_t off = 0, i = 0;
    for (const UploadPart& p : parts) {
      if (p.bytes > 0) std::memcpy(static_cast<char*>(h_upload_) + off, p.host, p.bytes);
      dev[i++] = p.bytes > 0 ? base + off : nullptr;
      off += Align16(p.bytes);
    }
    CopyToDevice(base, h_upload_, total);
    upload_pending_ = true;
    return true;
  }

  // The device results of a sampling or scoring call for n rows with top_stride top entries.
  bool Results(int32_t n, int32_t top_stride, cuda::SampleResult** results,
               cuda::TopLogprob** top) {
    *results = static_cast<cuda::SampleResult*>(
        Scratch(&d_results_, &d_results_bytes_, sizeof(cuda::SampleResult) * n));
    *top = nullptr;
    if (top_stride > 0) {
      *top = static_cast<cuda::TopLogprob*>(
          Scratch(&d_top_, &d_top_bytes_, sizeof(cuda::TopLogprob) * size_t(n) * top_stride));
    }
    return *results != nullptr && (top_stride == 0 || *top != nullptr);
  }

  // Copies the n results (and their top entries) to the host and fills out[]; a row with
  // num_logprobs(i) < 0 gets only its token.
  template <typename NumLogprobs>
  Status FetchResults(int32_t n, int32_t top_stride, TokenLogprobs* out, NumLogprobs num_logprobs) {
    h_results_.resize(n);
    h_top_.resize(static_cast<size_t>(n) * top_stride);
    CopyToHost(h_results_.data(), d_results_, sizeof(cuda::SampleResult) * n);
    if (top_stride > 0) CopyToHost(h_top_.data(), d_top_, sizeof(cuda::TopLogprob) * h_top_.size());
    TS_RETURN_IF_ERROR(Synchronize());
    upload_pending_ = false;
    for (int32_t i = 0; i < n; ++i) {
      const cuda::SampleResult& r = h_results_[i];
      out[i].token_id = r.token;
      out[i].top.clear();
      if (num_logprobs(i) < 0) {
        out[i].logprob = 0.0f;
        out[i].rank = 0;
        continue;
      }
      out[i].logprob = r.logprob;
      out[i].rank = r.rank;
      for (int32_t j = 0; j < r.num_top; ++j) {
        const cuda::TopLogprob& t = h_top_[static_cast<size_t>(i) * top_stride + j];
        out[i].top.emplace_back(t.token_id, t.logprob);
      }
    }
    return Status::Ok();
  }

  // Grows the penalty tables to at least `slots` rows (doubling), keeping the rows set so far.
  bool GrowPenaltyTables(int32_t slots) {
    const int32_t want = std::max(slots, 2 * penalty_slots_);
    const size_t row = sizeof(int32_t) * static_cast<size_t>(penalty_vocab_);
    void* in_prompt = Allocate(row * want);
    void* counts = Allocate(row * want);
    if (in_prompt == nullptr || counts == nullptr) {
      Deallocate(in_prompt);
      Deallocate(counts);
      SetError(ResourceExhausted("out of device memory for " + std::to_string(want) +
                                 " penalty histories"));
      return false;
    }
    if (penalty_slots_ > 0) {
      Check(cudaMemcpyAsync(in_prompt, d_in_prompt_, row * penalty_slots_, cudaMemcpyDeviceToDevice,
                            stream_),
            "D2D copy");
      Check(cudaMemcpyAsync(counts, d_output_counts_, row * penalty_slots_,
                            cudaMemcpyDeviceToDevice, stream_),
            "D2D copy");
    }
    Deallocate(d_in_prompt_);
    Deallocate(d_output_counts_);
    d_in_prompt_ = static_cast<int32_t*>(in_prompt);
    d_output_counts_ = static_cast<int32_t*>(counts);
    penalty_slots_ = want;
    penalty_set_.resize(want, false);
    return true;
  }
  void FreePenaltyTables() {
    Deallocate(d_in_prompt_);
    Deallocate(d_output_counts_);
    d_in_prompt_ = d_output_counts_ = nullptr;
    penalty_slots_ = 0;
    penalty_set_.clear();
  }

  const int device_;
  const DType dtype_;
  const DType kv_dtype_;  // the KV cache's elements: fp32, bf16 or fp8 e4m3
  const bool batch_invariant_;
  const bool decode_gemms_;  // CudaBackendOptions::decode_gemm_kernels
  const CublasApi blas_;
  std::string device_name_;
  int num_sms_ = 1;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  void* attn_scratch_ = nullptr;
  size_t attn_scratch_bytes_ = 0;
  void* attn_counters_ = nullptr;  // int32 split counters, zero between launches
  size_t attn_counters_bytes_ = 0;
  void* bf16_scratch_ = nullptr;
  size_t bf16_scratch_bytes_ = 0;
  // Which fp32 activations bf16_scratch_ holds rounded, written by the op counted `ops`
  // (Bf16MirrorFor); ops_ counts the launches, copies and cuBLAS calls.
  struct Bf16Mirror {
    const float* of = nullptr;
    const void* data = nullptr;
    size_t count = 0;
    uint64_t ops = 0;
  };
  Bf16Mirror mirror_;
  uint64_t ops_ = 0;
  // Quantized weights: the matrices UploadQuantMatrix made (by device buffer), the activations
  // quantized for them (Q8_0, Q8_K) and the bf16 slices of the prefill path.
  std::unordered_map<void*, QuantDesc> quant_;
  void* q8_0_scratch_ = nullptr;
  size_t q8_0_scratch_bytes_ = 0;
  void* q8k_scratch_ = nullptr;
  size_t q8k_scratch_bytes_ = 0;
  void* dequant_scratch_ = nullptr;
  size_t dequant_scratch_bytes_ = 0;
  // Sampling: device buffers (grown by Scratch) and their host mirrors.
  void* d_upload_ = nullptr;  // UploadArgs: a sampling or scoring call's arguments
  size_t d_upload_bytes_ = 0;
  void* h_upload_ = nullptr;  // its pinned host half
  size_t h_upload_bytes_ = 0;
  bool upload_pending_ = false;          // a copy from h_upload_ may not have run yet
  std::vector<int32_t> h_penalty_args_;  // AddPenaltyOutputs' slots, then tokens
  void* d_sample_scratch_ = nullptr;
  size_t d_sample_scratch_bytes_ = 0;
  void* d_results_ = nullptr;
  size_t d_results_bytes_ = 0;
  void* d_top_ = nullptr;
  size_t d_top_bytes_ = 0;
  void* d_penalty_tokens_ = nullptr;
  size_t d_penalty_tokens_bytes_ = 0;
  std::vector<cuda::DeviceSampleRow> h_rows_;
  std::vector<uint32_t> h_bitmask_;     // the masked rows' words, then (uploaded) their rows
  std::vector<int32_t> h_bitmask_row_;  // [n] a row's mask, -1 = none (when any row has one)
  std::vector<int32_t> h_ids_;
  std::vector<float> h_bias_;
  std::vector<cuda::SampleResult> h_results_;
  std::vector<cuda::TopLogprob> h_top_;
  // Penalty histories: [penalty_slots_, penalty_vocab_] each; penalty_set_[slot] once set.
  int32_t* d_in_prompt_ = nullptr;
  int32_t* d_output_counts_ = nullptr;
  int32_t penalty_slots_ = 0;
  int32_t penalty_vocab_ = 0;
  std::vector<bool> penalty_set_;
  std::vector<void*> retired_;
  std::vector<cudaGraphExec_t> graphs_;
  bool capturing_ = false;
  Status error_;
};

}  // namespace

StatusOr<double> MeasureCublasBf16GemmFlops(int32_t n) {
  StatusOr<int> count = ProbeCudaDevices();
  if (!count.ok()) return count.status();
  StatusOr<const CublasApi*> loaded = LoadCublas();
  if (!loaded.ok()) return loaded.status();
  const CublasApi& blas = **loaded;
  const size_t e = static_cast<size_t>(n) * n;
  // Random bf16 inputs: one random tile of bf16 bit patterns (|x| < 1), repeated.
  std::vector<uint16_t> tile(1 << 20);
  uint32_t state = 12345;
  for (uint16_t& v : tile) {
    state = state * 1664525u + 1013904223u;
    const float x = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  std::vector<uint16_t> host(e);
  for (size_t off = 0; off < e; off += tile.size()) {
    std::memcpy(host.data() + off, tile.data(), std::min(tile.size(), e - off) * 2);
  }
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t h = nullptr;
  std::string error;
  auto check = [&](cudaError_t err, const char* what) {
    if (err != cudaSuccess && error.empty()) error = CudaError(what, err);
    return error.empty();
  };
  double best = 0.0;
  if (check(cudaMalloc(&a, e * 2), "cudaMalloc") && check(cudaMalloc(&b, e * 2), "cudaMalloc") &&
      check(cudaMalloc(&c, e * 4), "cudaMalloc") &&
      check(cudaMemcpy(a, host.data(), e * 2, cudaMemcpyHostToDevice), "cudaMemcpy") &&
      check(cudaMemcpy(b, host.data(), e * 2, cudaMemcpyHostToDevice), "cudaMemcpy")) {
    if (blas.create(&h) != CUBLAS_STATUS_SUCCESS) error = "cublasCreate failed";
    const float alpha = 1.0f, beta = 0.0f;
    auto gemm = [&] {
      const cublasStatus_t s = blas.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, a,
                                            CUDA_R_16BF, n, b, CUDA_R_16BF, n, &beta, c, CUDA_R_32F,
                                            n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS && error.empty()) {
        error = std::string("cublasGemmEx: ") + blas.status_string(s);
      }
    };
    if (error.empty()) gemm();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    for (int rep = 0; rep < 5 && error.empty(); ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 10; ++i) gemm();
      if (!check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) break;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, 10 * 2.0 * n * n * static_cast<double>(n) / s);
    }
  }
  if (h != nullptr) blas.destroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  if (!error.empty()) return Internal(error);
  return best;
}

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  StatusOr<int> count = ProbeCudaDevices();
  if (!count.ok()) return count.status();
  if (options.device < 0 || options.device >= *count) {
    return InvalidArgument("CUDA device " + std::to_string(options.device) + " does not exist (" +
                           std::to_string(*count) + " found)");
  }
  StatusOr<const CublasApi*> blas = LoadCublas();
  if (!blas.ok()) return blas.status();
  auto backend = std::make_unique<CudaBackend>(options, *blas);
  TS_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace tinyserve
