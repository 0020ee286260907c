// Engine overhead per step: scheduler + block pool + sampling + output handling, with a no-op
// executor, 256 running requests in decode. Prints microseconds per step (target: <= 50).
//
//   engine_step_bench [num_requests=256] [num_steps=1000] [prompt_len=128]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "bench/noop_executor.h"
#include "engine/engine_core.h"
#include "engine/model_executor.h"

namespace tinyserve {
namespace {

int Run(int argc, char** argv) {
  const int32_t num_requests = argc > 1 ? std::atoi(argv[1]) : 256;
  const int32_t num_steps = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int32_t prompt_len = argc > 3 ? std::atoi(argv[3]) : 128;
  const int32_t block_size = 16, vocab = 32;
  const int32_t max_len = prompt_len + num_steps + 16;
  const int32_t num_blocks = num_requests * ((max_len + block_size - 1) / block_size);
  NoopExecutor executor(num_blocks, block_size, vocab, max_len);
  SteadyClock clock;
  EngineConfig config;
  config.max_num_seqs = num_requests;
  config.max_num_batched_tokens = num_requests * prompt_len;
  config.seed = 1;
  EngineCore core(config, &executor, &clock);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < num_requests; ++i) {
    EngineRequest r;
    r.request_id = "bench-";
    r.request_id += std::to_string(i);
    for (int32_t t = 0; t < prompt_len; ++t) r.prompt_token_ids.push_back((i * 7 + t) % vocab);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = num_steps + 8;
    r.sampling.ignore_eos = true;
    streams.push_back(*core.Submit(r));
  }
  core.Step();  // admit and prefill everything
  if (core.scheduler().num_running() != num_requests) {
    std::fprintf(stderr, "expected %d running requests, got %d\n", num_requests,
                 core.scheduler().num_running());
    return 1;
  }
  // Only Step() is timed; the streams are drained between steps, as frontends would do on
  // their own threads.
  double seconds = 0.0;
  std::vector<double> step_us;
  RequestOutput delta;
  for (int32_t s = 0; s < num_steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    core.Step();
    const double dt =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds += dt;
    step_us.push_back(dt * 1e6);
    for (auto& stream : streams) stream->TryNext(&delta);
  }
  std::sort(step_us.begin(), step_us.end());
  std::printf(
      "engine_step_bench: %d running requests in decode, %d steps (context %d..%d tokens, block "
      "size %d): %.2f us/step (median %.2f, p99 %.2f)\n",
      num_requests, num_steps, prompt_len + 1, prompt_len + num_steps, block_size,
      seconds * 1e6 / num_steps, step_us[step_us.size() / 2], step_us[step_us.size() * 99 / 100]);
  core.Stop();
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Run(argc, argv); }
