#include "app/gen_model.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "models/presets.h"

namespace tinyserve {

CLI::App* AddGenModelCommand(CLI::App& app, GenModelFlags& f) {
  std::vector<std::string> names;
  for (const ModelPreset& p : ModelPresets()) names.push_back(p.name);
  CLI::App* cmd = app.add_subcommand(
      "gen-model", "Write a llama2.c checkpoint with seeded random weights in a benchmark shape");
  cmd->add_option("--preset", f.preset, "model shape")->check(CLI::IsMember(names));
  cmd->add_option("--seed", f.seed, "random seed (same seed, same file)");
  cmd->add_option("--out", f.out, "output file (.bin)")->required();
  return cmd;
}

int RunGenModel(const GenModelFlags& f) {
  const auto preset = FindModelPreset(f.preset);
  if (!preset) {
    std::fprintf(stderr, "tinyserve gen-model: unknown preset '%s'\n", f.preset.c_str());
    return 1;
  }
  const Status s = WriteRandomLlama2cCheckpoint(f.out, preset->header, f.seed);
  if (!s.ok()) {
    std::fprintf(stderr, "tinyserve gen-model: %s\n", s.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "tinyserve: wrote %s (%s, seed %llu)\n", f.out.c_str(), f.preset.c_str(),
               static_cast<unsigned long long>(f.seed));
  return 0;
}

}  // namespace tinyserve
