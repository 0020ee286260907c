#include "app/gen_model.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "models/gguf_presets.h"
#include "models/hf_presets.h"
#include "models/presets.h"

namespace tinyserve {

CLI::App* AddGenModelCommand(CLI::App& app, GenModelFlags& f) {
  std::vector<std::string> names;
  for (const ModelPreset& p : ModelPresets()) names.push_back(p.name);
  for (const HfPreset& p : HfPresets()) names.push_back(p.name);
  for (const GgufPreset& p : GgufPresets()) {
    if (!FindHfPreset(p.name)) names.push_back(p.name);
  }
  CLI::App* cmd = app.add_subcommand(
      "gen-model",
      "Write a model with seeded random weights in a benchmark shape: a llama2.c checkpoint "
      "(stories*), a Hugging Face directory (real models' shapes) or a GGUF file (--format gguf)");
  cmd->add_option("--preset", f.preset, "model shape")->check(CLI::IsMember(names));
  cmd->add_option("--format", f.format,
                  "auto: llama2.c for stories*, an HF directory for the others; gguf: a GGUF file "
                  "(llama-3.2-1b, qwen2.5-0.5b, tinyllama-1.1b, smollm-135m, mistral-7b, "
                  "llama-2-linear-rope)")
      ->check(CLI::IsMember({"auto", "gguf"}));
  cmd->add_flag("--small", f.small,
                "GGUF: the test-sized shape (2 layers, 1-2 KV heads, vocab 512; same head_dim, GQA "
                "ratio, bias, tying and RoPE)");
  cmd->add_option("--dtype", f.dtype,
                  "weight dtype: bf16, f16, f32 (HF and GGUF), or for GGUF q8_0, q4_0, q4_k, q5_k, "
                  "q6_k, q4_k_m (as convert --to gguf --dtype)")
      ->check(
          CLI::IsMember({"bf16", "f16", "f32", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m"}));
  cmd->add_option("--seed", f.seed, "random seed (same seed, same files)");
  cmd->add_option("--out", f.out, "output file (.bin, stories*) or directory (HF presets)")
      ->required();
  return cmd;
}

int RunGenModel(const GenModelFlags& f) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "tinyserve gen-model: %s\n", s.message().c_str());
    return 1;
  };
  Status s;
  if (f.format == "gguf") {
    const auto preset = FindGgufPreset(f.preset);
    if (!preset) return fail(InvalidArgument("--format gguf: no GGUF preset '" + f.preset + "'"));
    s = WriteRandomGgufModel(*preset, f.small, *ParseGgufWeightType(f.dtype), f.seed, f.out);
  } else if (f.small) {
    s = InvalidArgument("--small is for --format gguf");
  } else if (!ParseTorchDtype(f.dtype)) {
    s = InvalidArgument("--dtype " + f.dtype + " is for --format gguf (HF: bf16, f16, f32)");
  } else if (const auto hf = FindHfPreset(f.preset)) {
    s = WriteRandomHfModel(*hf, *ParseTorchDtype(f.dtype), f.seed, f.out);
  } else if (const auto preset = FindModelPreset(f.preset)) {
    s = WriteRandomLlama2cCheckpoint(f.out, preset->header, f.seed);
  } else if (FindGgufPreset(f.preset)) {
    s = InvalidArgument("preset '" + f.preset + "' is written only as GGUF (--format gguf)");
  } else {
    s = InvalidArgument("unknown preset '" + f.preset + "'");
  }
  if (!s.ok()) return fail(s);
  std::fprintf(stderr, "tinyserve: wrote %s (%s, seed %llu)\n", f.out.c_str(), f.preset.c_str(),
               static_cast<unsigned long long>(f.seed));
  return 0;
}

}  // namespace tinyserve
