// `tinyserve generate`: offline generation from the command line.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tinyserve {

struct GenerateFlags {
  std::string model;
  std::string tokenizer;
  std::vector<std::string> prompts;
  int max_tokens = 256;
  float temperature = 0.0f;
  int threads = 0;
  int block_size = 16;
  int num_kv_blocks = 0;
  std::string device = "auto";
};

// Registers the `generate` subcommand and its flags on `app`; the flags land in `flags`.
CLI::App* AddGenerateCommand(CLI::App& app, GenerateFlags& flags);

// Runs it. Returns the process exit code (0 ok, 1 error; the error is printed to stderr).
int RunGenerate(const GenerateFlags& flags, const std::string& default_shared_dir);

}  // namespace tinyserve
