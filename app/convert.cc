#include "app/convert.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "models/convert.h"
#include "models/gguf_model.h"
#include "models/model_loader.h"

namespace tinyserve {

CLI::App* AddConvertCommand(CLI::App& app, ConvertFlags& f) {
  CLI::App* cmd = app.add_subcommand(
      "convert", "Convert a llama2.c checkpoint to a Hugging Face directory or a GGUF file");
  cmd->add_option("--model", f.model,
                  "llama2.c checkpoint (.bin); default $TINYSERVE_MODEL or "
                  "../shared/models/stories260K.bin");
  cmd->add_option("--tokenizer", f.tokenizer, "tokenizer.bin; default: found beside the model");
  cmd->add_option("--to", f.to, "hf (a directory) or gguf (a file)")
      ->check(CLI::IsMember({"hf", "gguf"}));
  cmd->add_option("--dtype", f.dtype,
                  "weight dtype written: f32, f16, bf16; for gguf also q8_0, q4_0, q4_k, q5_k, "
                  "q6_k, q4_k_m (llama.cpp's block formats and rounding)")
      ->check(
          CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m"}));
  cmd->add_option("--out", f.out, "output directory (hf) or file (gguf)")->required();
  return cmd;
}

int RunConvert(const ConvertFlags& f, const std::string& default_shared_dir) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "tinyserve convert: %s\n", s.message().c_str());
    return 1;
  };
  // Resolves the model and its tokenizer as generate/serve do (and checks they load together).
  StatusOr<LoadedModel> model = ResolveAndLoadModel({f.model, f.tokenizer}, default_shared_dir);
  if (!model.ok()) return fail(model.status());
  if (model->format != ModelFormat::kLlama2c) {
    return fail(
        InvalidArgument(model->model_path + ": convert reads llama2.c checkpoints (.bin) only"));
  }
  Status s;
  if (f.to == "gguf") {
    s = ConvertLlama2cToGguf(model->model_path, model->tokenizer_path,
                             *ParseGgufWeightType(f.dtype), f.out);
  } else if (const std::optional<TensorDtype> dtype = ParseTorchDtype(f.dtype)) {
    s = ConvertLlama2cToHf(model->model_path, model->tokenizer_path, *dtype, f.out);
  } else {
    s = InvalidArgument("--dtype " + f.dtype + " is a GGUF block format: use it with --to gguf");
  }
  if (!s.ok()) return fail(s);
  std::fprintf(stderr, "tinyserve: wrote %s (%s, %s, from %s and %s)\n", f.out.c_str(),
               f.to.c_str(), f.dtype.c_str(), model->model_path.c_str(),
               model->tokenizer_path.c_str());
  return 0;
}

}  // namespace tinyserve
