// `tinyserve serve [MODEL]`: the OpenAI-compatible HTTP server (DESIGN §6, server/openai_routes.h)
// over the engine, with Prometheus metrics at /metrics, the periodic stats log line and an optional
// request-timeline trace file.
// SIGINT/SIGTERM stop it cleanly: new generation requests get 503, in-flight ones may finish for
// --shutdown-timeout seconds, then the rest are aborted (their streams end with finish_reason
// abort and [DONE]), the server and engine stop, the trace file is closed; exit 0.
#pragma once

#include <cstdint>
#include <string>

#include "app/engine_flags.h"

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
  EngineFlags engine;             // --threads, --device, --max-num-seqs, ... (app/engine_flags.h)
  // The API.
  std::string api_key;               // also $TINYSERVE_API_KEY; empty: no authentication
  int64_t max_queue_len = 0;         // 0: unlimited
  std::string chat_template;         // protocol::RenderChatTemplate name; "": the model's
  double shutdown_timeout_s = 10.0;  // grace for in-flight requests on SIGINT/SIGTERM
};

// Registers the `serve` subcommand and its flags on `app`; the flags land in `flags`.
CLI::App* AddServeCommand(CLI::App& app, ServeFlags& flags);

// Runs the server until SIGINT or SIGTERM. Returns the process exit code (0 after a clean
// shutdown, 1 on a start-up error, printed to stderr).
int RunServe(const ServeFlags& flags, const std::string& default_shared_dir);

}  // namespace tinyserve
