#include "app/bench_throughput.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "models/llama2c.h"
#include "models/model_loader.h"
#include "models/presets.h"

namespace tinyserve {
namespace {

StatusOr<std::string> ResolveBenchModel(const BenchThroughputFlags& f) {
  if (!f.model.empty()) return f.model;
  const auto preset = FindModelPreset(f.preset);
  if (!preset) return InvalidArgument("give --model PATH or --preset NAME (e.g. stories15M)");
  const std::string dir =
      f.model_dir.empty() ? (std::filesystem::temp_directory_path() / "tinyserve-bench").string()
                          : f.model_dir;
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + preset->name + "-seed1.bin";
  if (!LoadLlama2cCheckpoint(path).ok()) {
    LogLine("writing " + path + " (random weights, seed 1)");
    TS_RETURN_IF_ERROR(WriteRandomLlama2cCheckpoint(path, preset->header, 1));
  }
  return path;
}

}  // namespace

CLI::App* AddBenchThroughputCommand(CLI::App& bench, BenchThroughputFlags& f) {
  CLI::App* cmd = bench.add_subcommand("throughput", "Offline throughput on random prompts");
  cmd->add_option("--model", f.model,
                  "a Hugging Face directory, a GGUF file or a llama2.c checkpoint (.bin)");
  cmd->add_option("--preset", f.preset, "benchmark shape with random weights: stories15M, ...");
  cmd->add_option("--model-dir", f.model_dir, "cache folder for --preset checkpoints");
  cmd->add_option("--num-prompts", f.num_prompts, "number of requests")->check(CLI::PositiveNumber);
  cmd->add_option("--input-len", f.input_len, "prompt tokens")->check(CLI::PositiveNumber);
  cmd->add_option("--output-len", f.output_len, "output tokens (ignore_eos)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--range-ratio", f.range_ratio, "length spread: [len*(1-r), len*(1+r)]")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", f.seed, "seed for prompt lengths and ids");
  AddEngineFlags(cmd, f.engine);
  return cmd;
}

int RunBenchThroughput(const BenchThroughputFlags& f) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "tinyserve bench throughput: %s\n", s.message().c_str());
    return 1;
  };
  StatusOr<std::string> path = ResolveBenchModel(f);
  if (!path.ok()) return fail(path.status());
  auto weights = LoadModelWeights(*path);
  if (!weights.ok()) return fail(weights.status());
  const ModelConfig config = (*weights)->config;  // by value: the weights move to the runner
  LogLine("model " + *path + " (" + config.Describe() + ")");
  auto runner = CreateModelRunner(f.engine, std::move(*weights), f.num_prompts, &LogLine);
  if (!runner.ok()) return fail(runner.status());
  SteadyClock clock;
  EngineCore engine(MakeEngineConfig(f.engine, config), runner->get(), &clock);
  StepTotals counter;
  engine.AddObserver(&counter);

  const int32_t max_len = engine.max_model_len();
  std::mt19937_64 rng(f.seed);
  auto length = [&](int len) {
    const int lo = std::max(1, static_cast<int>(len * (1.0 - f.range_ratio)));
    const int hi = std::max(lo, static_cast<int>(len * (1.0 + f.range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::uniform_int_distribution<int32_t> token(3, config.vocab_size - 1);
  std::vector<std::shared_ptr<RequestStream>> streams;
  int64_t prompt_tokens = 0;
  for (int i = 0; i < f.num_prompts; ++i) {
    EngineRequest req;
    req.request_id = "bench-" + std::to_string(i);
    const int32_t in = std::min(length(f.input_len), max_len - 1);
    for (int32_t t = 0; t < in; ++t) req.prompt_token_ids.push_back(token(rng));
    req.sampling.temperature = 0.0f;
    req.sampling.ignore_eos = true;
    req.sampling.max_tokens = std::max(1, std::min(length(f.output_len), max_len - in));
    req.arrival_ts = clock.Now();
    prompt_tokens += in;
    auto stream = engine.Submit(std::move(req));
    if (!stream.ok()) return fail(stream.status());
    streams.push_back(*stream);
  }
  const auto start = std::chrono::steady_clock::now();
  while (engine.HasPendingWork()) engine.Step();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t output_tokens = 0;
  for (auto& s : streams) {
    RequestOutput out;
    s->WaitForFinish(&out, 0.0);
    if (out.finish_reason == FinishReason::kError) {
      return fail(Internal("a request failed: " + out.error_message));
    }
    output_tokens += static_cast<int64_t>(out.token_ids.size());
  }
  std::printf(
      "Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n"
      "  %d requests, %lld prompt + %lld output tokens in %.3f s, %lld steps, %lld preemptions\n",
      f.num_prompts / secs, static_cast<double>(prompt_tokens + output_tokens) / secs,
      static_cast<double>(output_tokens) / secs, f.num_prompts,
      static_cast<long long>(prompt_tokens), static_cast<long long>(output_tokens), secs,
      static_cast<long long>(counter.steps), static_cast<long long>(counter.preemptions));
  return 0;
}

}  // namespace tinyserve
