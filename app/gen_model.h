// `tinyserve gen-model`: writes a checkpoint with seeded random weights in a benchmark shape.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace tinyserve {

struct GenModelFlags {
  std::string preset = "stories15M";
  uint64_t seed = 0;
  std::string out;
};

CLI::App* AddGenModelCommand(CLI::App& app, GenModelFlags& flags);
int RunGenModel(const GenModelFlags& flags);

}  // namespace tinyserve
