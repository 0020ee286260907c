// `tinyserve serve`: the HTTP server (DESIGN §6) over the engine, with Prometheus metrics at
// /metrics, the periodic stats log line and an optional request-timeline trace file.
// SIGINT/SIGTERM stop it cleanly (server stopped, engine stopped with pending requests aborted,
// trace file closed; exit 0).
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace tinyserve {

struct ServeFlags {
  std::string model;
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (the chosen one is logged)
  std::string served_model_name;  // default: the model file's name
  std::string trace_file;         // empty: no trace
  int threads = 0;
  std::string device = "auto";
  // Engine limits, spelled as vLLM's flags.
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int num_kv_blocks = 0;  // 0: max_num_seqs sequences at full length, within 4 GiB
  int max_model_len = 0;  // 0: the model's context length
  bool enable_prefix_caching = true;
  std::string scheduling_policy = "fcfs";
};

// Registers the `serve` subcommand and its flags on `app`; the flags land in `flags`.
CLI::App* AddServeCommand(CLI::App& app, ServeFlags& flags);

// Runs the server until SIGINT or SIGTERM. Returns the process exit code (0 after a clean
// shutdown, 1 on a start-up error, printed to stderr).
int RunServe(const ServeFlags& flags, const std::string& default_shared_dir);

}  // namespace tinyserve
