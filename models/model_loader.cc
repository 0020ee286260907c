#include "models/model_loader.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "models/gguf_model.h"
#include "models/hf_model.h"
#include "models/llama2c.h"
#include "models/tokenizer/hf_tokenizer.h"
#include "models/tokenizer/llama2c_tokenizer.h"

namespace tinyserve {
namespace fs = std::filesystem;

namespace {

StatusOr<std::string> FindModelPath(const ModelSource& source, const std::string& shared_dir) {
  if (!source.model_path.empty()) return source.model_path;
  if (const char* env = std::getenv("TINYSERVE_MODEL"); env != nullptr && *env != '\0') {
    return std::string(env);
  }
  std::error_code ec;
  for (const std::string& dir : {std::string("../shared"), shared_dir}) {
    const fs::path p = fs::path(dir) / "models" / "stories260K.bin";
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return NotFound(
      "no model given: pass --model PATH (a Hugging Face model directory, a .gguf file, or a "
      "llama2.c .bin checkpoint with its tokenizer beside it or --tokenizer PATH), or set "
      "TINYSERVE_MODEL; the default, "
      "../shared/models/stories260K.bin, "
      "was not found. stories260K.bin and tok512.bin come from Hugging Face karpathy/tinyllamas.");
}

Status CheckTokenizerFits(const std::string& path, const Tokenizer& tok, int32_t model_vocab) {
  if (tok.vocab_size() > model_vocab) {
    return InvalidArgument(path + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                           " tokens, more than the model's vocabulary of " +
                           std::to_string(model_vocab));
  }
  return Status::Ok();
}

StatusOr<LoadedModel> LoadHfDirectory(const std::string& dir) {
  StatusOr<std::shared_ptr<LlamaWeights>> weights = LoadHfModel(dir);
  if (!weights.ok()) return weights.status();
  StatusOr<HfTokenizerFiles> files = LoadHfTokenizer(dir);
  if (!files.ok()) return files.status();
  ModelConfig& c = (*weights)->config;
  TS_RETURN_IF_ERROR(CheckTokenizerFits(dir, *files->tokenizer, c.vocab_size));
  if (files->bos_token_id >= 0) c.bos_token_id = files->bos_token_id;
  for (int32_t id : files->eos_token_ids) {
    if (std::find(c.stop_token_ids.begin(), c.stop_token_ids.end(), id) == c.stop_token_ids.end()) {
      c.stop_token_ids.push_back(id);
    }
  }
  LoadedModel out;
  out.model_path = dir;
  out.tokenizer_path = (fs::path(dir) / "tokenizer.json").string();
  out.format = ModelFormat::kHfDirectory;
  out.weights = std::move(weights).value();
  out.add_bos = files->add_bos_token;
  out.chat_template = files->chat_template_name;
  out.chat_template_error = files->chat_template_error;
  out.tokenizer = std::move(files->tokenizer);
  return out;
}

StatusOr<LoadedModel> LoadGguf(const std::string& path) {
  StatusOr<GgufModel> m = LoadGgufModel(path);
  if (!m.ok()) return m.status();
  LoadedModel out;
  out.model_path = path;
  out.tokenizer_path = path;
  out.format = ModelFormat::kGguf;
  if (!m->chat_template.empty()) {
    StatusOr<std::string> name =
        RecognizeHfChatTemplate(m->chat_template, path + " (tokenizer.chat_template)");
    if (name.ok()) {
      out.chat_template = *name;
    } else {
      out.chat_template_error = name.status().message();
    }
  }
  out.add_bos = m->tokenizer->add_bos_by_default();
  out.weights = std::move(m->weights);
  out.tokenizer = std::move(m->tokenizer);
  return out;
}

}  // namespace

StatusOr<std::shared_ptr<const LlamaWeights>> LoadModelWeights(const std::string& path) {
  std::error_code dir_ec;
  if (fs::is_directory(path, dir_ec)) {
    if (!IsHfModelDir(path)) {
      return NotFound(path + ": not a Hugging Face model directory (no config.json)");
    }
    StatusOr<std::shared_ptr<LlamaWeights>> w = LoadHfModel(path);
    if (!w.ok()) return w.status();
    return std::shared_ptr<const LlamaWeights>(std::move(w).value());
  }
  if (IsGgufFile(path)) {
    StatusOr<GgufModel> m = LoadGgufModel(path);
    if (!m.ok()) return m.status();
    return m->weights;
  }
  return LoadLlama2cCheckpoint(path);
}

StatusOr<LoadedModel> ResolveAndLoadModel(const ModelSource& source,
                                          const std::string& default_shared_dir) {
  StatusOr<std::string> path = FindModelPath(source, default_shared_dir);
  if (!path.ok()) return path.status();
  std::error_code dir_ec;
  const bool is_dir = fs::is_directory(*path, dir_ec);
  if (is_dir || IsGgufFile(*path)) {
    if (!source.tokenizer_path.empty()) {
      return InvalidArgument("--tokenizer is only for llama2.c checkpoints; " + *path +
                             " carries its own tokenizer");
    }
    if (is_dir && !IsHfModelDir(*path)) {
      return NotFound(*path + ": not a Hugging Face model directory (no config.json)");
    }
    return is_dir ? LoadHfDirectory(*path) : LoadGguf(*path);
  }
  StatusOr<std::shared_ptr<const LlamaWeights>> weights = LoadLlama2cCheckpoint(*path);
  if (!weights.ok()) return weights.status();
  const int32_t vocab = (*weights)->config.vocab_size;

  LoadedModel out;
  out.model_path = *path;
  out.weights = *weights;
  if (!source.tokenizer_path.empty()) {
    auto tok = LoadLlama2cTokenizer(source.tokenizer_path, vocab);
    if (!tok.ok()) return tok.status();
    out.tokenizer_path = source.tokenizer_path;
    out.tokenizer = std::move(tok).value();
    return out;
  }
  const fs::path dir = fs::path(*path).parent_path();
  std::vector<std::string> tried;
  std::string last_error;
  for (const std::string& name :
       {"tok" + std::to_string(vocab) + ".bin", std::string("tokenizer.bin")}) {
    const fs::path candidate = dir / name;
    tried.push_back(candidate.string());
    std::error_code ec;
    if (!fs::is_regular_file(candidate, ec)) continue;
    auto tok = LoadLlama2cTokenizer(candidate.string(), vocab);
    if (!tok.ok()) {
      last_error = tok.status().message();
      continue;
    }
    out.tokenizer_path = candidate.string();
    out.tokenizer = std::move(tok).value();
    return out;
  }
  std::string msg = *path + ": no tokenizer found for this model (vocab " + std::to_string(vocab) +
                    "); looked for";
  for (const auto& t : tried) msg += " " + t;
  if (!last_error.empty()) msg += " (last error: " + last_error + ")";
  msg += "; pass --tokenizer PATH";
  return NotFound(msg);
}

}  // namespace tinyserve
