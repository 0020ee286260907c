// The reference cuBLAS of the host execution layer (cublas_v2.h) and the dlopen routing that hands
// it to the CUDA backend. C = alpha * op(A) op(B) + beta * C, all column-major as cuBLAS defines
// them (op(A) is m x k: A(i, l) = a[i + l * lda], transposed a[l + i * lda]); fp32 or bf16/fp16
// inputs, fp32 accumulation in k order; beta == 0 never reads C. Matrices must lie inside device
// allocations. Runs on the handle's stream (recorded when it captures).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/gpu_host/runtime_internal.h"

#undef dlopen
#undef dlsym
#undef dlerror

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace tinyserve::gpu_host {
namespace {

const char* const kHostCublasHandle = "host cuBLAS";
thread_local std::string t_dlerror;

float Load(const void* p, cudaDataType t, size_t i) {
  switch (t) {
    case CUDA_R_32F:
      return static_cast<const float*>(p)[i];
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(p)[i]);
  }
  return NAN;
}

void Store(void* p, cudaDataType t, size_t i, float v) {
  switch (t) {
    case CUDA_R_32F:
      static_cast<float*>(p)[i] = v;
      return;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      return;
    case CUDA_R_16F:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      return;
  }
}

size_t Bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }
bool Known(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

// Elements spanned by a column-major rows x cols matrix with leading dimension ld.
size_t Extent(int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return 0;
  return static_cast<size_t>(ld) * (cols - 1) + rows;
}

cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, float alpha, const void* a, cudaDataType at, int lda, const void* b,
                    cudaDataType bt, int ldb, float beta, void* c, cudaDataType ct, int ldc,
                    const char* name) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool a_n = ta == CUBLAS_OP_N, b_n = tb == CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, a_n ? m : k) || ldb < std::max(1, b_n ? k : n) ||
      ldc < std::max(1, m) || !Known(at) || !Known(bt) || !Known(ct)) {
    std::fprintf(stderr, "[gpu_host] %s: invalid value (m %d n %d k %d lda %d ldb %d ldc %d)\n",
                 name, m, n, k, lda, ldb, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const size_t a_elems = a_n ? Extent(m, k, lda) : Extent(k, m, lda);
  const size_t b_elems = b_n ? Extent(k, n, ldb) : Extent(n, k, ldb);
  if (CheckDeviceRange(a, a_elems * Bytes(at), "cuBLAS matrix A") != cudaSuccess ||
      CheckDeviceRange(b, b_elems * Bytes(bt), "cuBLAS matrix B") != cudaSuccess ||
      CheckDeviceRange(c, Extent(m, n, ldc) * Bytes(ct), "cuBLAS matrix C") != cudaSuccess) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cudaError_t e = Enqueue(h->stream, name, [=] {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int l = 0; l < k; ++l) {
          const float x = Load(
              a, at, a_n ? i + static_cast<size_t>(l) * lda : l + static_cast<size_t>(i) * lda);
          const float y = Load(
              b, bt, b_n ? l + static_cast<size_t>(j) * ldb : j + static_cast<size_t>(l) * ldb);
          acc = std::fma(x, y, acc);
        }
        const size_t ci = i + static_cast<size_t>(j) * ldc;
        float v = alpha * acc;
        if (beta != 0.0f) v += beta * Load(c, ct, ci);
        Store(c, ct, ci, v);
      }
    }
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

void* HostDlopen(const char* name, int flags) {
  const std::string n = name != nullptr ? name : "";
  const std::string want = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  if (n == want || (n.size() > want.size() &&
                    n.compare(n.size() - want.size() - 1, want.size() + 1, "/" + want) == 0)) {
    return const_cast<char*>(kHostCublasHandle);
  }
  void* h = ::dlopen(name, flags);
  if (h == nullptr) t_dlerror = ::dlerror();
  return h;
}

void* HostDlsym(void* handle, const char* symbol) {
  if (handle != kHostCublasHandle) return ::dlsym(handle, symbol);
  const std::string s = symbol;
  void* f = nullptr;
  if (s == "cublasCreate_v2") f = reinterpret_cast<void*>(&cublasCreate_v2);
  if (s == "cublasDestroy_v2") f = reinterpret_cast<void*>(&cublasDestroy_v2);
  if (s == "cublasSetStream_v2") f = reinterpret_cast<void*>(&cublasSetStream_v2);
  if (s == "cublasSetWorkspace_v2") f = reinterpret_cast<void*>(&cublasSetWorkspace_v2);
  if (s == "cublasSetMathMode") f = reinterpret_cast<void*>(&cublasSetMathMode);
  if (s == "cublasSgemm_v2") f = reinterpret_cast<void*>(&cublasSgemm_v2);
  if (s == "cublasGemmEx") f = reinterpret_cast<void*>(&cublasGemmEx);
  if (s == "cublasGetStatusString") f = reinterpret_cast<void*>(&cublasGetStatusString);
  if (f == nullptr) t_dlerror = "host cuBLAS has no symbol " + s;
  return f;
}

char* HostDlerror() {
  static thread_local std::string last;
  if (t_dlerror.empty()) return nullptr;
  last.swap(t_dlerror);
  t_dlerror.clear();
  return last.data();
}

}  // namespace tinyserve::gpu_host

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (tinyserve::gpu_host::CheckDeviceRange(workspace, bytes, "cublasSetWorkspace") !=
      cudaSuccess) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  return tinyserve::gpu_host::Gemm(handle, transa, transb, m, n, k, *alpha, a, CUDA_R_32F, lda, b,
                                   CUDA_R_32F, ldb, *beta, c, CUDA_R_32F, ldc, "cublasSgemm");
}
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return tinyserve::gpu_host::Gemm(
      handle, transa, transb, m, n, k, *static_cast<const float*>(alpha), a, a_type, lda, b, b_type,
      ldb, *static_cast<const float*>(beta), c, c_type, ldc, "cublasGemmEx");
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
