// The engine and device flags shared by `generate`, `serve` and `bench throughput` (vLLM's
// spellings), and building the model runner + engine configuration from them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/engine_core.h"
#include "models/llama_weights.h"
#include "models/model_runner.h"

namespace CLI {
class App;
}

namespace tinyserve {

struct EngineFlags {
  int threads = 0;
  std::string device = "auto";
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int num_kv_blocks = 0;  // 0: max_num_seqs sequences at full length, within 4 GiB of KV cache
  int max_model_len = 0;  // 0: the model's context length
  bool enable_prefix_caching = true;
  std::string scheduling_policy = "fcfs";
  std::string dtype;  // "": bfloat16 on CUDA, float32 on the CPU
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  // CUDA: our own batch-invariant GEMM instead of cuBLAS (see CudaBackendOptions). The CPU backend
  // is always batch-invariant; there the flag changes nothing but the log line.
  bool batch_invariant = false;
  bool calculate_kv_scales = false;
  std::string kv_cache_dtype = "auto";  // auto | bfloat16 | float32 | fp8 | fp8_e4m3 (CUDA)
  // Structured outputs: compute the grammar masks while the forward pass runs. "auto": the
  // backend's default (ModelRunnerOptions::overlap_grammar_masks), "on", "off".
  std::string overlap_grammar_masks = "auto";
};

// Adds --threads, --device, --max-num-seqs, --max-num-batched-tokens, --block-size,
// --num-kv-blocks, --max-model-len, --[no-]enable-prefix-caching, --scheduling-policy, --dtype,
// --kv-cache-dtype,
// --gpu-memory-utilization, --enforce-eager, --batch-invariant, --overlap-grammar-masks.
void AddEngineFlags(CLI::App* cmd, EngineFlags& flags);

// The number of KV blocks to allocate on the CPU: --num-kv-blocks, else enough for
// `max_concurrent` sequences of the max model length (at least one), capped at 4 GiB of cache.
// (On CUDA, without --num-kv-blocks, the runner sizes the cache by --gpu-memory-utilization.)
int32_t ChooseNumKvBlocks(const EngineFlags& flags, const ModelConfig& config,
                          int64_t max_concurrent);

// Builds the model runner on the chosen device. Returns an error (vLLM's wording) if one request
// of the max model length would not fit in the KV cache. `log` receives one line about the backend.
StatusOr<std::unique_ptr<ModelRunner>> CreateModelRunner(
    const EngineFlags& flags, std::shared_ptr<const LlamaWeights> weights, int64_t max_concurrent,
    void (*log)(const std::string&));

// The engine configuration the flags describe; EOS is the model's first stop token.
EngineConfig MakeEngineConfig(const EngineFlags& flags, const ModelConfig& config);

// Writes "tinyserve: LINE" to stderr: the commands' one log format.
void LogLine(const std::string& line);

// Sums the engine's per-step stats for the commands' summary lines. Engine thread only.
class StepTotals final : public EngineObserver {
 public:
  void OnRequestEvent(const RequestRecord&, const RequestEvent&) override {}
  bool wants_every_token_event() const override { return false; }
  void OnStep(const SchedulerStats& s) override {
    ++steps;
    preemptions += s.num_preemptions;
    prompt_tokens += s.num_prompt_tokens;
    generation_tokens += s.num_generation_tokens;
    cache_queries += s.prefix_cache_queries;
    cache_hits += s.prefix_cache_hits;
  }
  int64_t steps = 0, preemptions = 0, prompt_tokens = 0, generation_tokens = 0, cache_queries = 0,
          cache_hits = 0;
};

}  // namespace tinyserve
