#include "models/model_loader.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "models/llama2c.h"
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
      "no model given: pass --model PATH (a llama2.c .bin checkpoint, with its tokenizer beside it "
      "or --tokenizer PATH), or set TINYSERVE_MODEL; the default, "
      "../shared/models/stories260K.bin, "
      "was not found. stories260K.bin and tok512.bin come from Hugging Face karpathy/tinyllamas.");
}

}  // namespace

StatusOr<LoadedModel> ResolveAndLoadModel(const ModelSource& source,
                                          const std::string& default_shared_dir) {
  StatusOr<std::string> path = FindModelPath(source, default_shared_dir);
  if (!path.ok()) return path.status();
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
