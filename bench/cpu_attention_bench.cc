// cpu_attention_bench: the CPU backend's PagedAttention alone, its vector paths against its
// portable loops (SetCpuAttentionVectorsForTesting), alternating, in one run.
//
//   cpu_attention_bench [--heads 12] [--kv-heads 12] [--head-dim 64] [--threads 2] [--reps 200]
//
// Shapes: decode at batch 1 and 32 (contexts 16 ... 144, as decode_bench's 16-token prompts and
// 128 generated tokens give) and a prefill of 32 x 128-token prompts (bench throughput's shape).
// Prints microseconds per call (median of the reps) for each, and the ratio portable / vector.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace tinyserve {
namespace {

struct Shape {
  const char* name;
  std::vector<int32_t> context_lens, chunk_lens;
};

double MedianMicros(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(int argc, char** argv) {
  int32_t heads = 12, kv_heads = 12, head_dim = 64, threads = 2, reps = 200;
  CLI::App app{"CPU PagedAttention: vector paths against portable loops"};
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--threads", threads);
  app.add_option("--reps", reps);
  CLI11_PARSE(app, argc, argv);

  std::vector<Shape> shapes;
  Shape b1{"decode batch 1, context 144", {144}, {1}};
  Shape b32{"decode batch 32, contexts 16..144", {}, {}};
  for (int32_t s = 0; s < 32; ++s) {
    b32.context_lens.push_back(16 + 4 * s);
    b32.chunk_lens.push_back(1);
  }
  Shape pre{"prefill 32 x 128", std::vector<int32_t>(32, 128), std::vector<int32_t>(32, 128)};
  shapes = {b1, b32, pre};

  std::unique_ptr<Backend> backend = CreateCpuBackend(threads);
  const int32_t bs = 16, kv_width = kv_heads * head_dim, q_stride = heads * head_dim;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("| shape | vector us | portable us | portable / vector |\n|---|---|---|---|\n");
  for (const Shape& sh : shapes) {
    const int32_t n = static_cast<int32_t>(sh.context_lens.size());
    int32_t max_blocks = 0, num_blocks = 0, tokens = 0;
    for (int32_t len : sh.context_lens) {
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      num_blocks += (len + bs - 1) / bs;
    }
    std::vector<int32_t> tables(static_cast<size_t>(n) * max_blocks, 0), positions, starts = {0};
    for (int32_t s = 0, next = 0; s < n; ++s) {
      for (int32_t b = 0; b < (sh.context_lens[s] + bs - 1) / bs; ++b)
        tables[static_cast<size_t>(s) * max_blocks + b] = next++;
      for (int32_t j = 0; j < sh.chunk_lens[s]; ++j)
        positions.push_back(sh.context_lens[s] - sh.chunk_lens[s] + j);
      tokens += sh.chunk_lens[s];
      starts.push_back(tokens);
    }
    std::vector<float> k(static_cast<size_t>(num_blocks) * bs * kv_width);
    std::vector<float> v(k.size()), q(static_cast<size_t>(tokens) * q_stride), out(q.size());
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    for (float& x : q) x = dist(rng);
    AttentionMetadata meta;
    meta.num_tokens = tokens;
    meta.num_seqs = n;
    meta.positions = positions.data();
    meta.query_start = starts.data();
    meta.block_tables = tables.data();
    meta.max_blocks_per_seq = max_blocks;
    meta.block_size = bs;
    std::vector<double> times[2];
    const int32_t r = sh.chunk_lens[0] > 1 ? std::max(5, reps / 20) : reps;
    for (int32_t i = 0; i < 2 * r + 2; ++i) {
      const int mode = i % 2;  // 0 vector, 1 portable, alternating
      SetCpuAttentionVectorsForTesting(mode == 0);
      const auto t0 = std::chrono::steady_clock::now();
      backend->PagedAttention(q.data(), q_stride, k.data(), v.data(), meta, heads, kv_heads,
                              head_dim, out.data());
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (i >= 2) times[mode].push_back(us);  // the first of each warms up
    }
    SetCpuAttentionVectorsForTesting(true);
    const double vec = MedianMicros(times[0]), port = MedianMicros(times[1]);
    std::printf("| %s | %.1f | %.1f | %.2fx |\n", sh.name, vec, port, port / vec);
  }
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Run(argc, argv); }
