#include "app/serve.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>

#include "app/device_select.h"
#include "engine/clock.h"
#include "engine/engine_core.h"
#include "metrics/metrics_observer.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/stats_logger.h"
#include "metrics/trace_writer.h"
#include "models/model_loader.h"
#include "models/model_runner.h"
#include "server/http_server.h"

namespace tinyserve {
namespace {

void Log(const std::string& line) { std::fprintf(stderr, "tinyserve: %s\n", line.c_str()); }

// Waits for SIGINT or SIGTERM (blocked in every thread, see RunServe), calling `tick` about once a
// second meanwhile. Returns the signal.
template <typename Tick>
int WaitForShutdownSignal(const sigset_t& signals, Tick&& tick) {
  while (true) {
    timespec timeout{1, 0};
    const int sig = sigtimedwait(&signals, nullptr, &timeout);
    if (sig == SIGINT || sig == SIGTERM) return sig;
    tick();
  }
}

}  // namespace

CLI::App* AddServeCommand(CLI::App& app, ServeFlags& f) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over HTTP (OpenAI API, /metrics)");
  cmd->add_option("--model", f.model,
                  "llama2.c checkpoint (.bin); default $TINYSERVE_MODEL or "
                  "../shared/models/stories260K.bin");
  cmd->add_option("--tokenizer", f.tokenizer, "tokenizer.bin; default: found beside the model");
  cmd->add_option("--host", f.host, "address to listen on");
  cmd->add_option("--port", f.port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", f.served_model_name,
                  "model name in the API and the metrics' model_name label (default: the model "
                  "file's name)");
  cmd->add_option("--trace-file", f.trace_file,
                  "write every request's timeline as Chrome trace-event JSON (Perfetto)");
  cmd->add_option("--threads", f.threads, "CPU threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--device", f.device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "max sequences per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", f.max_num_batched_tokens, "token budget per step")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--block-size", f.block_size, "KV cache block size in tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-kv-blocks", f.num_kv_blocks,
                  "KV cache blocks (0 = max-num-seqs sequences at full length, within 4 GiB)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-model-len", f.max_model_len,
                  "max tokens (prompt + output) per request (0 = the model's context length)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f.enable_prefix_caching,
                "reuse KV blocks of shared prompt prefixes (default on)");
  cmd->add_option("--scheduling-policy", f.scheduling_policy, "fcfs or priority")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  return cmd;
}

int RunServe(const ServeFlags& f, const std::string& default_shared_dir) {
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "tinyserve serve: %s\n", s.message().c_str());
    return 1;
  };
  // Every thread started from here on inherits the blocked signals; this thread takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  StatusOr<LoadedModel> model = ResolveAndLoadModel({f.model, f.tokenizer}, default_shared_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig& config = model->weights->config;
  Log("model " + model->model_path + " (" + config.Describe() + "), tokenizer " +
      model->tokenizer_path);
  const std::string served_model_name =
      f.served_model_name.empty() ? std::filesystem::path(model->model_path).stem().string()
                                  : f.served_model_name;

  ModelRunnerOptions opts;
  opts.block_size = f.block_size;
  opts.max_model_len = f.max_model_len;
  const int32_t max_len = f.max_model_len > 0 ? f.max_model_len : config.max_seq_len;
  opts.num_kv_blocks = f.num_kv_blocks;
  if (opts.num_kv_blocks == 0) {
    const int64_t per_seq = (max_len + f.block_size - 1) / f.block_size;
    const int64_t budget =
        (int64_t{4} << 30) / (ModelRunner::KvBytesPerToken(config) * f.block_size);
    opts.num_kv_blocks = static_cast<int32_t>(
        std::max<int64_t>(per_seq, std::min<int64_t>(per_seq * f.max_num_seqs, budget)));
  }
  if (static_cast<int64_t>(opts.num_kv_blocks) * opts.block_size < max_len) {
    return fail(InvalidArgument(
        "the KV cache (" + std::to_string(opts.num_kv_blocks) + " blocks of " +
        std::to_string(opts.block_size) + " tokens) holds fewer tokens than the max model length " +
        std::to_string(max_len) + "; raise --num-kv-blocks or lower --max-model-len"));
  }
  StatusOr<std::unique_ptr<Backend>> backend = SelectBackend(f.device, f.threads);
  if (!backend.ok()) return fail(backend.status());
  auto runner = ModelRunner::Create(model->weights, std::move(backend).value(), opts);
  if (!runner.ok()) return fail(runner.status());
  Log("backend " + (*runner)->backend().name() + ", " + std::to_string(opts.num_kv_blocks) +
      " KV blocks of " + std::to_string(opts.block_size) + " tokens");

  EngineConfig engine_config;
  engine_config.max_num_seqs = f.max_num_seqs;
  engine_config.max_num_batched_tokens = f.max_num_batched_tokens;
  engine_config.enable_prefix_caching = f.enable_prefix_caching;
  engine_config.policy =
      f.scheduling_policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  if (!config.stop_token_ids.empty()) engine_config.eos_token_id = config.stop_token_ids.front();
  SteadyClock clock;
  EngineCore engine(engine_config, runner->get(), &clock);

  MetricsConfig metrics_config;
  metrics_config.model_name = served_model_name;
  metrics_config.max_model_len = engine.max_model_len();
  metrics_config.block_size = opts.block_size;
  metrics_config.num_gpu_blocks = opts.num_kv_blocks;
  metrics_config.enable_prefix_caching = f.enable_prefix_caching;
  PrometheusMetrics metrics(metrics_config);
  MetricsObserver metrics_observer(&metrics);
  StatsLogger stats_logger(&clock, &Log);
  engine.AddObserver(&metrics_observer);
  engine.AddObserver(&stats_logger);
  std::unique_ptr<TraceWriter> trace;
  if (!f.trace_file.empty()) {
    auto opened = TraceWriter::Open(f.trace_file);
    if (!opened.ok()) return fail(opened.status());
    trace = std::move(opened).value();
    engine.AddObserver(trace.get());
    Log("writing the request trace to " + f.trace_file);
  }

  HttpServerOptions server_options;
  server_options.host = f.host;
  server_options.port = f.port;
  ServerContext context;
  context.served_model_name = served_model_name;
  context.engine = &engine;
  context.metrics = &metrics;
  HttpServer server(server_options, context);
  if (Status s = server.Bind(); !s.ok()) return fail(s);

  engine.Start();
  Status serve_status;
  std::thread http_thread([&] { serve_status = server.Serve(); });
  Log("serving " + served_model_name + " on http://" + f.host + ":" +
      std::to_string(server.port()) + " (GET /health, GET /metrics)");

  const int sig = WaitForShutdownSignal(signals, [&] { stats_logger.MaybeLog(); });
  Log(std::string("shutting down on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
  server.Stop();
  http_thread.join();
  engine.Stop();  // aborts whatever is still pending; observers see those finishes
  if (trace != nullptr) {
    if (Status s = trace->Close(); !s.ok()) return fail(s);
  }
  if (!serve_status.ok()) return fail(serve_status);
  Log("stopped");
  return 0;
}

}  // namespace tinyserve
