// `tinyserve bench throughput`: offline, in-process throughput (as `vllm bench throughput`):
// N random prompts (seeded lengths and ids), ignore_eos, all submitted at once; reports
// requests/s and tokens/s.
#pragma once

#include <cstdint>
#include <string>

#include "app/engine_flags.h"

namespace CLI {
class App;
}

namespace tinyserve {

struct BenchThroughputFlags {
  std::string model;   // a llama2.c checkpoint; or
  std::string preset;  // a benchmark shape with random weights (see gen-model)
  std::string
      model_dir;  // where --preset checkpoints are cached (default: $TMPDIR/tinyserve-bench)
  int num_prompts = 256;
  int input_len = 128;
  int output_len = 128;
  double range_ratio = 0.0;  // lengths uniform in [len * (1 - r), len * (1 + r)]
  uint64_t seed = 0;
  EngineFlags engine;
};

CLI::App* AddBenchThroughputCommand(CLI::App& bench, BenchThroughputFlags& flags);
int RunBenchThroughput(const BenchThroughputFlags& flags);

}  // namespace tinyserve
