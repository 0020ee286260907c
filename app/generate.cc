#include "app/generate.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "models/model_loader.h"

namespace tinyserve {
CLI::App* AddGenerateCommand(CLI::App& app, GenerateFlags& f) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate completions for prompts (offline)");
  cmd->add_option("--model", f.model,
                  "Hugging Face model directory, .gguf file or llama2.c checkpoint (.bin); "
                  "default $TINYSERVE_MODEL or ../shared/models/stories260K.bin");
  cmd->add_option("--tokenizer", f.tokenizer,
                  "tokenizer.bin of a llama2.c checkpoint; default: found beside the model");
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
  AddEngineFlags(cmd, f.engine);
  return cmd;
}

int RunGenerate(const GenerateFlags& f, const std::string& default_shared_dir) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "tinyserve generate: %s\n", s.message().c_str());
    return 1;
  };
  StatusOr<LoadedModel> model = ResolveAndLoadModel({f.model, f.tokenizer}, default_shared_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig config = model->weights->config;  // by value: the weights move to the runner
  std::fprintf(stderr, "tinyserve: model %s (%s), tokenizer %s\n", model->model_path.c_str(),
               config.Describe().c_str(), model->tokenizer_path.c_str());

  std::vector<std::string> prompts = f.prompts;
  if (prompts.empty()) prompts.push_back("");

  auto runner = CreateModelRunner(f.engine, std::move(model->weights),
                                  static_cast<int64_t>(prompts.size()), &LogLine);
  if (!runner.ok()) return fail(runner.status());
  const EngineConfig engine_config = MakeEngineConfig(f.engine, config);
  SteadyClock clock;
  EngineCore engine(engine_config, runner->get(), &clock);
  StepTotals summary;
  engine.AddObserver(&summary);

  const Tokenizer& tok = *model->tokenizer;
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest req;
    req.request_id = "generate-" + std::to_string(i);
    req.prompt_token_ids = tok.Encode(prompts[i], model->add_bos);
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
