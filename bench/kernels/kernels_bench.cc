// kernels_bench: the CUDA backend's speed as fractions of what the device can do.
//
//   kernels_bench [--quick]
//
// 1. Device copy bandwidth (cudaMemcpy device to device, 1 GiB; bytes read + written per second)
//    and the bf16 GEMM rate (cuBLAS, 8192^3, fp32 accumulate and output).
// 2. Decode paged attention, bf16, fp32 and fp8 e4m3 KV caches, at batch x context 1 x 4k, 1 x 32k,
// 16 x 4k,
//    64 x 1k and 64 x 4k, 32 or 64 query heads on 8 KV heads (GQA 4:1 and 8:1), head_dim 64 and
//    128: K+V bytes read per second, and that as % of the copy bandwidth.
// 3. One decode step of a Llama-3.2-1B-shaped model with random bf16 weights (hidden 2048, 16
//    layers, 32/8 heads, intermediate 8192, vocab 128256) at batch 1, 8 and 64 with 1024-token
//    contexts, eager and with CUDA graphs, bf16, fp32 and fp8 KV caches, against the floor (weight
//    + KV bytes / copy bandwidth). Each sequence is a registered greedy request and the executor
//    samples it on the device (ModelRunner::Execute, as under the engine). Modes: cuBLAS eager and
//    with graphs (bf16 KV), cuBLAS graphs with fp32 and with fp8 KV, and the batch-invariant GEMM
//    (--batch-invariant) with graphs.
// 4. Prefill attention over one 4096-token chunk (bf16 KV), as TFLOP/s and % of the bf16 GEMM rate;
//    offline throughput of 1000 requests x (512 in, 128 out) through EngineCore, against a floor
//    (prompt GEMM flops at the GEMM rate + one weight stream per decode wave + the KV reads).
// 5. Linear with bf16 weights, n x k = 2048 x 2048 and 8192 x 2048, m in {1, 8, 16, 32, 64, 2048}:
//    the default path (the small-m kernels up to 8 rows, the tensor-core mid-m kernels up to 64,
//    cuBLAS above), cuBLAS alone (CudaBackendOptions::decode_gemm_kernels off) and the
//    batch-invariant GEMM, as TFLOP/s and weight GB/s (% of the copy bandwidth). Above 8 rows each
//    call of the first two also converts x to bf16 (in a model the op before writes it).
// Inputs are random (weights, activations, KV cache), never zeros; every CUDA return is checked
// and a failed measurement reports its error on stderr and shows 0. cuBLAS is not linked: the
// backend loads it (MeasureCublasBf16GemmFlops for the raw GEMM rate). Prints one table; exits 1 if
// there is no CUDA device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "kernels/backend.h"
#include "kernels/device.h"
#include "kernels/fp8.h"
#include "models/model_runner.h"

namespace tinyserve {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool Ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    std::fprintf(stderr, "kernels_bench: %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// Best of 5 runs of 10 copies: (read + written bytes) / s.
double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  if (!Ok(cudaMalloc(&a, bytes), "cudaMalloc") || !Ok(cudaMalloc(&b, bytes), "cudaMalloc"))
    return 0;
  double best = 0;
  if (Ok(cudaMemset(a, 0x5a, bytes), "cudaMemset") &&
      Ok(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy") &&
      Ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
    for (int r = 0; r < 5; ++r) {
      const auto t0 = Clock::now();
      bool ok = true;
      for (int i = 0; i < 10 && ok; ++i) {
        ok = Ok(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync");
      }
      if (!ok || !Ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
        best = 0;
        break;
      }
      best = std::max(best, 2.0 * 10 * bytes / Seconds(t0, Clock::now()));
    }
  }
  cudaFree(a);
  cudaFree(b);
  return best;
}

// `count` floats uniform in [-scale, scale] on `be`: one random tile, repeated (filling hundreds
// of MB one draw at a time would take longer than the benchmark).
DeviceBuffer RandomBuffer(Backend& be, size_t count, float scale, uint32_t seed) {
  DeviceBuffer d(&be, count * 4);
  if (!d.ok()) return d;
  std::vector<float> tile(std::min<size_t>(count, 1 << 20));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (float& x : tile) x = u(rng);
  for (size_t off = 0; off < count; off += tile.size()) {
    be.CopyToDevice(d.as<float>() + off, tile.data(), std::min(tile.size(), count - off) * 4);
  }
  return d;
}

// `count` bf16 values uniform in [-1, 1] on `be` (a repeated random tile, as RandomBuffer).
DeviceBuffer RandomBf16Buffer(Backend& be, size_t count, uint32_t seed) {
  DeviceBuffer d(&be, count * 2);
  if (!d.ok()) return d;
  std::vector<uint16_t> tile(std::min<size_t>(count, 1 << 20));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (uint16_t& x : tile) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = static_cast<uint16_t>(bits >> 16);
  }
  for (size_t off = 0; off < count; off += tile.size()) {
    be.CopyToDevice(d.as<uint16_t>() + off, tile.data(), std::min(tile.size(), count - off) * 2);
  }
  return d;
}

// `count` KV-cache elements of `be`'s cache dtype, uniform in [-1, 1] (rounded to bf16 or fp8).
DeviceBuffer RandomKvBuffer(Backend& be, size_t count, uint32_t seed) {
  if (be.kv_cache_dtype() == DType::kBFloat16) return RandomBf16Buffer(be, count, seed);
  if (be.kv_cache_dtype() == DType::kFloat32) return RandomBuffer(be, count, 1.0f, seed);
  DeviceBuffer d(&be, count);
  if (!d.ok()) return d;
  std::vector<uint8_t> tile(std::min<size_t>(count, 1 << 20));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (uint8_t& x : tile) x = FloatToE4m3(u(rng));
  for (size_t off = 0; off < count; off += tile.size()) {
    be.CopyToDevice(d.as<uint8_t>() + off, tile.data(), std::min(tile.size(), count - off));
  }
  return d;
}

// Mean seconds of one PagedAttention call on `be` (`iters` calls after one) over random q and a
// random cache in `be`'s KV cache dtype: sequences of `blocks_per_seq` blocks of 16 (a shuffled
// table when `shuffle`), query tokens grouped by `query_start`, token t at positions[t]. 0 on a
// failure.
double AttentionSeconds(Backend& be, const std::vector<int32_t>& positions,
                        const std::vector<int32_t>& query_start, int32_t blocks_per_seq,
                        bool shuffle, int32_t heads, int32_t kv_heads, int32_t head_dim,
                        int iters) {
  const int32_t bs = 16, tokens = static_cast<int32_t>(positions.size());
  const int32_t num_seqs = static_cast<int32_t>(query_start.size()) - 1;
  const int32_t num_blocks = num_seqs * blocks_per_seq;
  const size_t elems = static_cast<size_t>(num_blocks) * bs * kv_heads * head_dim;
  DeviceBuffer kc = RandomKvBuffer(be, elems, 1), vc = RandomKvBuffer(be, elems, 2);
  DeviceBuffer q = RandomBuffer(be, static_cast<size_t>(tokens) * heads * head_dim, 1.0f, 3);
  DeviceBuffer out(&be, static_cast<size_t>(tokens) * heads * head_dim * 4);
  std::vector<int32_t> tables(num_blocks);
  for (int32_t i = 0; i < num_blocks; ++i) tables[i] = i;
  if (shuffle) std::shuffle(tables.begin(), tables.end(), std::mt19937(1));
  DeviceBuffer d_pos(&be, tokens * 4), d_qs(&be, (num_seqs + 1) * 4), d_tables(&be, num_blocks * 4);
  if (!kc.ok() || !vc.ok() || !q.ok() || !out.ok()) return 0;
  be.CopyToDevice(d_pos.as<void>(), positions.data(), tokens * 4);
  be.CopyToDevice(d_qs.as<void>(), query_start.data(), (num_seqs + 1) * 4);
  be.CopyToDevice(d_tables.as<void>(), tables.data(), num_blocks * 4);
  AttentionMetadata meta;
  meta.num_tokens = tokens;
  meta.num_seqs = num_seqs;
  meta.positions = d_pos.as<int32_t>();
  meta.query_start = d_qs.as<int32_t>();
  meta.block_tables = d_tables.as<int32_t>();
  meta.max_blocks_per_seq = blocks_per_seq;
  meta.block_size = bs;
  auto run = [&] {
    be.PagedAttention(q.as<float>(), heads * head_dim, kc.as<void>(), vc.as<void>(), meta, heads,
                      kv_heads, head_dim, out.as<float>());
  };
  run();
  if (!be.Synchronize().ok()) return 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) run();
  if (!be.Synchronize().ok()) return 0;
  return Seconds(t0, Clock::now()) / iters;
}

// Decode attention, every sequence at `context`, on `be`'s KV cache dtype: K+V bytes / s (mean of
// 50 calls after one).
double AttentionBandwidth(Backend& be, int32_t batch, int32_t context, int32_t heads,
                          int32_t kv_heads, int32_t head_dim) {
  std::vector<int32_t> positions(batch, context - 1), qs(batch + 1);
  for (int32_t i = 0; i <= batch; ++i) qs[i] = i;
  const double sec = AttentionSeconds(be, positions, qs, (context + 15) / 16, /*shuffle=*/true,
                                      heads, kv_heads, head_dim, 50);
  const double bytes =
      2.0 * batch * context * kv_heads * head_dim * DTypeBytes(be.kv_cache_dtype());
  return sec > 0 ? bytes / sec : 0;
}

// Prefill attention of one sequence's first `tokens` positions in one chunk (the causal triangle),
// on `be`'s KV cache dtype: FLOP/s counting 4 * head_dim * heads per (query, key) pair (mean of 5).
double PrefillAttentionFlops(Backend& be, int32_t tokens, int32_t heads, int32_t kv_heads,
                             int32_t head_dim) {
  std::vector<int32_t> positions(tokens);
  for (int32_t i = 0; i < tokens; ++i) positions[i] = i;
  const double sec = AttentionSeconds(be, positions, {0, tokens}, (tokens + 15) / 16,
                                      /*shuffle=*/false, heads, kv_heads, head_dim, 5);
  const double pairs = 0.5 * static_cast<double>(tokens) * (tokens + 1);
  return sec > 0 ? 4.0 * head_dim * heads * pairs / sec : 0;
}

// Mean seconds of one bf16-weight Linear y [m, n] = x [m, k] w^T on `be` (20 calls after one).
double LinearSeconds(Backend& be, int32_t m, int32_t n, int32_t k) {
  std::vector<float> wh(static_cast<size_t>(n) * k);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  for (float& v : wh) v = u(rng);
  const WeightRef w = be.UploadWeight(wh.data(), wh.size());
  DeviceBuffer x = RandomBuffer(be, static_cast<size_t>(m) * k, 1.0f, 5);
  DeviceBuffer y(&be, static_cast<size_t>(m) * n * 4);
  if (w.data == nullptr || !x.ok() || !y.ok()) return 0;
  be.Linear(x.as<float>(), w, m, n, k, y.as<float>());
  if (!be.Synchronize().ok()) return 0;
  const int iters = 20;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) be.Linear(x.as<float>(), w, m, n, k, y.as<float>());
  const bool ok = be.Synchronize().ok();
  const double sec = Seconds(t0, Clock::now()) / iters;
  be.Deallocate(const_cast<void*>(w.data));
  return ok ? sec : 0;
}

std::shared_ptr<const LlamaWeights> RandomLlama1B() {
  auto w = std::make_shared<LlamaWeights>();
  ModelConfig& c = w->config;
  c.name = "llama-3.2-1b-shaped";
  c.dim = 2048;
  c.hidden_dim = 8192;
  c.num_layers = 16;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.vocab_size = 128256;
  c.max_seq_len = 2048;
  c.rope_theta = 500000.0f;
  c.rope_style = RopeStyle::kNeox;
  c.shared_classifier = true;
  // One random tile, repeated: filling 1.2 G floats one by one would take longer than the bench.
  std::vector<float> tile(1 << 20);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-0.02f, 0.02f);
  for (float& x : tile) x = d(rng);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (size_t off = 0; off < n; off += tile.size()) {
      std::memcpy(v.data() + off, tile.data(), std::min(tile.size(), n - off) * 4);
    }
  };
  const size_t dim = c.dim;
  fill(w->token_embedding, static_cast<size_t>(c.vocab_size) * dim);
  w->final_norm.assign(dim, 1.0f);
  w->layers.resize(c.num_layers);
  for (auto& L : w->layers) {
    L.attn_norm.assign(dim, 1.0f);
    L.ffn_norm.assign(dim, 1.0f);
    fill(L.wqkv, (static_cast<size_t>(c.q_dim()) + 2 * c.kv_dim()) * dim);
    fill(L.wo, dim * c.q_dim());
    fill(L.w13, 2 * static_cast<size_t>(c.hidden_dim) * dim);
    fill(L.w2, dim * c.hidden_dim);
  }
  return w;
}

// Mean seconds of one decode step of `batch` sequences at position `context` (after 3 warm-ups).
double DecodeStep(ModelRunner& runner, int32_t batch, int32_t context, int iters) {
  const int32_t bs = runner.block_size();
  const int32_t per_seq = (context + 1 + bs - 1) / bs;
  ScheduledBatch b;
  b.max_blocks_per_seq = per_seq;
  for (int32_t s = 0; s < batch; ++s) {
    std::vector<int32_t> blocks(per_seq);
    for (int32_t i = 0; i < per_seq; ++i) blocks[i] = s * per_seq + i;
    const int64_t slot = static_cast<int64_t>(blocks[context / bs]) * bs + context % bs;
    const int32_t token = (s * 7919) % runner.vocab_size();
    b.AddSequence({token}, {context}, {slot}, context + 1, blocks, true);
    // Each sequence a greedy request the executor samples (what crosses the seam: tokens).
    b.request_keys.push_back(static_cast<uint64_t>(s));
    b.output_index.push_back(0);
    SamplingRegistration reg;
    reg.key = static_cast<uint64_t>(s);
    reg.params.temperature = 0.0f;
    reg.token_ids = {token};
    reg.num_prompt_tokens = 1;
    b.new_requests.push_back(std::move(reg));
  }
  for (int i = 0; i < 3; ++i) {
    auto out = runner.Execute(b);
    if (!out.ok()) {
      std::fprintf(stderr, "kernels_bench: decode step: %s\n", out.status().ToString().c_str());
      return 0;
    }
    b.new_requests.clear();  // registered once, as the engine does
  }
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    if (!runner.Execute(b).ok()) return 0;
  }
  const double sec = Seconds(t0, Clock::now()) / iters;
  runner.Release(b.request_keys);
  return sec;
}

// Offline throughput as `tinyserve bench throughput` runs it: `num` requests of `in` random prompt
// tokens and `out` greedy output tokens (ignore_eos) submitted at once to an EngineCore over a
// ModelRunner (bf16 weights and KV cache, CUDA graphs, max_num_seqs 256, 8192 batched tokens, no
// prefix caching). Returns output tokens per second (0 on a failure, said on stderr); *steps and
// *secs say how.
double OfflineThroughput(std::shared_ptr<const LlamaWeights> weights, int32_t num, int32_t in,
                         int32_t out, int64_t* steps, double* secs) {
  CudaBackendOptions o;
  o.weight_dtype = DType::kBFloat16;
  auto be = CreateCudaBackend(o);
  if (!be.ok()) return 0;
  ModelRunnerOptions ro;
  ro.block_size = 16;
  ro.max_num_seqs = 256;
  ro.max_num_batched_tokens = 8192;
  ro.num_kv_blocks = 256 * ((in + out + 15) / 16) + 64;
  auto runner = ModelRunner::Create(weights, std::move(be).value(), ro);
  if (!runner.ok()) {
    std::fprintf(stderr, "kernels_bench: %s\n", runner.status().ToString().c_str());
    return 0;
  }
  EngineConfig ec;
  ec.max_num_seqs = 256;
  ec.max_num_batched_tokens = 8192;
  ec.enable_prefix_caching = false;
  ec.seed = 1;
  SteadyClock clock;
  EngineCore engine(ec, runner->get(), &clock);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> token(3, weights->config.vocab_size - 1);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < num; ++i) {
    EngineRequest req;
    req.request_id = "offline-" + std::to_string(i);
    for (int32_t t = 0; t < in; ++t) req.prompt_token_ids.push_back(token(rng));
    req.sampling.temperature = 0.0f;
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = out;
    req.arrival_ts = clock.Now();
    auto stream = engine.Submit(std::move(req));
    if (!stream.ok()) {
      std::fprintf(stderr, "kernels_bench: %s\n", stream.status().ToString().c_str());
      return 0;
    }
    streams.push_back(*stream);
  }
  const auto t0 = Clock::now();
  *steps = 0;
  while (engine.HasPendingWork()) {
    engine.Step();
    ++*steps;
  }
  *secs = Seconds(t0, Clock::now());
  int64_t tokens = 0;
  for (auto& st : streams) {
    RequestOutput r;
    st->WaitForFinish(&r, 0.0);
    if (r.finish_reason == FinishReason::kError) {
      std::fprintf(stderr, "kernels_bench: offline request failed: %s\n", r.error_message.c_str());
      return 0;
    }
    tokens += static_cast<int64_t>(r.token_ids.size());
  }
  return static_cast<double>(tokens) / *secs;
}

int Main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  StatusOr<int> gpus = ProbeCudaDevices();
  if (!gpus.ok()) {
    std::fprintf(stderr, "kernels_bench: %s\n", gpus.status().ToString().c_str());
    return 1;
  }
  std::printf("device: %s\n", DescribeCudaDevice(0).c_str());
  const double bw = CopyBandwidth();
  StatusOr<double> gemm_rate = MeasureCublasBf16GemmFlops(8192);
  if (!gemm_rate.ok()) {
    std::fprintf(stderr, "kernels_bench: bf16 GEMM rate: %s\n",
                 gemm_rate.status().ToString().c_str());
  }
  const double gemm = gemm_rate.ok() ? *gemm_rate : 0.0;
  std::printf("\n%-44s %12s\n", "measure", "value");
  std::printf("%-44s %9.0f GB/s\n", "device copy bandwidth (read+write)", bw / 1e9);
  std::printf("%-44s %9.1f TFLOP/s\n", "bf16 GEMM 8192^3 (fp32 accumulate)", gemm / 1e12);

  for (DType kv : {DType::kBFloat16, DType::kFloat32, DType::kFp8E4m3}) {
    CudaBackendOptions o;
    o.weight_dtype = DType::kFloat32;
    o.kv_cache_dtype = kv;
    auto be = CreateCudaBackend(o);
    if (!be.ok()) {
      std::fprintf(stderr, "kernels_bench: %s\n", be.status().ToString().c_str());
      return 1;
    }
    std::printf("\ndecode paged attention, %s KV cache, block 16 (K+V bytes read)\n",
                DTypeName(kv));
    std::printf("%-8s %-8s %-9s %-7s %10s %10s\n", "batch", "context", "head_dim", "q:kv", "GB/s",
                "% copy");
    for (int32_t hd : {64, 128}) {
      for (int32_t group : {4, 8}) {
        for (const auto& [batch, ctx] :
             {std::pair{1, 4096}, std::pair{1, 32768}, std::pair{16, 4096}, std::pair{64, 1024},
              std::pair{64, 4096}}) {
          const double g = AttentionBandwidth(**be, batch, ctx, 8 * group, 8, hd);
          std::printf("%-8d %-8d %-9d %-7s %10.0f %9.1f%%\n", batch, ctx, hd,
                      (std::to_string(8 * group) + ":8").c_str(), g / 1e9, 100 * g / bw);
        }
      }
    }
  }

  {
    CudaBackendOptions o;
    o.kv_cache_dtype = DType::kBFloat16;
    auto be = CreateCudaBackend(o);
    if (!be.ok()) return 1;
    std::printf("\nprefill attention, one 4096-token chunk, bf16 KV cache (4 hd heads per pair)\n");
    std::printf("%-9s %-7s %10s %12s\n", "head_dim", "q:kv", "TFLOP/s", "% bf16 GEMM");
    for (int32_t hd : {64, 128}) {
      const double f = PrefillAttentionFlops(**be, 4096, 32, 8, hd);
      std::printf("%-9d %-7s %10.2f %11.1f%%\n", hd, "32:8", f / 1e12,
                  gemm > 0 ? 100 * f / gemm : 0.0);
    }
  }

  std::printf("\nLlama-3.2-1B-shaped decode step, bf16 weights, context 1024\n");
  std::printf("%-6s %-8s %-10s %-9s %10s %10s %8s\n", "batch", "mode", "gemm", "KV", "step ms",
              "floor ms", "x floor");
  std::shared_ptr<const LlamaWeights> weights = RandomLlama1B();
  const ModelConfig config = weights->config;
  const double weight_bytes = 2.0 * static_cast<double>(config.num_parameters());
  struct StepMode {
    bool eager, invariant;
    DType kv;
  };
  for (const StepMode& m :
       {StepMode{true, false, DType::kBFloat16}, StepMode{false, false, DType::kBFloat16},
        StepMode{false, false, DType::kFloat32}, StepMode{false, false, DType::kFp8E4m3},
        StepMode{false, true, DType::kBFloat16}}) {
    CudaBackendOptions o;
    o.weight_dtype = DType::kBFloat16;
    o.batch_invariant = m.invariant;
    o.kv_cache_dtype = m.kv;
    auto be = CreateCudaBackend(o);
    if (!be.ok()) return 1;
    ModelRunnerOptions ro;
    ro.block_size = 16;
    ro.max_num_seqs = 64;
    ro.max_num_batched_tokens = 2048;
    ro.num_kv_blocks = 64 * ((1025 + 15) / 16);
    ro.enforce_eager = m.eager;
    auto runner = ModelRunner::Create(weights, std::move(be).value(), ro);
    if (!runner.ok()) {
      std::fprintf(stderr, "kernels_bench: %s\n", runner.status().ToString().c_str());
      return 1;
    }
    for (int32_t batch : {1, 8, 64}) {
      const double step = DecodeStep(**runner, batch, 1024, quick ? 5 : 20);
      const double kv_bytes = static_cast<double>(batch) * 1025 *
                              ModelRunner::KvBytesPerToken(config, DTypeBytes(m.kv));
      const double floor = (weight_bytes + kv_bytes) / bw;
      std::printf("%-6d %-8s %-10s %-9s %10.3f %10.3f %8.2f\n", batch, m.eager ? "eager" : "graphs",
                  m.invariant ? "invariant" : "cuBLAS", DTypeName(m.kv), step * 1e3, floor * 1e3,
                  step / floor);
    }
  }

  {
    const int32_t num = quick ? 200 : 1000, in = 512, out = 128;
    int64_t steps = 0;
    double secs = 0;
    const double tps = OfflineThroughput(weights, num, in, out, &steps, &secs);
    // The floor: every prompt token's GEMM flops at the bf16 GEMM rate, plus one weight stream per
    // decode wave of 256 sequences and output position, plus every output token's KV reads.
    const double waves = std::ceil(num / 256.0);
    const double kv_reads =
        static_cast<double>(num) * out * (in + out / 2.0) * ModelRunner::KvBytesPerToken(config, 2);
    const double floor_s = (gemm > 0 ? 2.0 * config.num_parameters() * num * in / gemm : 0.0) +
                           (waves * out * weight_bytes + kv_reads) / bw;
    std::printf("\noffline throughput, %d requests x (%d in, %d out), bf16, graphs\n", num, in,
                out);
    std::printf("%-14s %10s %8s %10s %12s\n", "output tok/s", "seconds", "steps", "floor s",
                "of floor");
    std::printf("%-14.0f %10.2f %8lld %10.2f %11.1f%%\n", tps, secs, static_cast<long long>(steps),
                floor_s, secs > 0 ? 100 * floor_s / secs : 0.0);
  }

  std::printf(
      "\nLinear, bf16 weights: default (small-m / mid-m kernels, then cuBLAS), cuBLAS alone, "
      "batch-invariant (fp32 FMA)\n");
  std::printf("%-6s %-6s %-6s %-10s %10s %10s %8s\n", "m", "n", "k", "gemm", "TFLOP/s", "w GB/s",
              "% copy");
  for (const char* mode : {"default", "cuBLAS", "invariant"}) {
    CudaBackendOptions o;
    o.weight_dtype = DType::kBFloat16;
    o.batch_invariant = std::strcmp(mode, "invariant") == 0;
    o.decode_gemm_kernels = std::strcmp(mode, "cuBLAS") != 0;
    auto be = CreateCudaBackend(o);
    if (!be.ok()) return 1;
    for (int32_t n : {2048, 8192}) {
      for (int32_t m : {1, 8, 16, 32, 64, 2048}) {
        const int32_t k = 2048;
        const double sec = LinearSeconds(**be, m, n, k);
        const double flops = 2.0 * m * n * k, wbytes = 2.0 * n * k;
        std::printf("%-6d %-6d %-6d %-10s %10.2f %10.0f %7.1f%%\n", m, n, k, mode,
                    sec > 0 ? flops / sec / 1e12 : 0.0, sec > 0 ? wbytes / sec / 1e9 : 0.0,
                    sec > 0 ? 100 * wbytes / sec / bw : 0.0);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Main(argc, argv); }
