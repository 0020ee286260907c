// cpu_attention_bench: the CPU backend's PagedAttention alone, its kernels on each instruction set
// this CPU has (SetCpuAttentionIsaForTesting: best, avx2, portable), alternating, in one run.
//
//   cpu_attention_bench [--heads 12] [--kv-heads 12] [--head-dim 64] [--threads 2] [--reps 200]
//                       [--isas best,avx2,portable] [--kv-cache-dtype float32|bfloat16]
//                       [--layers 12] [--decode SEQS:CONTEXT ...]
//
// Shapes: decode at batch 1 and 32 (contexts 16 ... 144, as decode_bench's 16-token prompts and
// 128 generated tokens give) and a prefill of 32 x 128-token prompts (bench throughput's shape);
// or, with --decode, only decode steps of SEQS sequences at CONTEXT positions each (a small one
// with --layers 1 keeps the cache in L2: the kernels' compute alone).
// Prints microseconds per call (median of the reps) for each instruction set, and the ratio of
// the last to the first (portable / best with the default --isas). An instruction set the CPU
// lacks is left out (avx2 too where it is what best runs).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace tinyserve {
namespace {

struct Shape {
  std::string name;
  std::vector<int32_t> context_lens, chunk_lens;
};

double MedianMicros(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Run(int argc, char** argv) {
  int32_t heads = 12, kv_heads = 12, head_dim = 64, threads = 2, reps = 200, layers = 12;
  CLI::App app{"CPU PagedAttention: vector paths against portable loops"};
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--threads", threads);
  app.add_option("--reps", reps);
  app.add_option("--layers", layers,
                 "caches the calls take in turn, as a model's layers do (so that the cache is read "
                 "from memory, not from L3)")
      ->check(CLI::PositiveNumber);
  std::string isas_arg = "best,avx2,portable", kv_dtype = "float32";
  app.add_option("--kv-cache-dtype", kv_dtype, "the cache's element type")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--isas", isas_arg, "comma-separated: best, avx512, avx2, portable");
  std::vector<std::string> decode_args;
  app.add_option("--decode", decode_args,
                 "SEQS:CONTEXT: a decode step of SEQS sequences at CONTEXT positions each, in "
                 "place of the default shapes (repeatable)");
  CLI11_PARSE(app, argc, argv);
  std::vector<std::string> isas;
  for (size_t at = 0; at <= isas_arg.size();) {
    const size_t comma = std::min(isas_arg.find(',', at), isas_arg.size());
    const std::string isa = isas_arg.substr(at, comma - at);
    at = comma + 1;
    // avx2 is left out where the best this CPU has is avx2 itself (no AVX-512).
#if defined(__x86_64__)
    const bool avx512 = __builtin_cpu_supports("avx512f");
#else
    const bool avx512 = false;
#endif
    const bool same_as_best =
        isa == "avx2" && !avx512 && std::find(isas.begin(), isas.end(), "best") != isas.end();
    if (isa.empty() || same_as_best) continue;
    if (!SetCpuAttentionIsaForTesting(isa.c_str())) {
      std::fprintf(stderr, "cpu_attention_bench: this CPU cannot run %s; left out\n", isa.c_str());
      continue;
    }
    isas.push_back(isa);
  }
  SetCpuAttentionIsaForTesting("best");
  if (isas.empty()) {
    std::fprintf(stderr, "cpu_attention_bench: no instruction set to run\n");
    return 1;
  }

  std::vector<Shape> shapes;
  Shape b1{"decode batch 1, context 144", {144}, {1}};
  Shape b32{"decode batch 32, contexts 16..144", {}, {}};
  for (int32_t s = 0; s < 32; ++s) {
    b32.context_lens.push_back(16 + 4 * s);
    b32.chunk_lens.push_back(1);
  }
  Shape pre{"prefill 32 x 128", std::vector<int32_t>(32, 128), std::vector<int32_t>(32, 128)};
  shapes = {b1, b32, pre};
  if (!decode_args.empty()) shapes.clear();
  for (const std::string& arg : decode_args) {
    int32_t seqs = 0, context = 0;
    char tail = 0;
    if (std::sscanf(arg.c_str(), "%d:%d%c", &seqs, &context, &tail) != 2 || seqs < 1 ||
        context < 1) {
      std::fprintf(stderr, "cpu_attention_bench: --decode %s: want SEQS:CONTEXT, both >= 1\n",
                   arg.c_str());
      return 2;
    }
    shapes.push_back(
        Shape{"decode batch " + std::to_string(seqs) + ", context " + std::to_string(context),
              std::vector<int32_t>(seqs, context), std::vector<int32_t>(seqs, 1)});
  }

  const bool bf16 = kv_dtype == "bfloat16";
  std::unique_ptr<Backend> backend =
      CreateCpuBackend(threads, bf16 ? DType::kBFloat16 : DType::kFloat32);
  const int32_t bs = 16, kv_width = kv_heads * head_dim, q_stride = heads * head_dim;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::printf("| shape |");
  for (const std::string& isa : isas) std::printf(" %s us |", isa.c_str());
  std::printf(" %s / %s |\n|---|", isas.back().c_str(), isas.front().c_str());
  for (size_t i = 0; i <= isas.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const Shape& sh : shapes) {
    const int32_t n = static_cast<int32_t>(sh.context_lens.size());
    int32_t max_blocks = 0, num_blocks = 0, tokens = 0;
    for (int32_t len : sh.context_lens) {
      max_blocks = std::max(max_blocks, (len + bs - 1) / bs);
      num_blocks += (len + bs - 1) / bs;
    }
    // The blocks in a shuffled order, as a cache that has served a while hands them out.
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> tables(static_cast<size_t>(n) * max_blocks, 0), positions, starts = {0};
    for (int32_t s = 0, next = 0; s < n; ++s) {
      for (int32_t b = 0; b < (sh.context_lens[s] + bs - 1) / bs; ++b)
        tables[static_cast<size_t>(s) * max_blocks + b] = ids[next++];
      for (int32_t j = 0; j < sh.chunk_lens[s]; ++j)
        positions.push_back(sh.context_lens[s] - sh.chunk_lens[s] + j);
      tokens += sh.chunk_lens[s];
      starts.push_back(tokens);
    }
    // The caches in the backend's own memory (huge pages, as the engine's cache), filled with
    // random values (rounded to bf16 for a bf16 cache).
    const size_t layer_elems = static_cast<size_t>(num_blocks) * bs * kv_width;
    const size_t elem_bytes = bf16 ? 2 : 4, cache_bytes = layer_elems * layers * elem_bytes;
    std::unique_ptr<char, std::function<void(char*)>> k_cache(
        static_cast<char*>(backend->Allocate(cache_bytes)),
        [&](char* p) { backend->Deallocate(p); });
    std::unique_ptr<char, std::function<void(char*)>> v_cache(
        static_cast<char*>(backend->Allocate(cache_bytes)),
        [&](char* p) { backend->Deallocate(p); });
    for (char* cache : {k_cache.get(), v_cache.get()}) {
      for (size_t i = 0; i < layer_elems * layers; ++i) {
        const float x = dist(rng);
        if (bf16) {
          const uint16_t b = F32ToBf16(x);
          std::memcpy(cache + 2 * i, &b, 2);
        } else {
          std::memcpy(cache + 4 * i, &x, 4);
        }
      }
    }
    const char* k_base = k_cache.get();
    const char* v_base = v_cache.get();
    std::vector<float> q(static_cast<size_t>(tokens) * q_stride), out(q.size());
    for (float& x : q) x = dist(rng);
    AttentionMetadata meta;
    meta.num_tokens = tokens;
    meta.num_seqs = n;
    meta.positions = positions.data();
    meta.query_start = starts.data();
    meta.block_tables = tables.data();
    meta.max_blocks_per_seq = max_blocks;
    meta.block_size = bs;
    const size_t modes = isas.size();
    std::vector<std::vector<double>> times(modes);
    const int32_t r = sh.chunk_lens[0] > 1 ? std::max(5, reps / 20) : reps;
    for (int32_t i = 0; i < static_cast<int32_t>(modes) * (r + 1); ++i) {
      const size_t mode = i % modes;  // alternating
      SetCpuAttentionIsaForTesting(isas[mode].c_str());
      const auto t0 = std::chrono::steady_clock::now();
      const size_t layer_offset = i % layers * layer_elems * elem_bytes;
      backend->PagedAttention(q.data(), q_stride, k_base + layer_offset, v_base + layer_offset,
                              meta, heads, kv_heads, head_dim, out.data());
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (i >= static_cast<int32_t>(modes)) times[mode].push_back(us);  // the first warms up
    }
    SetCpuAttentionIsaForTesting("best");
    std::printf("| %s |", sh.name.c_str());
    for (size_t m = 0; m < modes; ++m) std::printf(" %.1f |", MedianMicros(times[m]));
    std::printf(" %.2fx |\n", MedianMicros(times.back()) / MedianMicros(times.front()));
  }
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Run(argc, argv); }
