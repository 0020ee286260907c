#include "app/gen_model.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "models/hf_presets.h"
#include "models/presets.h"

namespace tinyserve {

CLI::App* AddGenModelCommand(CLI::App& app, GenModelFlags& f) {
  std::vector<std::string> names;
  for (const ModelPreset& p : ModelPresets()) names.push_back(p.name);
  for (const HfPreset& p : HfPresets()) names.push_back(p.name);
  CLI::App* cmd = app.add_subcommand(
      "gen-model",
      "Write a model with seeded random weights in a benchmark shape: a llama2.c checkpoint "
      "(stories*) or a Hugging Face directory (real models' shapes)");
  cmd->add_option("--preset", f.preset, "model shape")->check(CLI::IsMember(names));
  cmd->add_option("--dtype", f.dtype, "weight dtype of Hugging Face presets")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}));
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
  if (const auto hf = FindHfPreset(f.preset)) {
    s = WriteRandomHfModel(*hf, *ParseTorchDtype(f.dtype), f.seed, f.out);
  } else if (const auto preset = FindModelPreset(f.preset)) {
    s = WriteRandomLlama2cCheckpoint(f.out, preset->header, f.seed);
  } else {
    s = InvalidArgument("unknown preset '" + f.preset + "'");
  }
  if (!s.ok()) return fail(s);
  std::fprintf(stderr, "tinyserve: wrote %s (%s, seed %llu)\n", f.out.c_str(), f.preset.c_str(),
               static_cast<unsigned long long>(f.seed));
  return 0;
}

}  // namespace tinyserve
