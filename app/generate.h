// `tinyserve generate`: offline generation from the command line, through the engine (all prompts
// submitted at once and scheduled, batched and preempted like served requests).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/engine_flags.h"

namespace CLI {
class App;
}

namespace tinyserve {

struct GenerateFlags {
  std::string model;
  std::string tokenizer;
  std::vector<std::string> prompts;
  int max_tokens = 256;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  EngineFlags engine;
};

// Registers the `generate` subcommand and its flags on `app`; the flags land in `flags`.
CLI::App* AddGenerateCommand(CLI::App& app, GenerateFlags& flags);

// Runs it. Returns the process exit code (0 ok, 1 error; the error is printed to stderr).
int RunGenerate(const GenerateFlags& flags, const std::string& default_shared_dir);

}  // namespace tinyserve
