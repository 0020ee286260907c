// quant_linear_bench: the CPU backend's Linear on quantized weights alone (no model around it),
// against the machine measured in the same run.
//
//   quant_linear_bench [--types q8_0,q4_k,q6_k] [--rows 8192] [--cols 4096] [--threads 2]
//                      [--batch 1,32] [--reps 20]
//
// Batch 1 reports GB/s of weight blocks read against a plain streaming read of a buffer of the
// same size at the same thread count (the matrix is larger than the last-level cache, so both
// come from memory). Larger batches report the multiply-accumulates per second (rows x cols x
// batch / s) against the int8 dot-product peak measured in the same run, at the widest vectors
// the CPU has (in registers: 512-bit vpdpbusd, 64 MACs an instruction, on AVX-512 VNNI; else
// AVX2 maddubs + madd, 32 MACs per 256 bits). On Zen 5, whose units are 512 bits wide, the
// 512-bit rate is ~1.7x the 256-bit one; on Zen 4 they are the same.
#include <immintrin.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "kernels/backend.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/ggml_quant.h"

namespace tinyserve {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The QuantType named `name` (QuantTypeName's, in any case: "q8_0", "q4_k").
std::optional<QuantType> ParseType(std::string name) {
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
                      QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K}) {
    std::string known = QuantTypeName(t);
    for (char& c : known) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == known) return t;
  }
  return std::nullopt;
}

// Best-of-5 read bandwidth (bytes/s) of `threads` threads streaming `bytes`.
double ReadBandwidth(size_t bytes, int threads) {
  std::vector<float> buf(bytes / sizeof(float));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i & 7);
  return StreamingReadBandwidth(buf.data(), buf.size(), threads, 5);
}

#if defined(__x86_64__)
// int8 MACs of `iters` rounds of 16 independent 512-bit dot-product chains on one thread.
__attribute__((target("avx2,avx512f,avx512vnni"))) int32_t DotLoopVnni(int64_t iters) {
  __m512i acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 16; ++j) {
      acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
      __asm__ volatile("" : "+v"(acc[j]));
    }
  }
  int32_t s = 0;
  for (int j = 0; j < 16; ++j) {
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, acc[j]);
    s += lanes[0];
  }
  return s;
}

__attribute__((target("avx2"))) int32_t DotLoopAvx2(int64_t iters) {
  __m256i acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_set1_epi32(j);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
    for (int j = 0; j < 8; ++j) {
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
      __asm__ volatile("" : "+x"(acc[j]));
    }
  }
  int32_t s = 0;
  for (int j = 0; j < 8; ++j) s += _mm256_extract_epi32(acc[j], 0);
  return s;
}

// int8 multiply-accumulates per second on `threads` threads (best of 3).
double DotPeak(int threads, bool vnni) {
  const int64_t iters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    std::vector<int32_t> out(threads);
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { out[t] = vnni ? DotLoopVnni(iters) : DotLoopAvx2(iters); });
    for (auto& th : pool) th.join();
    const double macs = static_cast<double>(iters) * (vnni ? 16 * 64 : 8 * 32) * threads;
    best = std::max(best, macs / Seconds(t0, Clock::now()));
  }
  return best;
}
#endif

int Main(int argc, char** argv) {
  CLI::App app{"quant_linear_bench: Linear on quantized weights against read bandwidth and peak"};
  std::string types = "q8_0,q4_k,q6_k", batches = "1,32";
  int32_t rows = 8192, cols = 4096;
  int threads = 2, reps = 20;
  app.add_option("--types", types, "comma-separated: q8_0, q4_0, q4_k, q5_k, q6_k");
  app.add_option("--rows", rows, "output features (the matrix's rows)");
  app.add_option("--cols", cols, "input features (a multiple of 256)");
  app.add_option("--threads", threads, "CPU backend threads");
  app.add_option("--batch", batches, "comma-separated activation rows");
  app.add_option("--reps", reps, "timed calls per measurement (best of 3 measurements)");
  CLI11_PARSE(app, argc, argv);
  if (cols % 256 != 0) return std::fprintf(stderr, "--cols must be a multiple of 256\n"), 1;
  std::unique_ptr<Backend> backend = CreateCpuBackend(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> src(static_cast<size_t>(cols));
  const std::string isa = QuantDotIsa();
#if defined(__x86_64__)
  const double peak = DotPeak(threads, isa == "avx512vnni");
#else
  const double peak = 0;
#endif
  std::printf(
      "| type | kernels | MB | threads | batch | ms/call | GB/s | of read bw | GMAC/s | "
      "of int8 peak |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& t : SplitCommas(types)) {
    const auto type = ParseType(t);
    if (!type) return std::fprintf(stderr, "unknown type %s\n", t.c_str()), 1;
    const size_t row_bytes = QuantRowBytes(*type, cols);
    std::vector<uint8_t> blocks(row_bytes * rows);
    for (int32_t r = 0; r < rows; ++r) {
      if (r < 64) {
        for (float& v : src) v = normal(rng);
        QuantizeRowReference(*type, src.data(), cols, blocks.data() + row_bytes * r);
      } else {  // copies of the first 64 rows: quantizing 8192 rows takes long
        std::copy_n(blocks.data() + row_bytes * (r % 64), row_bytes, blocks.data() + row_bytes * r);
      }
    }
    const QuantPart part{*type, blocks.data(), rows};
    const WeightRef w = backend->UploadQuantMatrix(&part, 1, cols);
    const double bytes = static_cast<double>(blocks.size());
    const double bw = ReadBandwidth(blocks.size(), threads);
    for (const std::string& bstr : SplitCommas(batches)) {
      const int32_t m = std::stoi(bstr);
      std::vector<float> x(static_cast<size_t>(m) * cols), y(static_cast<size_t>(m) * rows);
      for (float& v : x) v = normal(rng);
      backend->Linear(x.data(), w, m, rows, cols, y.data());  // warm-up
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) backend->Linear(x.data(), w, m, rows, cols, y.data());
        best = std::min(best, Seconds(t0, Clock::now()) / reps);
      }
      const double gbs = bytes / best / 1e9;
      const double macs = static_cast<double>(rows) * cols * m / best;
      std::printf(
          "| %s | %s | %.1f | %d | %d | %.3f | %.2f | %.0f%% | %.1f | %s |\n", t.c_str(),
          isa.c_str(), bytes / 1e6, threads, m, best * 1e3, gbs, 100.0 * gbs * 1e9 / bw, macs / 1e9,
          peak > 0 ? (std::to_string(static_cast<int>(100.0 * macs / peak + 0.5)) + "%").c_str()
                   : "n/a");
    }
    backend->Deallocate(const_cast<void*>(w.data));
  }
  std::fprintf(stderr, "int8 dot peak, %d threads (%s): %.1f GMAC/s\n", threads, isa.c_str(),
               peak / 1e9);
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Main(argc, argv); }
