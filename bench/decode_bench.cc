// decode_bench: CPU decode speed against the memory-bandwidth floor.
//
// Single-sequence decode must read every weight once per token, so its ceiling is
// (memory read bandwidth) / (weight bytes); the bandwidth is measured in the same run with a large
// streaming read at the same thread count. Batched decode reads the weights once for the whole
// batch, turning matrix-vector work into matrix-matrix work.
//
//   decode_bench [--presets stories260K,stories15M,stories110M] [--threads 1,2] [--batch 1,32]
//                [--decode-tokens 32] [--prompt-len 16] [--model-dir DIR]
//                [--model PATH[,PATH]] (HF directories, GGUF files or llama2.c checkpoints)
//                [--kv-cache-dtype float32|bfloat16]
//
// Each step goes through the executor's Execute with greedy sampling, as the engine runs it
// (bench/decode_loop.h). Benchmark-shape checkpoints (random weights, seed 1) are written to
// --model-dir once and reused.
// Batched rows also report the matrix GFLOP/s (2 x matrix parameters per token) against the fp32
// FMA peak measured in the same run at the same thread count (independent FMA chains in registers,
// the widest vectors the CPU has: what the packed GEMM's kernels run on).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench_common.h"
#include "decode_loop.h"
#include "models/llama2c.h"
#include "models/model_loader.h"
#include "models/model_runner.h"
#include "models/presets.h"
#include "weight_bytes.h"

namespace tinyserve {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best-of-5 read bandwidth in bytes/s over a 1 GiB buffer, summed by `threads` threads, each
// streaming its own contiguous part. The buffer comes from the CPU backend's allocator, so it has
// the same (huge) pages as the weights it stands for.
double MeasureReadBandwidth(int threads) {
  const size_t n = (size_t{1} << 30) / sizeof(float);
  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  DeviceBuffer storage(backend.get(), n * sizeof(float));
  float* buf = storage.as<float>();
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 7);
  return StreamingReadBandwidth(buf, n, threads, 5);
}

#if defined(__x86_64__)
// FLOPs of `iters` rounds of 16 independent FMA chains on one thread.
__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}
__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
#endif

// Best-of-3 fp32 FMA rate in FLOP/s over `threads` threads (0 when the CPU has no AVX2+FMA).
double MeasureFmaPeak(int threads) {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0.0;
  const int64_t iters = 20'000'000;
  const double flops_per_thread = static_cast<double>(iters) * (avx512 ? 16 * 16 : 12 * 8) * 2;
  double best = 0.0;
  std::vector<float> sink(threads);
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { sink[t] = avx512 ? FmaLoopAvx512(iters) : FmaLoopAvx2(iters); });
    }
    for (auto& th : pool) th.join();
    best = std::max(best, flops_per_thread * threads / Seconds(t0, Clock::now()));
  }
  volatile float keep = sink[0];
  (void)keep;
  return best;
#else
  (void)threads;
  return 0.0;
#endif
}

int Main(int argc, char** argv) {
  CLI::App app{"decode_bench: CPU decode tokens/s against the memory-bandwidth floor"};
  std::string presets = "stories260K,stories15M,stories110M", threads = "1,2", batches = "1,32";
  int32_t decode_tokens = 32, prompt_len = 16;
  std::string model_dir = (std::filesystem::temp_directory_path() / "tinyserve-bench").string();
  app.add_option("--presets", presets, "comma-separated model shapes");
  app.add_option("--threads", threads, "comma-separated thread counts");
  app.add_option("--batch", batches, "comma-separated batch sizes");
  app.add_option("--decode-tokens", decode_tokens, "timed decode steps");
  app.add_option("--prompt-len", prompt_len, "prefilled tokens per sequence");
  app.add_option("--model-dir", model_dir, "where benchmark checkpoints are cached");
  std::string models;
  app.add_option("--model", models,
                 "comma-separated model paths (HF directory, GGUF file or llama2.c checkpoint) "
                 "instead of --presets");
  std::string kv_dtype = "float32";
  AddKvCacheDtypeOption(app, &kv_dtype);
  CLI11_PARSE(app, argc, argv);
  const DType kv_cache_dtype = KvCacheDtype(kv_dtype);
  std::filesystem::create_directories(model_dir);

  std::printf(
      "| model | params | weight MB | threads | batch | tok/s | floor tok/s | of floor | x batch 1 "
      "| matrix GFLOP/s | of FMA peak |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& threads_str : SplitCommas(threads)) {
    const int nt = std::stoi(threads_str);
    const double bandwidth = MeasureReadBandwidth(nt);
    const double fma_peak = MeasureFmaPeak(nt);
    std::fprintf(
        stderr, "read bandwidth, %d threads: %.2f GB/s; fp32 FMA peak: %.1f GFLOP/s; KV cache %s\n",
        nt, bandwidth / 1e9, fma_peak / 1e9, kv_dtype.c_str());
    for (const std::string& name : SplitCommas(models.empty() ? presets : models)) {
      std::string path = name;
      if (models.empty()) {
        const auto preset = FindModelPreset(name);
        if (!preset) {
          std::fprintf(stderr, "unknown preset %s\n", name.c_str());
          return 1;
        }
        path = model_dir + "/" + name + "-seed1.bin";
        if (!LoadLlama2cCheckpoint(path).ok()) {
          const Status s = WriteRandomLlama2cCheckpoint(path, preset->header, 1);
          if (!s.ok()) {
            std::fprintf(stderr, "%s\n", s.message().c_str());
            return 1;
          }
        }
      }
      auto weights = LoadModelWeights(path);
      if (!weights.ok()) {
        std::fprintf(stderr, "%s\n", weights.status().message().c_str());
        return 1;
      }
      const ModelConfig& c = (*weights)->config;
      const int64_t read_params =
          c.num_parameters() - (c.shared_classifier ? 0 : int64_t{c.vocab_size} * c.dim);
      // A quantized GGUF's matrices count their blocks' bytes (weight_bytes.h).
      const double weight_bytes = DecodeStepWeightBytes(**weights);
      const double floor_tps = bandwidth / weight_bytes;
      double single = 0.0;
      for (const std::string& batch_str : SplitCommas(batches)) {
        const int32_t batch = std::stoi(batch_str);
        ModelRunnerOptions o;
        o.block_size = 16;
        o.max_model_len = std::min(c.max_seq_len, prompt_len + decode_tokens + 16);
        o.num_kv_blocks = batch * ((o.max_model_len + 15) / 16);
        auto runner = ModelRunner::Create(*weights, CreateCpuBackend(nt, kv_cache_dtype), o);
        if (!runner.ok()) {
          std::fprintf(stderr, "%s\n", runner.status().message().c_str());
          return 1;
        }
        (void)TimedGreedyDecode(**runner, batch, prompt_len, 2);  // warm-up
        StatusOr<double> r = TimedGreedyDecode(**runner, batch, prompt_len, decode_tokens);
        if (!r.ok()) {
          std::fprintf(stderr, "%s\n", r.status().message().c_str());
          return 1;
        }
        if (batch == 1) single = *r;
        // Every weight read is one multiply-add per token (the embedding is a lookup).
        const double gflops = *r * 2.0 * static_cast<double>(read_params) / 1e9;
        std::printf(
            "| %s | %.2fM | %.1f | %d | %d | %.1f | %.1f | %s | %s | %.1f | %s |\n", name.c_str(),
            c.num_parameters() / 1e6, weight_bytes / 1e6, nt, batch, *r, floor_tps,
            batch == 1
                ? (std::to_string(static_cast<int>(100.0 * *r / floor_tps + 0.5)) + "%").c_str()
                : "",
            single > 0 && batch != 1 ? (std::to_string(*r / single).substr(0, 5) + "x").c_str()
                                     : "",
            gflops,
            fma_peak > 0
                ? (std::to_string(static_cast<int>(100.0 * gflops * 1e9 / fma_peak + 0.5)) + "%")
                      .c_str()
                : "n/a");
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Main(argc, argv); }
