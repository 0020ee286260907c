#include "app/serve.h"

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "app/engine_flags.h"
#include "base/clock.h"
#include "engine/engine_core.h"
#include "engine/fault_injecting_executor.h"
#include "metrics/metrics_observer.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/request_timeline_log.h"
#include "metrics/stats_logger.h"
#include "metrics/trace_writer.h"
#include "models/model_loader.h"
#include "models/model_runner.h"
#include "server/http_server.h"
#include "server/kv_event_publisher.h"
#include "server/kv_events_config.h"
#include "server/protocol/chat_template.h"
#include "server/protocol/tool_parser.h"

namespace tinyserve {
namespace {

// SIGINT/SIGTERM handling. Both are blocked in every thread RunServe starts, and the main thread
// takes them with sigtimedwait(). Threads that libraries started before (OpenBLAS's pool) do not
// block them, so a handler that only counts is installed too: without it a signal delivered to
// such a thread (e.g. a second Ctrl-C while draining) would kill the process.
std::atomic<int> g_num_signals{0};
std::atomic<int> g_last_signal{0};

void CountSignal(int sig) {
  g_last_signal.store(sig);
  g_num_signals.fetch_add(1);
}

// Takes a pending SIGINT/SIGTERM, waiting up to `timeout_ns`. Returns the signals seen so far.
int PollSignals(const sigset_t& signals, long timeout_ns) {
  timespec timeout{0, timeout_ns};
  const int sig = sigtimedwait(&signals, nullptr, &timeout);
  if (sig == SIGINT || sig == SIGTERM) CountSignal(sig);
  return g_num_signals.load();
}

// Waits for SIGINT or SIGTERM, calling `tick` about once a second meanwhile. Returns the signal.
template <typename Tick>
int WaitForShutdownSignal(const sigset_t& signals, Tick&& tick) {
  for (int i = 1;; ++i) {
    if (PollSignals(signals, 100'000'000) > 0) return g_last_signal.load();
    if (i % 10 == 0) tick();
  }
}

// Waits up to `timeout_s` for the server to have had no request in flight for `settle_s` (so that
// requests already accepted but not yet handled get their answer, a 503 while draining). Returns
// true iff it got there; false also when another signal arrives (the operator insists).
bool WaitUntilIdle(const HttpServer& server, const sigset_t& signals, double timeout_s,
                   double settle_s = 0.1) {
  using SteadyTime = std::chrono::steady_clock;
  const int num_signals = g_num_signals.load();
  const auto deadline = SteadyTime::now() + std::chrono::duration<double>(timeout_s);
  auto idle_since = SteadyTime::now();
  while (true) {
    const auto now = SteadyTime::now();
    if (server.num_in_flight() > 0) {
      idle_since = now;
    } else if (now - idle_since >= std::chrono::duration<double>(settle_s)) {
      return true;
    }
    if (now >= deadline) return server.num_in_flight() == 0;
    if (PollSignals(signals, 5'000'000) > num_signals) return false;
  }
}

// How long after --shutdown-timeout the process may take to stop before ShutdownWatchdog ends it.
constexpr double kShutdownGraceS = 2.0;
// The exit code when ShutdownWatchdog ends the process: the shutdown did not complete (the trace
// file and KV-cache events may be cut short), which a supervisor should see.
constexpr int kHardExitCode = 3;

// Armed when the shutdown signal comes: if the process has not finished stopping within
// `limit_s`, it says so on stderr and exits at once (std::_Exit: no destructors, which are what
// may be stuck) with kHardExitCode, whatever the threads and the clients' sockets are doing.
class ShutdownWatchdog {
 public:
  explicit ShutdownWatchdog(double limit_s)
      : thread_([this, limit_s] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, std::chrono::duration<double>(limit_s), [this] { return done_; }))
            return;
          std::fprintf(stderr,
                       "tinyserve: the shutdown did not finish within %.1f s (--shutdown-timeout "
                       "+ %.0f s): exiting now with status %d\n",
                       limit_s, kShutdownGraceS, kHardExitCode);
          std::fflush(nullptr);
          std::_Exit(kHardExitCode);
        }) {}
  ~ShutdownWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  ShutdownWatchdog(const ShutdownWatchdog&) = delete;
  ShutdownWatchdog& operator=(const ShutdownWatchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;
};

// Waits up to `timeout_s` for Serve() to have returned, calling `shut` (HttpServer::Stop or
// AbortConnections) every 100 ms. Returns true iff it returned.
template <typename Shut>
bool WaitUntilStopped(const HttpServer& server, double timeout_s, Shut&& shut) {
  using SteadyTime = std::chrono::steady_clock;
  const auto deadline = SteadyTime::now() + std::chrono::duration<double>(timeout_s);
  for (int i = 1; !server.has_stopped(); ++i) {
    if (SteadyTime::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (i % 10 == 0) shut();
  }
  return true;
}

}  // namespace

CLI::App* AddServeCommand(CLI::App& app, ServeFlags& f) {
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over HTTP (OpenAI API, /metrics)");
  cmd->add_option("model", f.model,
                  "Hugging Face model directory, .gguf file or llama2.c checkpoint (.bin); "
                  "default $TINYSERVE_MODEL or ../shared/models/stories260K.bin");
  cmd->add_option("--model", f.model, "the model, as the positional argument");
  cmd->add_option("--tokenizer", f.tokenizer,
                  "tokenizer.bin of a llama2.c checkpoint; default: found beside the model");
  cmd->add_option("--host", f.host, "address to listen on");
  cmd->add_option("--port", f.port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", f.served_model_name,
                  "model name in the API and the metrics' model_name label (default: the model "
                  "file's name)");
  cmd->add_option("--trace-file", f.trace_file,
                  "write every request's timeline as Chrome trace-event JSON (Perfetto)");
  AddEngineFlags(cmd, f.engine);
  cmd->add_option("--api-key", f.api_key,
                  "require `Authorization: Bearer KEY` on /v1/* (also $TINYSERVE_API_KEY)")
      ->envname("TINYSERVE_API_KEY");
  cmd->add_option("--max-num-queued-reqs,--max-queue-len", f.max_queue_len,
                  "answer 503 when this many requests are in flight, waiting or running (vLLM's "
                  "flag; default 4096; 0 = unlimited); a request with a larger n gets 400")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-num-queued-tokens", f.max_num_queued_tokens,
                  "answer 503 when the prompt tokens of the requests still waiting for their first "
                  "token would exceed this (vLLM's flag; 0 = unlimited)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-connections", f.max_connections,
                  "answer 503 (and close) to a new HTTP connection when this many are open "
                  "(default 2048; 0 = unlimited)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--enable-per-request-metrics", f.enable_per_request_metrics,
                "add the request's timing `metrics` object to each response with one prompt and "
                "n = 1 (a stream: to its usage chunk)");
  cmd->add_option("--max-choices-per-request", f.max_choices_per_request,
                  "answer 400 to a request for more choices (prompts x n) than this (default 128; "
                  "0 = unlimited)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-logprobs-per-request", f.max_logprobs_per_request,
                  "answer 400 to a request whose response could carry more logprob entries than "
                  "this: choices x scored tokens (prompt tokens with echo or prompt_logprobs, up "
                  "to max_tokens generated) x (1 + top logprobs) (default 250000; 0 = unlimited)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option(
         "--chat-template", f.chat_template,
         "chat template name (plain, chatml, zephyr, llama-2, llama-3.2, ...); default: the "
         "model's own (an error if it is not one of these), else plain")
      ->check([](const std::string& name) {
        return protocol::IsKnownChatTemplate(name) ? std::string()
                                                   : "unknown chat template '" + name + "'";
      });
  cmd->add_option("--tool-call-parser", f.tool_call_parser,
                  "how tool calls are read from chat completions with tools (vLLM's names: "
                  "hermes, llama3_json, mistral); default: the chat template's (llama-3.1/3.2 "
                  "llama3_json, mistral mistral, any other hermes)")
      ->check([](const std::string& name) {
        return protocol::ToolParserFromName(name) ? std::string()
                                                  : "unknown tool call parser '" + name + "'";
      });
  cmd->add_option("--shutdown-timeout", f.shutdown_timeout_s,
                  "seconds in-flight requests may run on after SIGINT/SIGTERM before they are "
                  "aborted; the process exits at most 2 s later whatever the clients do (status "
                  "3 if it had to force that exit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--metrics-compat", f.metrics_compat,
                  "also serve metric names older routers read: gpu-cache-usage adds "
                  "vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_queries_total and "
                  "vllm:gpu_prefix_cache_hits_total (vLLM production-stack, AIBrix)")
      ->check(CLI::IsMember({"gpu-cache-usage"}));
  cmd->add_option("--kv-events-config", f.kv_events_config,
                  "publish KV-cache events as vLLM does (ZMQ PUB + msgpack, optional replay "
                  "socket): vLLM's KVEventsConfig JSON, e.g. '{\"enable_kv_cache_events\": "
                  "true, \"endpoint\": \"tcp://*:5557\", \"replay_endpoint\": "
                  "\"tcp://*:5558\", \"topic\": \"kv\"}'");
  cmd->add_option("--histogram-buckets", f.histogram_buckets,
                  "histogram boundaries: tinyserve (vLLM's with finer ones below them) or vllm "
                  "(vLLM's exact defaults, to compare side by side)")
      ->capture_default_str();
  cmd->add_option("--custom-histogram-buckets", f.custom_histogram_buckets,
                  "replace the boundaries of bucket families, as vLLM's flag: a JSON object from "
                  "family key (request_latency, time_to_first_token, inter_token_latency, "
                  "iteration_tokens, request_params_n, request_num_preemptions, request_tokens, "
                  "kv_cache_residency) to increasing boundaries, e.g. "
                  "'{\"request_latency\": [0.01, 0.1, 1, 10]}'");
  // Hidden (empty group): fault injection for the reliability tests and scripts/soak.sh.
  cmd->add_option("--fault-inject-rate", f.fault_inject_rate,
                  "fail this share of executor calls (testing)")
      ->check(CLI::Range(0.0, 1.0))
      ->group("");
  cmd->add_option("--fault-seed", f.fault_seed, "seed of the failing calls (testing)")->group("");
  cmd->add_option("--fault-kind", f.fault_kind, "error, exception, fatal or hang (testing)")
      ->check(CLI::IsMember({"error", "exception", "fatal", "hang"}))
      ->group("");
  cmd->add_option("--fault-at-call", f.fault_calls, "fail this executor call, 1-based (testing)")
      ->check(CLI::PositiveNumber)
      ->group("");
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
  struct sigaction action {};
  action.sa_handler = &CountSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  // Flag values first: a bad one fails before the model loads.
  KvEventsConfig kv_events;
  if (!f.kv_events_config.empty()) {
    StatusOr<KvEventsConfig> parsed = ParseKvEventsConfig(f.kv_events_config);
    if (!parsed.ok()) return fail(parsed.status());
    kv_events = *parsed;
  }
  HistogramBucketConfig buckets;
  {
    StatusOr<BucketPreset> preset = ParseBucketPreset(f.histogram_buckets);
    if (!preset.ok()) return fail(preset.status());
    buckets.preset = *preset;
    if (!f.custom_histogram_buckets.empty()) {
      Status parsed = ParseCustomHistogramBuckets(f.custom_histogram_buckets, &buckets);
      if (!parsed.ok()) return fail(parsed);
    }
  }
  StatusOr<LoadedModel> model = ResolveAndLoadModel({f.model, f.tokenizer}, default_shared_dir);
  if (!model.ok()) return fail(model.status());
  const ModelConfig config = model->weights->config;  // by value: the weights move to the runner
  LogLine("model " + model->model_path + " (" + config.Describe() + "), tokenizer " +
          model->tokenizer_path);
  // --chat-template wins; else the model's own, which this server must know how to render.
  StatusOr<std::string> chosen_template = protocol::ChooseChatTemplate(
      f.chat_template, model->chat_template, model->chat_template_error);
  if (!chosen_template.ok()) return fail(chosen_template.status());
  const std::string chat_template = *chosen_template;
  LogLine("chat template " + chat_template + ", tool call parser " +
          (f.tool_call_parser.empty() ? std::string(protocol::ToolParserName(
                                            protocol::DefaultToolParserFor(chat_template)))
                                      : f.tool_call_parser));
  const std::string served_model_name =
      f.served_model_name.empty() ? config.name : f.served_model_name;

  auto runner =
      CreateModelRunner(f.engine, std::move(model->weights), f.engine.max_num_seqs, &LogLine);
  if (!runner.ok()) return fail(runner.status());
  const EngineConfig engine_config = MakeEngineConfig(f.engine, config);
  ModelExecutor* executor = runner->get();
  std::unique_ptr<FaultInjectingExecutor> faults;
  if (f.fault_inject_rate > 0.0 || !f.fault_calls.empty()) {
    FaultInjectionConfig fault_config;
    fault_config.rate = f.fault_inject_rate;
    fault_config.seed = f.fault_seed;
    fault_config.calls = f.fault_calls;
    StatusOr<FaultKind> kind = ParseFaultKind(f.fault_kind);
    if (!kind.ok()) return fail(kind.status());
    fault_config.kind = *kind;
    faults = std::make_unique<FaultInjectingExecutor>(
        executor, fault_config, [](const InjectedFault& fault) {
          LogLine(std::string("fault injection: ") + FaultKindName(fault.kind) + " " +
                  FaultInjectingExecutor::FaultMessage(fault.call, fault.num_seqs));
        });
    executor = faults.get();
    LogLine("fault injection on: " + f.fault_kind + " in a share " +
            std::to_string(f.fault_inject_rate) + " of executor calls (seed " +
            std::to_string(f.fault_seed) + ")");
  }
  SteadyClock clock;
  EngineCore engine(engine_config, executor, &clock);

  MetricsConfig metrics_config;
  metrics_config.model_name = served_model_name;
  metrics_config.max_model_len = engine.max_model_len();
  metrics_config.block_size = (*runner)->block_size();
  metrics_config.num_gpu_blocks = (*runner)->num_kv_blocks();
  metrics_config.enable_prefix_caching = f.engine.enable_prefix_caching;
  // The dtype the cache holds (the resolved --kv-cache-dtype), not the flag's "auto".
  metrics_config.cache_dtype = DTypeName((*runner)->backend().kv_cache_dtype());
  metrics_config.gpu_memory_utilization = f.engine.gpu_memory_utilization;
  metrics_config.calculate_kv_scales = f.engine.calculate_kv_scales;
  for (const std::string& compat : f.metrics_compat) {
    if (compat == "gpu-cache-usage") metrics_config.compat_gpu_cache_usage = true;
  }
  metrics_config.buckets = buckets;
  PrometheusMetrics metrics(metrics_config);
  MetricsObserver metrics_observer(&metrics);
  StatsLogger stats_logger(&clock, &LogLine);
  engine.AddObserver(&metrics_observer);
  engine.AddObserver(&stats_logger);
  RequestTimelineLog timelines;  // GET /debug/request_timelines, the /dashboard's timeline
  engine.AddObserver(&timelines);
  std::unique_ptr<TraceWriter> trace;
  if (!f.trace_file.empty()) {
    auto opened = TraceWriter::Open(f.trace_file);
    if (!opened.ok()) return fail(opened.status());
    trace = std::move(opened).value();
    engine.AddObserver(trace.get());
    LogLine("writing the request trace to " + f.trace_file);
  }

  std::unique_ptr<KvEventPublisher> kv_publisher;
  if (kv_events.publishes()) {
    if (!f.engine.enable_prefix_caching) {
      LogLine("KV-cache events: prefix caching is off, so no block is ever stored");
    }
    auto started = KvEventPublisher::Start(kv_events);
    if (!started.ok()) return fail(started.status());
    kv_publisher = std::move(started).value();
    engine.SetKvCacheEventSink(kv_publisher.get());
    LogLine("publishing KV-cache events on " + kv_publisher->endpoint() + " (topic \"" +
            kv_events.topic + "\")" +
            (kv_publisher->replay_endpoint().empty()
                 ? std::string(", no replay")
                 : ", replay on " + kv_publisher->replay_endpoint()));
  }

  HttpServerOptions server_options;
  server_options.host = f.host;
  server_options.port = f.port;
  server_options.max_connections = f.max_connections;
  ServerContext context;
  context.served_model_name = served_model_name;
  context.engine = &engine;
  context.metrics = &metrics;
  context.timelines = &timelines;
  context.tokenizer = model->tokenizer.get();
  context.clock = &clock;
  context.model_root = model->model_path;
  context.max_model_len = engine.max_model_len();
  context.chat_template = chat_template;
  context.tool_call_parser = f.tool_call_parser;
  context.api_key = f.api_key;
  context.max_queue_len = f.max_queue_len;
  context.max_num_queued_tokens = f.max_num_queued_tokens;
  context.enable_per_request_metrics = f.enable_per_request_metrics;
  context.max_choices_per_request = f.max_choices_per_request;
  context.max_logprobs_per_request = f.max_logprobs_per_request;
  HttpServer server(server_options, context);
  if (Status s = server.Bind(); !s.ok()) return fail(s);
  auto limit = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("unlimited"); };
  LogLine("limits: --max-num-queued-reqs " + limit(f.max_queue_len) + ", --max-num-queued-tokens " +
          limit(f.max_num_queued_tokens) + ", --max-connections " + limit(f.max_connections) +
          ", --max-choices-per-request " + limit(f.max_choices_per_request) +
          ", --max-logprobs-per-request " + limit(f.max_logprobs_per_request));

  engine.Start();
  Status serve_status;
  std::thread http_thread([&] { serve_status = server.Serve(); });
  LogLine("serving " + served_model_name + " on http://" + f.host + ":" +
          std::to_string(server.port()) + " (OpenAI API at /v1, GET /health, GET /metrics)" +
          (f.api_key.empty() ? "" : ", API key required on /v1"));

  bool logged_death = false;
  const int sig = WaitForShutdownSignal(signals, [&] {
    stats_logger.MaybeLog();
    if (engine.is_dead() && !logged_death) {
      logged_death = true;
      LogLine("the engine is dead (" + engine.death_status().ToString() +
              "): /health and new requests answer 503 until restart");
    }
  });
  LogLine(std::string("shutting down on ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
  // From here the process ends within --shutdown-timeout + kShutdownGraceS, cleanly or not.
  ShutdownWatchdog watchdog(f.shutdown_timeout_s + kShutdownGraceS);
  // New generation requests get 503; in-flight ones get the grace period, then are aborted (the
  // engine finishes them with reason abort, and their responses end cleanly).
  server.Drain();
  if (!WaitUntilIdle(server, signals, f.shutdown_timeout_s)) {
    LogLine(std::to_string(server.num_in_flight()) + " requests still running (grace period " +
            std::to_string(f.shutdown_timeout_s) + " s over, or signalled again): aborting them");
    engine.Stop();
    WaitUntilIdle(server, signals, 0.5, 0.0);
  }
  // No more connections; the streams end; answers being written may finish, then every
  // connection closes (a client trickling a request head or idle on keep-alive holds nothing).
  // After 0.5 s, the connections close whatever is unwritten (a client that reads nothing).
  server.Stop();
  if (!WaitUntilStopped(server, 0.5, [&] { server.Stop(); })) {
    LogLine("connections still open 0.5 s after the listen loop ended: closing them");
    WaitUntilStopped(server, f.shutdown_timeout_s + kShutdownGraceS,
                     [&] { server.AbortConnections(); });
  }
  http_thread.join();
  engine.Stop();  // aborts whatever is still pending; observers see those finishes
  if (kv_publisher != nullptr) kv_publisher->Shutdown();
  if (trace != nullptr) {
    if (Status s = trace->Close(); !s.ok()) return fail(s);
  }
  if (!serve_status.ok()) return fail(serve_status);
  LogLine("stopped");
  return 0;
}

}  // namespace tinyserve
