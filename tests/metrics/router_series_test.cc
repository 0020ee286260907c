// The five series that routers read from a replica (issue 22): llm-d's / the Gateway API Inference
// Extension's endpoint picker scrapes vllm:num_requests_waiting, vllm:num_requests_running,
// vllm:kv_cache_usage_perc, vllm:lora_requests_info and vllm:cache_config_info{block_size,
// num_gpu_blocks} (kubernetes-sigs/gateway-api-inference-extension,
// docs/proposals/003-model-server-protocol/README.md). A real EngineCore with the fake executor
// and a small KV cache (prefix hits, preemptions): after every step the rendered text says exactly
// what the engine's scheduler and block pool hold after that step, one series each.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"
#include "tests/metrics/metrics_test_util.h"
#include "tests/metrics/prometheus_text.h"

namespace tinyserve::testing {
namespace {

int CountSamples(const ParsedText& text, const std::string& name) {
  int n = 0;
  for (const TextSample& s : text.samples) n += s.name == name;
  return n;
}

TEST(RouterSeriesTest, GaugesAreTheLastCompletedStepsState) {
  constexpr int32_t kBlocks = 12, kBlockSize = 4;
  FakeClock clock;
  FakeExecutor executor(kBlocks, kBlockSize, /*vocab=*/32, /*max_model_len=*/64, &clock, 0.001);
  MetricsConfig config = TestMetricsConfig();
  config.block_size = kBlockSize;
  config.num_gpu_blocks = kBlocks;
  PrometheusMetrics metrics(config);
  MetricsObserver observer(&metrics);
  EngineConfig engine_config;
  engine_config.max_num_batched_tokens = 16;
  engine_config.max_num_seqs = 4;
  EngineCore core(engine_config, &executor, &clock);
  core.AddObserver(&observer);

  // Eight requests sharing a 12-token prefix, each wanting 10 more tokens: 6 blocks each at the
  // end, in a pool of 12, so they preempt each other and hit each other's prefix blocks.
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt = Prompt(12, 7);
    prompt.push_back(1 + i);
    streams.push_back(SubmitOk(core, MakeEngineRequest(Name("r", i), prompt, 10)));
  }
  double last_lora_ts = 0.0;
  int max_running = 0, max_waiting = 0, steps = 0;
  bool saw_partial_usage = false;
  while (core.HasPendingWork() && steps < 10000) {
    if (!core.Step()) continue;
    ++steps;
    const ParsedText text = ParsePrometheusText(metrics.Render());
    const Scheduler& s = core.scheduler();
    SCOPED_TRACE("step " + std::to_string(steps));
    for (const char* name :
         {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:lora_requests_info", "vllm:cache_config_info"}) {
      EXPECT_EQ(CountSamples(text, name), 1) << name;  // "the first series scraped wins"
    }
    EXPECT_EQ(text.Value("vllm:num_requests_running"), s.num_running());
    EXPECT_EQ(text.Value("vllm:num_requests_waiting"), s.num_waiting());
    EXPECT_DOUBLE_EQ(text.Value("vllm:kv_cache_usage_perc"), s.kv_cache().pool().usage());
    const double lora = text.Value(
        "vllm:lora_requests_info",
        {{"max_lora", "0"}, {"running_lora_adapters", ""}, {"waiting_lora_adapters", ""}});
    EXPECT_GE(lora, last_lora_ts);
    last_lora_ts = lora;
    EXPECT_EQ(text.Value("vllm:cache_config_info", {{"block_size", std::to_string(kBlockSize)},
                                                    {"num_gpu_blocks", std::to_string(kBlocks)}}),
              1.0);
    max_running = std::max(max_running, s.num_running());
    max_waiting = std::max(max_waiting, s.num_waiting());
    const double usage = s.kv_cache().pool().usage();
    saw_partial_usage |= usage > 0.0 && usage < 1.0;
  }
  ASSERT_FALSE(core.HasPendingWork());
  // The run exercised what the gauges are for.
  EXPECT_GT(max_running, 1);
  EXPECT_GT(max_waiting, 0);
  EXPECT_TRUE(saw_partial_usage);
  EXPECT_GT(metrics.num_preemptions.Value(), 0.0);
  EXPECT_GT(metrics.prefix_cache_hits.Value(), 0.0);
  // Idle: nothing running or waiting, every block free or cached.
  const ParsedText idle = ParsePrometheusText(metrics.Render());
  EXPECT_EQ(idle.Value("vllm:num_requests_running"), 0.0);
  EXPECT_EQ(idle.Value("vllm:num_requests_waiting"), 0.0);
  EXPECT_EQ(idle.Value("vllm:kv_cache_usage_perc"), 0.0);
}

}  // namespace
}  // namespace tinyserve::testing
