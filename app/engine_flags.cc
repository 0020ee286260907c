#include "app/engine_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "app/device_select.h"

namespace tinyserve {

void AddEngineFlags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_option("--threads", f.threads, "CPU threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", f.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "max sequences per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", f.max_num_batched_tokens, "token budget per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", f.block_size, "KV cache block size in tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-kv-blocks", f.num_kv_blocks,
                  "KV cache blocks (0 = max-num-seqs sequences at full length, within 4 GiB)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-model-len", f.max_model_len,
                  "max tokens (prompt + output) per request (0 = the model's context length)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f.enable_prefix_caching,
                "reuse KV blocks of shared prompt prefixes (default on)");
  cmd->add_option("--scheduling-policy", f.scheduling_policy, "fcfs or priority")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  cmd->add_option("--dtype", f.dtype,
                  "weight dtype: float32 or bfloat16 (default bfloat16 on CUDA, float32 on CPU)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--kv-cache-dtype", f.kv_cache_dtype,
                  "KV cache dtype: auto (the weights': bfloat16 on CUDA by default, float32 on the "
                  "CPU), bfloat16, float32, or fp8 (= fp8_e4m3, CUDA only, saturating at +-448: "
                  "the checkpoint's k_scale / v_scale, else 1.0, or --calculate-kv-scales)");
  cmd->add_flag("--calculate-kv-scales", f.calculate_kv_scales,
                "fp8 KV cache: each layer's k_scale / v_scale from the first step's data (max |K| "
                "/ 200, max |V| / 100, as vLLM), instead of the checkpoint's or 1.0");
  cmd->add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                  "CUDA: fraction of device memory for weights, activations and the KV cache "
                  "(sizes the KV cache unless --num-kv-blocks is given)")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--enforce-eager", f.enforce_eager,
                "CUDA: run every step eagerly (no CUDA graphs for decode steps)");
  cmd->add_flag("--batch-invariant", f.batch_invariant,
                "CUDA: GEMMs by a batch-invariant kernel instead of cuBLAS, so that a request's "
                "logits do not depend on the batch (slower; the CPU backend always is)");
  cmd->add_option("--overlap-grammar-masks", f.overlap_grammar_masks,
                  "structured outputs: compute the token masks while the forward pass runs "
                  "(auto = on for CUDA, off for the CPU)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
}

int32_t ChooseNumKvBlocks(const EngineFlags& f, const ModelConfig& config, int64_t max_concurrent) {
  if (f.num_kv_blocks > 0) return f.num_kv_blocks;
  const int32_t max_len = f.max_model_len > 0 ? f.max_model_len : config.max_seq_len;
  const int64_t per_seq = (max_len + f.block_size - 1) / f.block_size;
  // The CPU backend's cache is fp32; a device's is sized from its memory unless this is given.
  const int64_t budget = (int64_t{4} << 30) / (ModelRunner::KvBytesPerToken(config) * f.block_size);
  const int64_t seqs = std::max<int64_t>(1, std::min<int64_t>(max_concurrent, f.max_num_seqs));
  return static_cast<int32_t>(
      std::max<int64_t>(per_seq, std::min<int64_t>(per_seq * seqs, budget)));
}

StatusOr<std::unique_ptr<ModelRunner>> CreateModelRunner(
    const EngineFlags& f, std::shared_ptr<const LlamaWeights> weights, int64_t max_concurrent,
    void (*log)(const std::string&)) {
  const ModelConfig& config = weights->config;
  bool kv_scales = false;  // some layer's fp8 KV-cache scale from the checkpoint is not 1.0
  for (const LlamaLayerWeights& l : weights->layers) {
    kv_scales = kv_scales || l.k_scale != 1.0f || l.v_scale != 1.0f;
  }
  StatusOr<std::unique_ptr<Backend>> backend =
      SelectBackend(f.device, f.threads, f.dtype, f.batch_invariant, f.kv_cache_dtype);
  if (!backend.ok()) return backend.status();
  ModelRunnerOptions opts;
  opts.block_size = f.block_size;
  opts.max_model_len = f.max_model_len;
  opts.max_num_seqs = f.max_num_seqs;
  opts.max_num_batched_tokens = f.max_num_batched_tokens;
  opts.enforce_eager = f.enforce_eager;
  opts.calculate_kv_scales = f.calculate_kv_scales;
  if (f.overlap_grammar_masks != "auto")
    opts.overlap_grammar_masks = f.overlap_grammar_masks == "on";
  opts.gpu_memory_utilization = static_cast<float>(f.gpu_memory_utilization);
  // On the CPU the cache is sized from the flags; on a device, from free memory unless given.
  opts.num_kv_blocks = (*backend)->is_host() || f.num_kv_blocks > 0
                           ? ChooseNumKvBlocks(f, config, max_concurrent)
                           : 0;
  const int32_t max_len = f.max_model_len > 0 ? f.max_model_len : config.max_seq_len;
  auto too_small = [&](int32_t blocks) {
    // As vLLM: one request of the max model length must fit in the cache.
    return InvalidArgument(
        "the KV cache (" + std::to_string(blocks) + " blocks of " +
        std::to_string(opts.block_size) + " tokens) holds fewer tokens than the max model length " +
        std::to_string(max_len) + "; raise --num-kv-blocks or lower --max-model-len");
  };
  if (opts.num_kv_blocks > 0 &&
      static_cast<int64_t>(opts.num_kv_blocks) * opts.block_size < max_len) {
    return too_small(opts.num_kv_blocks);
  }
  auto runner = ModelRunner::Create(std::move(weights), std::move(backend).value(), opts);
  if (!runner.ok()) return runner.status();
  const int32_t blocks = (*runner)->num_kv_blocks();
  if (static_cast<int64_t>(blocks) * opts.block_size < max_len) return too_small(blocks);
  if (log != nullptr) {
    // The CUDA backend's name says which GEMM it runs; the CPU has only the invariant one.
    const bool on_cpu = (*runner)->backend().is_host();
    log("backend " + (*runner)->backend().name() + ", " + std::to_string(blocks) +
        " KV blocks of " + std::to_string(opts.block_size) + " tokens" +
        (on_cpu && f.batch_invariant
             ? "; --batch-invariant: the CPU backend always is batch-invariant"
             : ""));
    // As vLLM: the checkpoint's per-tensor scales serve an fp8 cache only.
    const DType kv = (*runner)->backend().kv_cache_dtype();
    if (kv == DType::kFp8E4m3 && f.calculate_kv_scales) {
      log(std::string("fp8 KV cache with per-tensor scales calculated from the first step") +
          (kv_scales ? " (--calculate-kv-scales; the checkpoint's are replaced)" : ""));
    } else if (kv == DType::kFp8E4m3) {
      log(kv_scales ? "fp8 KV cache with the checkpoint's per-tensor scales (k_scale, v_scale)"
                    : "fp8 KV cache at scale 1.0: the checkpoint has no k_scale / v_scale, which "
                      "may cost accuracy (--calculate-kv-scales takes them from the data)");
    } else if (kv_scales || f.calculate_kv_scales) {
      log(std::string(kv_scales ? "the checkpoint's fp8 KV-cache scales are ignored"
                                : "--calculate-kv-scales is ignored") +
          ": the cache holds " + DTypeName(kv));
    }
  }
  return runner;
}

void LogLine(const std::string& line) { std::fprintf(stderr, "tinyserve: %s\n", line.c_str()); }

EngineConfig MakeEngineConfig(const EngineFlags& f, const ModelConfig& config) {
  EngineConfig c;
  c.max_num_seqs = f.max_num_seqs;
  c.max_num_batched_tokens = f.max_num_batched_tokens;
  c.enable_prefix_caching = f.enable_prefix_caching;
  c.policy =
      f.scheduling_policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  if (!config.stop_token_ids.empty()) {
    c.eos_token_id = config.stop_token_ids.front();
    c.extra_eos_token_ids.assign(config.stop_token_ids.begin() + 1, config.stop_token_ids.end());
  }
  return c;
}

}  // namespace tinyserve
