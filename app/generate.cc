#include "app/generate.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "app/device_select.h"
#include "models/model_loader.h"
#include "models/model_runner.h"
#include "models/static_batch_generator.h"

namespace tinyserve {

CLI::App* AddGenerateCommand(CLI::App& app, GenerateFlags& f) {
  CLI::App* cmd = app.add_subcommand("generate", "Generate completions for prompts (offline)");
  cmd->add_option("--model", f.model,
                  "llama2.c checkpoint (.bin); default $TINYSERVE_MODEL or "
                  "../shared/models/stories260K.bin");
  cmd->add_option("--tokenizer", f.tokenizer, "tokenizer.bin; default: found beside the model");
  cmd->add_option("--prompt", f.prompts, "a prompt (repeat for several; all run as one batch)");
  cmd->add_option("-n,--max-tokens", f.max_tokens, "max new tokens per prompt")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", f.temperature, "sampling temperature; 0 = greedy")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--threads", f.threads, "CPU threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--block-size", f.block_size, "KV cache block size in tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-kv-blocks", f.num_kv_blocks,
                  "KV cache blocks (0 = enough for all prompts)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", f.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  return cmd;
}

int RunGenerate(const GenerateFlags& f, const std::string& default_shared_dir) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "tinyserve generate: %s\n", s.message().c_str());
    return 1;
  };
  if (f.temperature != 0.0f) {
    return fail(InvalidArgument("only --temperature 0 (greedy) is supported by this build"));
  }
  StatusOr<LoadedModel> model = ResolveAndLoadModel({f.model, f.tokenizer}, default_shared_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& config = model->weights->config;
  std::fprintf(stderr, "tinyserve: model %s (%s), tokenizer %s\n", model->model_path.c_str(),
               config.Describe().c_str(), model->tokenizer_path.c_str());

  std::vector<std::string> prompts = f.prompts;
  if (prompts.empty()) prompts.push_back("");
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : prompts) ids.push_back(model->tokenizer->Encode(p, /*add_bos=*/true));

  const int32_t max_len = config.max_seq_len;
  const int32_t blocks_per_seq = (max_len + f.block_size - 1) / f.block_size;
  ModelRunnerOptions opts;
  opts.block_size = f.block_size;
  opts.num_kv_blocks =
      f.num_kv_blocks > 0 ? f.num_kv_blocks : blocks_per_seq * static_cast<int32_t>(prompts.size());
  StatusOr<std::unique_ptr<Backend>> backend = SelectBackend(f.device, f.threads);
  if (!backend.ok()) return fail(backend.status());
  auto runner = ModelRunner::Create(model->weights, std::move(backend).value(), opts);
  if (!runner.ok()) return fail(runner.status());
  std::fprintf(stderr, "tinyserve: backend %s\n", (*runner)->backend().name().c_str());

  StaticBatchOptions gen;
  gen.stop_token_ids = config.stop_token_ids;
  const auto start = std::chrono::steady_clock::now();
  auto results =
      GenerateStaticBatch(**runner, ids, std::vector<int32_t>(prompts.size(), f.max_tokens), gen);
  if (!results.ok()) return fail(results.status());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  int64_t generated = 0;
  const Tokenizer& tok = *model->tokenizer;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> all = ids[i];
    std::vector<int32_t>& out = (*results)[i].output_ids;
    generated += static_cast<int64_t>(out.size());
    // A stop token ends the text and is not printed (run.c stops before printing BOS).
    if ((*results)[i].stopped) out.pop_back();
    all.insert(all.end(), out.begin(), out.end());
    const std::string text = tok.Decode(all);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    if (i + 1 < prompts.size()) std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  std::fprintf(stderr, "tinyserve: %zu prompts, %lld generated tokens in %.3f s (%.1f tok/s)\n",
               prompts.size(), static_cast<long long>(generated), secs,
               secs > 0 ? static_cast<double>(generated) / secs : 0.0);
  return 0;
}

}  // namespace tinyserve
