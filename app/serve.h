// `tinyserve serve [MODEL]`: the OpenAI-compatible HTTP server (DESIGN §6, server/openai_routes.h)
// over the engine, with Prometheus metrics at /metrics, the periodic stats log line and an optional
// request-timeline trace file.
// SIGINT/SIGTERM stop it cleanly: new generation requests get 503, in-flight ones may finish for
// --shutdown-timeout seconds, then the rest are aborted (their streams end with finish_reason
// abort and [DONE]), the connections are shut (a client trickling a request head or holding a
// keep-alive connection does not hold the shutdown), the server and engine stop, the trace file
// is closed; exit 0. Whatever the clients do, the process exits at most 2 s after
// --shutdown-timeout: if it has not stopped by then, a watchdog says so on stderr and exits at
// once with status 3 (the trace file and KV-cache events may be cut short).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  std::string api_key;                         // also $TINYSERVE_API_KEY; empty: no authentication
  int64_t max_queue_len = 4096;                // --max-num-queued-reqs; 0: unlimited
  int64_t max_num_queued_tokens = 0;           // --max-num-queued-tokens; 0: unlimited
  int64_t max_connections = 2048;              // --max-connections; 0: unlimited
  bool enable_per_request_metrics = false;     // --enable-per-request-metrics
  int32_t max_choices_per_request = 128;       // prompts x n; 0: unlimited
  int64_t max_logprobs_per_request = 250'000;  // logprob entries per response; 0: unlimited
  // protocol::RenderChatTemplate name; "": the model's own (its tokenizer_config.json or GGUF
  // metadata), else "plain".
  std::string chat_template;
  // --tool-call-parser hermes|llama3_json|mistral; "": the chat template's (DefaultToolParserFor).
  std::string tool_call_parser;
  double shutdown_timeout_s = 10.0;  // grace for in-flight requests on SIGINT/SIGTERM
  // Scale-out (issue 22). --metrics-compat NAME (repeatable): "gpu-cache-usage" adds the pre-V1
  // aliases older routers read (MetricsConfig::compat_gpu_cache_usage).
  std::vector<std::string> metrics_compat;
  // --kv-events-config JSON: vLLM's KVEventsConfig (server/kv_events_config.h); "": no events.
  std::string kv_events_config;
  // --histogram-buckets tinyserve|vllm and --custom-histogram-buckets JSON
  // (metrics/metric_buckets.h).
  std::string histogram_buckets = "tinyserve";
  std::string custom_histogram_buckets;
  // Fault injection for reliability tests (hidden flags; engine/fault_injecting_executor.h).
  double fault_inject_rate = 0.0;    // --fault-inject-rate: share of executor calls that fail
  uint64_t fault_seed = 0;           // --fault-seed
  std::string fault_kind = "error";  // --fault-kind error|exception|fatal
  std::vector<int64_t> fault_calls;  // --fault-at-call N (repeatable): these calls fail
};

// Registers the `serve` subcommand and its flags on `app`; the flags land in `flags`.
CLI::App* AddServeCommand(CLI::App& app, ServeFlags& flags);

// Runs the server until SIGINT or SIGTERM. Returns the process exit code (0 after a clean
// shutdown, 1 on a start-up error, printed to stderr); the watchdog's exit (3) does not return.
int RunServe(const ServeFlags& flags, const std::string& default_shared_dir);

}  // namespace tinyserve
