// quant_decode_bench: CPU decode of one model shape stored as F32, Q8_0 and Q4_K GGUF files
// (written by our quantizer from the same random checkpoint), alternating the types round by
// round in one process so that they share the machine's state; reports tokens/s, the ratio to
// F32 and the fraction of the memory floor (measured read bandwidth / bytes of weights read per
// step).
//
//   quant_decode_bench [--preset stories110M] [--types f32,q8_0,q4_k] [--threads 2]
//                      [--batch 1,32] [--rounds 5] [--decode-tokens 32] [--prompt-len 16]
//                      [--model-dir DIR] [--isa best] [--kv-cache-dtype float32|bfloat16]
// --isa avx512vnni,avx2 runs each quantized type on each of the quantized kernels' instruction
// sets (kernels/cpu/quant_gemm.h), alternating with the rest, so they compare in one run.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "decode_loop.h"
#include "kernels/cpu/quant_gemm.h"
#include "models/gguf_model.h"
#include "models/llama2c.h"
#include "models/model_runner.h"
#include "models/presets.h"
#include "weight_bytes.h"

namespace tinyserve {
namespace {

// Best-of-3 read bandwidth (bytes/s) of `threads` threads streaming a 512 MiB buffer.
double ReadBandwidth(int threads) {
  std::vector<float> buf((size_t{1} << 29) / sizeof(float));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i & 7);
  return StreamingReadBandwidth(buf.data(), buf.size(), threads, 3);
}

int Main(int argc, char** argv) {
  CLI::App app{"quant_decode_bench: decode tokens/s of F32 and quantized GGUF files, alternating"};
  std::string preset_name = "stories110M", types = "f32,q8_0,q4_k", batches = "1,32";
  int threads = 2, rounds = 5;
  int32_t decode_tokens = 32, prompt_len = 16;
  std::string model_dir = (std::filesystem::temp_directory_path() / "tinyserve-bench").string();
  std::string isas = "best", kv_dtype = "float32";
  app.add_option("--preset", preset_name, "model shape (models/presets.h)");
  app.add_option("--types", types, "comma-separated: f32, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m");
  app.add_option("--threads", threads, "CPU backend threads");
  app.add_option("--batch", batches, "comma-separated batch sizes");
  app.add_option("--rounds", rounds, "alternating rounds (the median is reported)");
  app.add_option("--decode-tokens", decode_tokens, "timed decode steps per round");
  app.add_option("--prompt-len", prompt_len, "prefilled tokens per sequence");
  app.add_option("--model-dir", model_dir, "where the checkpoint and GGUF files are cached");
  app.add_option("--isa", isas,
                 "comma-separated quantized-kernel instruction sets: best, avx512vnni, avx2, "
                 "portable");
  AddKvCacheDtypeOption(app, &kv_dtype);
  CLI11_PARSE(app, argc, argv);
  const DType kv_cache_dtype = KvCacheDtype(kv_dtype);
  for (const std::string& isa : SplitCommas(isas)) {
    if (!SetQuantDotIsaForTesting(isa.c_str()))
      return std::fprintf(stderr, "--isa %s: not on this CPU\n", isa.c_str()), 1;
  }
  std::filesystem::create_directories(model_dir);
  const auto preset = FindModelPreset(preset_name);
  if (!preset) {
    std::fprintf(stderr, "unknown preset %s\n", preset_name.c_str());
    return 1;
  }
  const std::string ckpt = model_dir + "/" + preset_name + "-seed1.bin";
  if (!LoadLlama2cCheckpoint(ckpt).ok()) {
    const Status s = WriteRandomLlama2cCheckpoint(ckpt, preset->header, 1);
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
  }
  auto fp32 = LoadLlama2cCheckpoint(ckpt);
  if (!fp32.ok()) return std::fprintf(stderr, "%s\n", fp32.status().message().c_str()), 1;
  // A vocabulary of the right size: the pieces do not matter for decode speed.
  GgufLlamaVocab vocab;
  const int32_t nv = (*fp32)->config.vocab_size;
  for (int32_t i = 0; i < nv; ++i) {
    vocab.pieces.push_back(i == 0   ? "<unk>"
                           : i == 1 ? "<s>"
                           : i == 2 ? "</s>"
                                    : "t" + std::to_string(i));
    vocab.scores.push_back(0.0f);
    vocab.token_types.push_back(i == 0 ? 2 : i < 3 ? 3 : 1);
  }
  struct Model {
    std::string type;
    std::string isa;  // the quantized kernels' (QuantDotIsa); "-" for f32
    std::shared_ptr<const LlamaWeights> weights;
    double step_bytes = 0;
  };
  std::vector<Model> models;
  for (const std::string& t : SplitCommas(types)) {
    const auto wt = ParseGgufWeightType(t);
    if (!wt) return std::fprintf(stderr, "unknown type %s\n", t.c_str()), 1;
    const std::string path = model_dir + "/" + preset_name + "-seed1-" + t + ".gguf";
    if (!std::filesystem::exists(path)) {
      const Status s = WriteGgufModel(**fp32, vocab, *wt, path);
      if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
    }
    auto m = LoadGgufModel(path);
    if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().message().c_str()), 1;
    if (t == "f32") {
      models.push_back({t, "-", m->weights, DecodeStepWeightBytes(*m->weights)});
      continue;
    }
    for (const std::string& isa : SplitCommas(isas)) {
      SetQuantDotIsaForTesting(isa.c_str());
      models.push_back({t, QuantDotIsa(), m->weights, DecodeStepWeightBytes(*m->weights)});
    }
  }
  const double bandwidth = ReadBandwidth(threads);
  std::fprintf(stderr, "read bandwidth, %d threads: %.2f GB/s; KV cache %s\n", threads,
               bandwidth / 1e9, kv_dtype.c_str());
  std::printf(
      "| model | type | kernels | weight MB/step | threads | batch | tok/s (median of %d) | x %s | "
      "floor tok/s (batch 1) | of floor |\n|---|---|---|---|---|---|---|---|---|---|\n",
      rounds, models[0].type.c_str());
  for (const std::string& bstr : SplitCommas(batches)) {
    const int32_t batch = std::stoi(bstr);
    std::vector<std::unique_ptr<ModelRunner>> runners;
    for (const Model& m : models) {
      ModelRunnerOptions o;
      o.block_size = 16;
      o.max_model_len = std::min(m.weights->config.max_seq_len, prompt_len + decode_tokens + 16);
      o.num_kv_blocks = batch * ((o.max_model_len + 15) / 16);
      auto r = ModelRunner::Create(m.weights, CreateCpuBackend(threads, kv_cache_dtype), o);
      if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().message().c_str()), 1;
      if (m.isa != "-") SetQuantDotIsaForTesting(m.isa.c_str());
      (void)TimedGreedyDecode(**r, batch, prompt_len, 2);  // warm-up
      runners.push_back(std::move(r).value());
    }
    std::vector<std::vector<double>> tps(models.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < models.size(); ++i) {  // A, B, C, A, B, C, ...
        if (models[i].isa != "-") SetQuantDotIsaForTesting(models[i].isa.c_str());
        auto r = TimedGreedyDecode(*runners[i], batch, prompt_len, decode_tokens);
        if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().message().c_str()), 1;
        tps[i].push_back(*r);
      }
    }
    std::vector<double> median(models.size());
    for (size_t i = 0; i < models.size(); ++i) {
      std::sort(tps[i].begin(), tps[i].end());
      median[i] = tps[i][tps[i].size() / 2];
    }
    for (size_t i = 0; i < models.size(); ++i) {
      const double floor_tps = bandwidth / models[i].step_bytes;
      std::printf(
          "| %s | %s | %s | %.1f | %d | %d | %.1f | %.2fx | %s | %s |\n", preset_name.c_str(),
          models[i].type.c_str(), models[i].isa.c_str(), models[i].step_bytes / 1e6, threads, batch,
          median[i], median[i] / median[0],
          batch == 1 ? std::to_string(floor_tps).substr(0, 6).c_str() : "",
          batch == 1
              ? (std::to_string(static_cast<int>(100 * median[i] / floor_tps + 0.5)) + "%").c_str()
              : "");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Main(argc, argv); }
