#include "app/generate.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "app/device_select.h"
#include "engine/clock.h"
#include "engine/engine_core.h"
#include "models/model_loader.h"
#include "models/model_runner.h"

namespace tinyserve {
namespace {

// Sums what the summary line reports, from the engine's per-step stats.
class SummaryObserver final : public EngineObserver {
 public:
  void OnRequestEvent(const Request&, const RequestEvent&) override {}
  void OnStep(const SchedulerStats& s) override {
    preemptions += s.num_preemptions;
    prompt_tokens += s.num_prompt_tokens;
    generation_tokens += s.num_generation_tokens;
    cache_queries += s.prefix_cache_queries;
    cache_hits += s.prefix_cache_hits;
    ++steps;
  }
  int64_t preemptions = 0, prompt_tokens = 0, generation_tokens = 0, cache_queries = 0,
          cache_hits = 0, steps = 0;
};

}  // namespace

CLI::App* AddGenerateCommand(CLI::App& app, GenerateFlags& f) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate completions for prompts (offline)");
  cmd->add_option("--model", f.model,
                  "llama2.c checkpoint (.bin); default $TINYSERVE_MODEL or "
                  "../shared/models/stories260K.bin");
  cmd->add_option("--tokenizer", f.tokenizer, "tokenizer.bin; default: found beside the model");
  cmd->add_option("--prompt", f.prompts, "a prompt (repeat for several; all run together)");
  cmd->add_option("-n,--max-tokens", f.max_tokens, "max new tokens per prompt")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", f.temperature, "sampling temperature; 0 = greedy")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", f.top_p, "nucleus sampling mass, (0, 1]");
  cmd->add_option("--top-k", f.top_k, "keep the k most likely tokens (0 = off)");
  cmd->add_option("--min-p", f.min_p, "drop tokens below min_p x the top probability");
  cmd->add_option("--seed", f.seed, "sampling seed (prompt i uses seed + i)");
  cmd->add_flag("--ignore-eos", f.ignore_eos, "do not stop at the model's end token");
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
                  "KV cache blocks (0 = enough for every prompt at full length)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-model-len", f.max_model_len,
                  "max tokens per request, prompt + output (0 = the model's context length)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f.enable_prefix_caching,
                "reuse KV blocks of shared prompt prefixes (default on)");
  cmd->add_option("--scheduling-policy", f.scheduling_policy, "fcfs or priority")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  return cmd;
}

int RunGenerate(const GenerateFlags& f, const std::string& default_shared_dir) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "tinyserve generate: %s\n", s.message().c_str());
    return 1;
  };
  StatusOr<LoadedModel> model = ResolveAndLoadModel({f.model, f.tokenizer}, default_shared_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& config = model->weights->config;
  std::fprintf(stderr, "tinyserve: model %s (%s), tokenizer %s\n", model->model_path.c_str(),
               config.Describe().c_str(), model->tokenizer_path.c_str());

  std::vector<std::string> prompts = f.prompts;
  if (prompts.empty()) prompts.push_back("");

  ModelRunnerOptions opts;
  opts.block_size = f.block_size;
  opts.max_model_len = f.max_model_len;
  const int32_t max_len = f.max_model_len > 0 ? f.max_model_len : config.max_seq_len;
  opts.num_kv_blocks = f.num_kv_blocks;
  if (opts.num_kv_blocks == 0) {
    const int64_t per_seq = (max_len + f.block_size - 1) / f.block_size;
    const int64_t budget =
        (int64_t{4} << 30) / (ModelRunner::KvBytesPerToken(config) * f.block_size);
    const int64_t seqs = std::min<int64_t>(static_cast<int64_t>(prompts.size()), f.max_num_seqs);
    opts.num_kv_blocks =
        static_cast<int32_t>(std::max<int64_t>(per_seq, std::min<int64_t>(per_seq * seqs, budget)));
  }
  if (static_cast<int64_t>(opts.num_kv_blocks) * opts.block_size < max_len) {
    // As vLLM: one request of the max model length must fit in the cache.
    return fail(InvalidArgument(
        "the KV cache (" + std::to_string(opts.num_kv_blocks) + " blocks of " +
        std::to_string(opts.block_size) + " tokens) holds fewer tokens than the max model length " +
        std::to_string(max_len) + "; raise --num-kv-blocks or lower --max-model-len"));
  }
  StatusOr<std::unique_ptr<Backend>> backend = SelectBackend(f.device, f.threads);
  if (!backend.ok()) return fail(backend.status());
  auto runner = ModelRunner::Create(model->weights, std::move(backend).value(), opts);
  if (!runner.ok()) return fail(runner.status());
  std::fprintf(stderr, "tinyserve: backend %s, %d KV blocks of %d tokens\n",
               (*runner)->backend().name().c_str(), opts.num_kv_blocks, opts.block_size);

  EngineConfig engine_config;
  engine_config.max_num_seqs = f.max_num_seqs;
  engine_config.max_num_batched_tokens = f.max_num_batched_tokens;
  engine_config.enable_prefix_caching = f.enable_prefix_caching;
  engine_config.policy =
      f.scheduling_policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  if (!config.stop_token_ids.empty()) engine_config.eos_token_id = config.stop_token_ids.front();
  SteadyClock clock;
  EngineCore engine(engine_config, runner->get(), &clock);
  SummaryObserver summary;
  engine.AddObserver(&summary);

  const Tokenizer& tok = *model->tokenizer;
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest req;
    req.request_id = "generate-" + std::to_string(i);
    req.prompt_token_ids = tok.Encode(prompts[i], /*add_bos=*/true);
    req.arrival_ts = clock.Now();
    SamplingParams& p = req.sampling;
    p.max_tokens = f.max_tokens;
    p.temperature = f.temperature;
    p.top_p = f.top_p;
    p.top_k = f.top_k;
    p.min_p = f.min_p;
    p.ignore_eos = f.ignore_eos;
    if (f.seed) p.seed = *f.seed + i;
    // Generation also stops at the model's context length.
    p.max_tokens = std::max(
        1, std::min<int32_t>(p.max_tokens, engine.max_model_len() -
                                               static_cast<int32_t>(req.prompt_token_ids.size())));
    prompt_ids.push_back(req.prompt_token_ids);
    auto stream = engine.Submit(std::move(req));
    if (!stream.ok()) return fail(stream.status());
    streams.push_back(*stream);
  }

  const auto start = std::chrono::steady_clock::now();
  while (engine.HasPendingWork()) engine.Step();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (size_t i = 0; i < streams.size(); ++i) {
    RequestOutput out;
    streams[i]->WaitForFinish(&out, 0.0);
    if (out.finish_reason == FinishReason::kError) {
      return fail(Internal("request " + std::to_string(i) + " failed: " + out.error_message));
    }
    std::vector<int32_t> all = prompt_ids[i];
    all.insert(all.end(), out.token_ids.begin(), out.token_ids.end());
    const std::string text = tok.Decode(all);  // special tokens (BOS, EOS) decode to nothing
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    if (i + 1 < streams.size()) std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  const double hit_rate = summary.cache_queries > 0
                              ? 100.0 * static_cast<double>(summary.cache_hits) /
                                    static_cast<double>(summary.cache_queries)
                              : 0.0;
  std::fprintf(stderr,
               "tinyserve: %zu requests, %lld prompt + %lld generated tokens, %lld steps, "
               "%lld preemptions, prefix-cache hit rate %.1f%%, %.3f s (%.1f generated tok/s)\n",
               streams.size(), static_cast<long long>(summary.prompt_tokens),
               static_cast<long long>(summary.generation_tokens),
               static_cast<long long>(summary.steps), static_cast<long long>(summary.preemptions),
               hit_rate, secs,
               secs > 0 ? static_cast<double>(summary.generation_tokens) / secs : 0.0);
  return 0;
}

}  // namespace tinyserve
