// HttpServer: tinyserve's HTTP frontend (DESIGN §6) on libmicrohttpd (issue 16 item 4: why, in
// the README), with every route registered in one place (RegisterRoutes in http_server.cc).
//
// Routes: GET /health (200, or 503 when the engine is dead (EngineCore::is_dead) or
// ServerContext::is_healthy says it is not healthy),
// GET /metrics (the Prometheus text 0.0.4 of ServerContext::metrics, Content-Type
// kPrometheusContentType; OpenMetrics 1.0.0 text, kOpenMetricsContentType, only when the Accept
// header asks for it: metrics/openmetrics_text.h), GET /load and GET /get_load (the generation
// requests in flight, for load-aware routers; see HandleLoad), GET /dashboard
// (server/dashboard_page.h: a live view that polls /metrics and GET /debug/request_timelines, the
// JSON of ServerContext::timelines), and, when the context has a tokenizer, the OpenAI API of
// server/openai_routes.h (/v1/completions, /v1/chat/completions, /v1/models, /version, /tokenize,
// /detokenize, with the API-key check on /v1/* only: /metrics, /dashboard and
// /debug/request_timelines are open, as vLLM's /metrics). Handlers see server/http_message.h only.
//
// Connections: an accept thread of ours takes each new connection off the listen queue and
// stamps it; one libmicrohttpd thread (epoll) then reads and writes every connection; an idle
// one costs no thread. Each connection may hold connection_memory_bytes for its request head (a
// head over it gets libmicrohttpd's 431 and the close), a request's head and body must arrive
// within request_read_deadline_s of its start (else the connection is closed), and a connection
// that moves no byte for idle_timeout_s is closed (idle keep-alive connections, clients that
// stopped reading). Requests pipelined behind another are served in order; a half-closed client is
// answered. Before the body is read, the head checks of server/request_guard.h and the API key;
// those answers close the connection (no unread body is ever parsed as a request). Over
// max_connections (open connections, refused ones excluded), a new connection's request gets 503
// with `Connection: close`, counted in vllm:admission_rejections_total{reason="max_connections"}
// (beyond max_connections + 64 the accepted socket is closed at once).
//
// Handlers run on num_threads worker threads (a non-streaming generation holds one until it is
// answered; a stream returns at once and its chunks are written by the libmicrohttpd thread as the
// engine wakes it). The arrival of a connection's first request is its accept time, of a later
// one the moment its request line was read, both on the context's clock: HttpRequest::arrival_ts,
// the arrival_ts of the engine requests, so TTFT and e2e count any wait for a worker, which
// tinyserve_http_queue_time_seconds exports. Handler exceptions get a 500 without their text
// (logged to stderr). Every error has the JSON body of server/error_json.h, except
// libmicrohttpd's own answers to malformed heads (400, 414, 431: a short HTML body).
//
// Shutdown: Drain() makes new generation requests get 503 while the ones in flight go on
// (num_in_flight() counts them); Stop() then stops accepting, ends the streams in flight (their
// engine requests are aborted) and makes Serve() return once the handlers running have answered
// and those answers are written; AbortConnections() closes every connection at once, for answers
// that do not end (a client that reads nothing).
//
// Lifecycle: construct, Bind() (port 0 picks a free port), then Serve() blocks on the calling
// thread until Stop() is called from any other thread (or a signal-watching thread). Stop() is
// thread-safe and idempotent.
//
// Ownership: the context's pointers are borrowed and must outlive the server. The thread running
// Serve() must have returned before the server is destroyed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "server/http_message.h"
#include "server/http_router.h"
#include "server/protocol/api_error.h"

namespace tinyserve {

class Clock;
class EngineCore;
class OpenAiRoutes;
class PrometheusMetrics;
class RequestTimelineLog;
class Tokenizer;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                          // 0: any free port (see HttpServer::port())
  size_t max_body_bytes = size_t{4} << 20;  // larger request bodies get 413
  int num_threads = 512;  // handler workers (a non-streaming generation holds one until answered)
  // Open connections beyond which a new one gets 503 and is closed (0: unlimited).
  // --max-connections.
  int64_t max_connections = 2048;
  size_t connection_memory_bytes = size_t{32} << 10;  // per connection: bounds the request head
  double request_read_deadline_s = 30.0;  // a request's head and body arrive within this
  double idle_timeout_s = 5.0;            // a connection that moves no byte this long is closed
  int socket_send_buffer_bytes = 0;       // > 0: SO_SNDBUF of every connection (0: the kernel's)
};

// What the handlers use. Every pointer may be null (a route that needs it then answers 503).
struct ServerContext {
  std::string served_model_name;
  EngineCore* engine = nullptr;
  const PrometheusMetrics* metrics = nullptr;
  // GET /debug/request_timelines (and the /dashboard's timeline); null: 503.
  const RequestTimelineLog* timelines = nullptr;
  std::function<bool()> is_healthy;  // null: always healthy

  // The OpenAI routes (registered iff tokenizer is non-null; see OpenAiContext).
  const Tokenizer* tokenizer = nullptr;
  const Clock* clock = nullptr;  // the engine's clock; REQUIRES: non-null with a tokenizer
  std::string model_root;        // /v1/models "root"
  int32_t max_model_len = 0;     // 0: the engine's
  std::string chat_template = "plain";
  std::string tool_call_parser;                // OpenAiContext's
  std::string api_key;                         // empty: no authentication
  int64_t max_queue_len = 0;                   // --max-num-queued-reqs; 0: unlimited
  int64_t max_num_queued_tokens = 0;           // --max-num-queued-tokens; 0: unlimited
  bool enable_per_request_metrics = false;     // --enable-per-request-metrics
  int32_t max_choices_per_request = 128;       // OpenAiContext's; 0: unlimited
  int64_t max_logprobs_per_request = 250'000;  // OpenAiContext's; 0: unlimited
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, ServerContext context);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket. Returns Unavailable if the address cannot be bound.
  Status Bind();
  // The bound port. REQUIRES: Bind() succeeded.
  int port() const { return port_; }
  // Serves requests until Stop(). REQUIRES: Bind() succeeded. Returns an error iff the listen loop
  // failed.
  Status Serve();
  // Stops accepting, ends the streams in flight (their engine requests are aborted) and makes
  // Serve() return once the running handlers have answered and the answers are written.
  // Thread-safe, idempotent.
  void Stop();
  // Makes Serve() close every connection now, written or not. For a shutdown whose connections
  // did not end after Stop(). Thread-safe.
  void AbortConnections();
  // Returns true iff Serve() has returned (every worker has ended). Thread-safe.
  bool has_stopped() const { return serve_done_.load(); }
  // New generation requests get 503 from now on; those in flight go on. Thread-safe.
  void Drain();
  // The generation requests in flight (0 without the OpenAI routes). Thread-safe.
  int64_t num_in_flight() const;
  // The engine requests in flight, as --max-num-queued-reqs counts them. Thread-safe.
  int64_t num_waiting() const;
  // The open HTTP connections (as max_connections counts them; refused ones excluded).
  // Thread-safe.
  int64_t num_connections() const { return num_connections_.load(); }

 private:
  class Transport;  // the libmicrohttpd side (http_server.cc)

  void RegisterRoutes();
  void HandleHealth(const HttpRequest& req, HttpResponse& res) const;
  void HandleMetrics(const HttpRequest& req, HttpResponse& res) const;
  // GET /debug/request_timelines: RequestTimelineLog::RenderJson at the clock's now.
  void HandleRequestTimelines(const HttpRequest& req, HttpResponse& res) const;
  // GET /load: vLLM's shape, {"server_load": N} (vLLM's OpenAI server, route GET /load,
  // get_server_load_metrics: the requests in flight on the generation routes). GET /get_load:
  // what vllm-project/router's load monitor polls (src/routers/http/router.rs,
  // get_worker_load_static: GET {worker}/get_load, reads the integer field "load"), {"load": N}.
  // N is num_in_flight(): HTTP generation requests admitted and not yet answered.
  void HandleLoad(const HttpRequest& req, HttpResponse& res, const char* key) const;
  // The head checks and the API key, before the body is read: the error to answer, or nullopt.
  std::optional<protocol::ApiError> CheckHead(const HttpRequest& req) const;
  // Runs the route of `req` on a worker thread; never throws.
  void Handle(const HttpRequest& req, HttpResponse& res) const noexcept;

  const HttpServerOptions options_;
  const ServerContext context_;
  std::unique_ptr<Clock> own_clock_;      // a SteadyClock when the context has no clock
  const Clock* clock_;                    // context_.clock, or own_clock_
  std::unique_ptr<OpenAiRoutes> openai_;  // null without a tokenizer
  HttpRouter router_;
  std::unique_ptr<Transport> transport_;
  int port_ = -1;

  std::atomic<bool> serve_done_{false};      // Serve() has returned
  std::atomic<int64_t> num_connections_{0};  // open connections, refused ones excluded
};

}  // namespace tinyserve
