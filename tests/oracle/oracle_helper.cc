// oracle_helper: tinyserve's side of the llama.cpp oracle suite (tests/oracle/oracle.mjs).
//
//   oracle_helper logprobs --model M --prompts FILE [--gen N]
//     FILE is a JSON array of token-id arrays. For each prompt: one prefill of the whole prompt
//     (its next-token logits at every position, as prompt logprobs), then N greedy decode steps,
//     one token at a time over the paged KV cache. Prints one JSON object: vocab_size and per
//     prompt the tokens (prompt, then the greedy ones), num_prompt, and logprobs: the
//     log-softmax of the logits after each of those tokens (fp32 CPU backend, 1 thread).
//   oracle_helper tokenize --model M --texts FILE
//     FILE is a JSON array of strings; prints the ids of each (no BOS, special-token text
//     encoded as text) with the tokenizer of M (a GGUF file, vocab-only files too).
// Errors go to stderr with exit status 1.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/backend.h"
#include "models/model_loader.h"
#include "models/model_runner.h"
#include "models/tokenizer/gguf_tokenizer.h"

namespace tinyserve {
namespace {

constexpr int32_t kBlockSize = 16;

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return InvalidArgument(path + ": not a JSON array");
  return j;
}

std::vector<double> LogSoftmax(const float* logits, int32_t n) {
  const float max = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_sum = std::log(sum) + max;
  std::vector<double> out(n);
  for (int32_t i = 0; i < n; ++i) out[i] = logits[i] - log_sum;
  return out;
}

int32_t ArgMax(const float* logits, int32_t n) {
  return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
}

// Rounded to 6 decimals: plenty for tolerances of 1e-4 and up, and a third of the JSON.
nlohmann::json Rounded(const std::vector<double>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (double x : v) a.push_back(std::round(x * 1e6) / 1e6);
  return a;
}

Status Logprobs(const std::string& model_path, const std::string& prompts_path, int32_t num_gen) {
  StatusOr<nlohmann::json> prompts = ReadJsonFile(prompts_path);
  if (!prompts.ok()) return prompts.status();
  StatusOr<LoadedModel> model = ResolveAndLoadModel({model_path, ""}, "");
  if (!model.ok()) return model.status();
  const int32_t vocab = model->weights->config.vocab_size;
  size_t longest = 0;
  for (const auto& p : *prompts) longest = std::max(longest, p.size());
  const int32_t max_len = static_cast<int32_t>(longest) + num_gen + 1;
  const int32_t num_blocks = (max_len + kBlockSize - 1) / kBlockSize;
  ModelRunnerOptions o;
  o.block_size = kBlockSize;
  o.num_kv_blocks = num_blocks;
  o.max_model_len = num_blocks * kBlockSize;
  o.max_num_seqs = 1;
  o.max_num_batched_tokens = std::max(max_len, 16);
  StatusOr<std::unique_ptr<ModelRunner>> runner =
      ModelRunner::Create(model->weights, CreateCpuBackend(1), o);
  if (!runner.ok()) return runner.status();
  std::vector<int32_t> blocks(num_blocks);
  for (int32_t b = 0; b < num_blocks; ++b) blocks[b] = num_blocks - 1 - b;  // not the identity
  auto slot = [&](int32_t pos) {
    return static_cast<int64_t>(blocks[pos / kBlockSize]) * kBlockSize + pos % kBlockSize;
  };
  nlohmann::json results = nlohmann::json::array();
  for (const auto& p : *prompts) {
    std::vector<int32_t> tokens = p.get<std::vector<int32_t>>();
    const int32_t n = static_cast<int32_t>(tokens.size());
    if (n == 0) return InvalidArgument(prompts_path + ": an empty prompt");
    for (int32_t t : tokens) {
      if (t < 0 || t >= vocab) {
        return InvalidArgument(prompts_path + ": token " + std::to_string(t) +
                               " is outside the vocabulary of " + std::to_string(vocab));
      }
    }
    nlohmann::json rows = nlohmann::json::array();
    ScheduledBatch prefill;
    prefill.max_blocks_per_seq = num_blocks;
    std::vector<int32_t> positions(n);
    std::vector<int64_t> slots(n);
    for (int32_t i = 0; i < n; ++i) {
      positions[i] = i;
      slots[i] = slot(i);
    }
    prefill.AddSequence(tokens, positions, slots, n, blocks, true, 0, n);
    StatusOr<LogitsOutput> out = (*runner)->ComputeLogits(prefill);
    if (!out.ok()) return out.status();
    for (int32_t i = 0; i < n; ++i) rows.push_back(Rounded(LogSoftmax(out->prompt_row(i), vocab)));
    int32_t next = ArgMax(out->row(0), vocab);
    for (int32_t g = 0; g < num_gen; ++g) {
      const int32_t pos = static_cast<int32_t>(tokens.size());
      tokens.push_back(next);
      ScheduledBatch step;
      step.max_blocks_per_seq = num_blocks;
      step.AddSequence({next}, {pos}, {slot(pos)}, pos + 1, blocks, true);
      StatusOr<LogitsOutput> d = (*runner)->ComputeLogits(step);
      if (!d.ok()) return d.status();
      rows.push_back(Rounded(LogSoftmax(d->row(0), vocab)));
      next = ArgMax(d->row(0), vocab);
    }
    results.push_back({{"tokens", tokens}, {"num_prompt", n}, {"logprobs", rows}});
  }
  nlohmann::json doc = {{"vocab_size", vocab}, {"results", results}};
  std::printf("%s\n", doc.dump().c_str());
  return Status::Ok();
}

Status Tokenize(const std::string& model_path, const std::string& texts_path) {
  StatusOr<nlohmann::json> texts = ReadJsonFile(texts_path);
  if (!texts.ok()) return texts.status();
  StatusOr<std::unique_ptr<Tokenizer>> tok = LoadGgufTokenizer(model_path);
  if (!tok.ok()) return tok.status();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : *texts) out.push_back((*tok)->Encode(t.get<std::string>(), false));
  std::printf("%s\n", out.dump().c_str());
  return Status::Ok();
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) {
  CLI::App app("tinyserve's side of the llama.cpp oracle suite");
  app.require_subcommand(1);
  std::string model, input;
  int32_t num_gen = 0;
  CLI::App* lp = app.add_subcommand("logprobs", "next-token log-probabilities at every position");
  lp->add_option("--model", model)->required();
  lp->add_option("--prompts", input, "JSON array of token-id arrays")->required();
  lp->add_option("--gen", num_gen, "greedy tokens after each prompt")->check(CLI::Range(0, 4096));
  CLI::App* tk = app.add_subcommand("tokenize", "token ids of texts");
  tk->add_option("--model", model)->required();
  tk->add_option("--texts", input, "JSON array of strings")->required();
  CLI11_PARSE(app, argc, argv);
  const tinyserve::Status s =
      lp->parsed() ? tinyserve::Logprobs(model, input, num_gen) : tinyserve::Tokenize(model, input);
  if (!s.ok()) {
    std::fprintf(stderr, "oracle_helper: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
