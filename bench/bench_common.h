// Helpers the CPU benchmarks share: comma-separated option lists, the --kv-cache-dtype option,
// and the streaming read bandwidth that decode's memory floor is measured against.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.h"

namespace tinyserve {

// "1,32" -> {"1", "32"} (empty items kept: "" -> {""}).
inline std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// --kv-cache-dtype float32|bfloat16 on `app`, into *name (float32 unless given); the CPU
// backend's cache dtype for it is KvCacheDtype(*name) once parsed.
inline void AddKvCacheDtypeOption(CLI::App& app, std::string* name) {
  app.add_option("--kv-cache-dtype", *name,
                 "KV cache dtype: float32 or bfloat16 (llama.cpp's default cache is f16, 2 bytes)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
}
inline DType KvCacheDtype(const std::string& name) {
  return name == "bfloat16" ? DType::kBFloat16 : DType::kFloat32;
}

// Best-of-`reps` read bandwidth in bytes/s of `threads` threads summing buf[0..n), each its own
// contiguous part. The caller fills buf (pages touched) and chooses n larger than the last-level
// cache when it wants memory's bandwidth.
inline double StreamingReadBandwidth(const float* buf, size_t n, int threads, int reps) {
  using Clock = std::chrono::steady_clock;
  double best = 0.0;
  std::vector<float> partial(threads);
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = n / threads * t, end = t + 1 == threads ? n : n / threads * (t + 1);
        float acc[16] = {};
        for (size_t i = begin; i + 16 <= end; i += 16) {
          for (int j = 0; j < 16; ++j) acc[j] += buf[i + j];
        }
        float s = 0.0f;
        for (float a : acc) s += a;
        partial[t] = s;
      });
    }
    for (auto& th : pool) th.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds);
  }
  volatile float sink = partial[0];
  (void)sink;
  return best;
}

}  // namespace tinyserve
