// The CPU backend: fp32 ops over host memory, OpenMP threads, OpenBLAS sgemm/sgemv.
//
// Numerics follow llama2.c's run.c where it matters for token-exact parity: sequential float
// accumulation in RMSNorm and attention, division by sqrtf(head_dim), powf/cosf/sinf RoPE.
#include <sys/mman.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/thread_pool.h"

#ifdef TINYSERVE_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tinyserve {
namespace {

void RmsNormRow(const float* x, const float* weight, int32_t dim, float eps, float* out) {
  float ss = 0.0f;
  for (int32_t j = 0; j < dim; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(dim);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int32_t j = 0; j < dim; ++j) out[j] = weight[j] * (ss * x[j]);
}

// y[:, j0:j1] = x * w[j0:j1, :]^T on the calling thread. y has row stride n.
void GemmSlice(const float* x, const float* w, int32_t m, int32_t n, int32_t k, int32_t j0,
               int32_t j1, float* y) {
  if (m == 1) {
    GemvRows(w, x, k, j0, j1, y);
    return;
  }
#ifdef TINYSERVE_HAVE_OPENBLAS
  const float* ws = w + static_cast<size_t>(j0) * k;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, j1 - j0, k, 1.0f, x, k, ws, k, 0.0f,
              y + j0, n);
#else
  // Built-in: each weight row is read once and applied to all m rows.
  for (int32_t j = j0; j < j1; ++j) {
    const float* wr = w + static_cast<size_t>(j) * k;
    for (int32_t i = 0; i < m; ++i) {
      const float* xr = x + static_cast<size_t>(i) * k;
      float acc = 0.0f;
      for (int32_t p = 0; p < k; ++p) acc += wr[p] * xr[p];
      y[static_cast<size_t>(i) * n + j] = acc;
    }
  }
#endif
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads) {
    if (num_threads <= 0)
      num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    num_threads_ = num_threads;
    pool_ = std::make_unique<ThreadPool>(num_threads_);
#ifdef TINYSERVE_HAVE_OPENBLAS
    openblas_set_num_threads(1);  // threads come from OpenMP, see Gemm
#endif
  }

  std::string name() const override {
#ifdef TINYSERVE_HAVE_OPENBLAS
    const char* gemm = "openblas";
#else
    const char* gemm = "builtin-gemm";
#endif
    return "cpu (fp32, " + std::to_string(num_threads_) + " threads, " + gemm + ")";
  }

  bool is_host() const override { return true; }

  void* Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // 64-byte alignment for vector loads; calloc-like zeroing. Buffers of 2 MiB and more are
    // 2 MiB-aligned and asked to be backed by transparent huge pages (before the first touch):
    // streaming hundreds of MB of weights per token through 4 KiB pages costs a TLB miss a page.
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t align = bytes >= kHuge ? kHuge : 64;
    const size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (p == nullptr) return nullptr;
    if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
    std::memset(p, 0, rounded);
    return p;
  }
  void Deallocate(void* ptr) override { std::free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  Status Synchronize() override { return Status::Ok(); }

  void Embedding(const float* table, const int32_t* ids, int32_t n, int32_t dim,
                 float* out) override {
    for (int32_t t = 0; t < n; ++t) {
      std::memcpy(out + static_cast<size_t>(t) * dim, table + static_cast<size_t>(ids[t]) * dim,
                  sizeof(float) * dim);
    }
  }

  void RmsNorm(const float* x, const float* weight, int32_t n, int32_t dim, float eps,
               float* out) override {
    For(static_cast<int64_t>(n) * dim > 65536, n,
        [&](int64_t t) { RmsNormRow(x + t * dim, weight, dim, eps, out + t * dim); });
  }

  void AddRmsNorm(float* residual, const float* delta, const float* weight, int32_t n, int32_t dim,
                  float eps, float* out) override {
    For(static_cast<int64_t>(n) * dim > 65536, n, [&](int64_t t) {
      float* r = residual + t * dim;
      const float* d = delta + t * dim;
      for (int32_t j = 0; j < dim; ++j) r[j] += d[j];
      RmsNormRow(r, weight, dim, eps, out + t * dim);
    });
  }

  // One thread pool: OpenMP splits the output features into one slice per thread, and each
  // slice is a single-threaded OpenBLAS call (OpenBLAS's own threads are off; two pools spinning
  // on two cores starve each other).
  void Gemm(const float* x, const float* w, int32_t m, int32_t n, int32_t k, float* y) override {
    const double flops = 2.0 * m * n * k;
    // Four slices per thread: a thread the OS deschedules holds back only a small slice while
    // the others take the rest.
    const int32_t parts =
        flops < 2e5 || num_threads_ == 1 ? 1 : std::min<int32_t>(4 * num_threads_, (n + 15) / 16);
    if (parts <= 1) {
      GemmSlice(x, w, m, n, k, 0, n, y);
      return;
    }
    // Slice boundaries on multiples of 16 features.
    const int32_t per = (n + parts * 16 - 1) / (parts * 16) * 16;
    pool_->ParallelFor(parts, [&](int64_t p) {
      const int32_t j0 = std::min<int32_t>(n, static_cast<int32_t>(p) * per);
      const int32_t j1 = std::min(n, j0 + per);
      if (j1 > j0) GemmSlice(x, w, m, n, k, j0, j1, y);
    });
  }

  void AddBias(float* y, const float* bias, int32_t m, int32_t n) override {
    For(static_cast<int64_t>(m) * n > 65536, m, [&](int64_t i) {
      float* row = y + i * n;
      for (int32_t j = 0; j < n; ++j) row[j] += bias[j];
    });
  }

  void Rope(float* q, int32_t q_stride, float* k, int32_t k_stride, const int32_t* positions,
            int32_t n, int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
            const float* inv_freq, RopeStyle style) override {
    const int32_t half = head_dim / 2;
    const bool parallel = static_cast<int64_t>(n) * (num_heads + num_kv_heads) * head_dim > 65536;
    For(parallel, n, [&](int64_t t) {
      thread_local std::vector<float> cosv, sinv;
      cosv.resize(half);
      sinv.resize(half);
      {
        const int32_t pos = positions[t];
        for (int32_t i = 0; i < half; ++i) {
          // As run.c and HF: angle = pos * inv_freq, in float.
          const float val = static_cast<float>(pos) * inv_freq[i];
          cosv[i] = std::cos(val);
          sinv[i] = std::sin(val);
        }
        auto rotate = [&](float* head) {
          for (int32_t i = 0; i < half; ++i) {
            const int32_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
            const int32_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
            const float v0 = head[a], v1 = head[b];
            head[a] = v0 * cosv[i] - v1 * sinv[i];
            head[b] = v0 * sinv[i] + v1 * cosv[i];
          }
        };
        float* qt = q + t * q_stride;
        for (int32_t h = 0; h < num_heads; ++h) rotate(qt + h * head_dim);
        float* kt = k + t * k_stride;
        for (int32_t h = 0; h < num_kv_heads; ++h) rotate(kt + h * head_dim);
      }
    });
  }

  void WriteKvCache(const float* k, const float* v, int32_t stride, const int64_t* slots, int32_t n,
                    int32_t kv_width, float* k_cache, float* v_cache) override {
    for (int32_t t = 0; t < n; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      std::memcpy(k_cache + slot * kv_width, k + static_cast<size_t>(t) * stride,
                  sizeof(float) * kv_width);
      std::memcpy(v_cache + slot * kv_width, v + static_cast<size_t>(t) * stride,
                  sizeof(float) * kv_width);
    }
  }

  void PagedAttention(const float* q, int32_t q_stride, const float* k_cache, const float* v_cache,
                      const AttentionMetadata& meta, int32_t num_heads, int32_t num_kv_heads,
                      int32_t head_dim, float* out) override {
    const int32_t kv_mul = num_heads / num_kv_heads;
    const int32_t kv_width = num_kv_heads * head_dim;
    const float denom = std::sqrt(static_cast<float>(head_dim));
    const int32_t bs = meta.block_size;
    // Row -> sequence map, so (token, head) pairs can be spread over threads evenly.
    std::vector<int32_t> seq_of(meta.num_tokens);
    for (int32_t s = 0; s < meta.num_seqs; ++s) {
      for (int32_t t = meta.query_start[s]; t < meta.query_start[s + 1]; ++t) seq_of[t] = s;
    }
    const int64_t work = static_cast<int64_t>(meta.num_tokens) * num_heads;
    // Threads only when there is enough to share: each parallel region costs a barrier.
    int64_t flops = 0;
    for (int32_t t = 0; t < meta.num_tokens; ++t) flops += meta.positions[t] + 1;
    flops *= 4LL * num_heads * head_dim;
    For(flops > 200000, work, [&](int64_t wi) {
      thread_local std::vector<float> att;
      {
        const int32_t t = static_cast<int32_t>(wi / num_heads);
        const int32_t h = static_cast<int32_t>(wi % num_heads);
        const int32_t* table =
            meta.block_tables + static_cast<size_t>(seq_of[t]) * meta.max_blocks_per_seq;
        const int32_t len = meta.positions[t] + 1;
        const float* qh = q + static_cast<size_t>(t) * q_stride + h * head_dim;
        const int32_t kvh = h / kv_mul;
        att.resize(len);
        float max_score = -INFINITY;
        for (int32_t p = 0; p < len; ++p) {
          const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
          const float* kp = k_cache + slot * kv_width + kvh * head_dim;
          float score = 0.0f;
          for (int32_t i = 0; i < head_dim; ++i) score += qh[i] * kp[i];
          score /= denom;
          att[p] = score;
          max_score = std::max(max_score, score);
        }
        float sum = 0.0f;
        for (int32_t p = 0; p < len; ++p) {
          att[p] = std::exp(att[p] - max_score);
          sum += att[p];
        }
        for (int32_t p = 0; p < len; ++p) att[p] /= sum;
        float* oh = out + static_cast<size_t>(t) * num_heads * head_dim + h * head_dim;
        std::fill(oh, oh + head_dim, 0.0f);
        for (int32_t p = 0; p < len; ++p) {
          const int64_t slot = static_cast<int64_t>(table[p / bs]) * bs + p % bs;
          const float* vp = v_cache + slot * kv_width + kvh * head_dim;
          const float a = att[p];
          for (int32_t i = 0; i < head_dim; ++i) oh[i] += a * vp[i];
        }
      }
    });
  }

  void SiluAndMul(const float* gate_up, int32_t n, int32_t hidden, float* out) override {
    For(static_cast<int64_t>(n) * hidden > 65536, n, [&](int64_t t) {
      const float* g = gate_up + t * 2 * hidden;
      const float* u = g + hidden;
      float* o = out + t * hidden;
      for (int32_t i = 0; i < hidden; ++i) {
        float val = g[i];
        val *= 1.0f / (1.0f + std::exp(-val));
        o[i] = val * u[i];
      }
    });
  }

  void GatherRows(const float* x, const int32_t* rows, int32_t m, int32_t dim,
                  float* out) override {
    for (int32_t i = 0; i < m; ++i) {
      std::memcpy(out + static_cast<size_t>(i) * dim, x + static_cast<size_t>(rows[i]) * dim,
                  sizeof(float) * dim);
    }
  }

 private:
  // Runs fn(i) for i in [0, n) on the pool when `parallel`, else inline: each parallel region
  // costs a hand-over, so small ops stay on the calling thread.
  void For(bool parallel, int64_t n, const std::function<void(int64_t)>& fn) {
    if (parallel) {
      pool_->ParallelFor(n, fn);
    } else {
      for (int64_t i = 0; i < n; ++i) fn(i);
    }
  }

  int num_threads_ = 1;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int num_threads) {
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace tinyserve
