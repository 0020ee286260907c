// HttpServer: tinyserve's HTTP frontend (DESIGN §6), a cpp-httplib server with every route
// registered in one place (RegisterRoutes in http_server.cc).
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
// /debug/request_timelines are open, as vLLM's /metrics). Before any body is read, the pre-routing
// handler drops Range and refuses what server/request_guard.h refuses (framing, encodings,
// non-JSON content on the JSON routes), then checks the API key; those answers, and httplib's own
// errors (unknown routes, oversized bodies, malformed heads), close the connection, so no unread
// body is parsed as a request. Handler exceptions get a 500 without their text (logged to
// stderr). Every error has the JSON body of server/error_json.h.
//
// Connections (server/connection_queue.h): num_threads workers serve them, one connection each
// (every keep-alive request on it); the accept time of each is stamped with the context's clock
// and is the arrival_ts of its first request (a later keep-alive request arrives when its
// handling starts), so TTFT and e2e count the wait for a worker, which
// tinyserve_http_queue_time_seconds exports. Over max_connections (queued or served), a new
// connection's request gets 503 with `Connection: close` and
// vllm:admission_rejections_total{reason="max_connections"} counts it.
//
// Shutdown: Drain() makes new generation requests get 503 while the ones in flight go on
// (num_in_flight() counts them); Stop() then ends the listen loop and shuts the reading side of
// every accepted connection (server/connection_sockets.h), so that a worker reading a request
// head (however slowly the client trickles it) or waiting for a keep-alive request ends at once,
// while answers being written go on; AbortConnections() shuts both sides, for writes that do not
// end (a client that reads nothing). Serve() returns when every worker has ended.
//
// Pipelining: httplib 0.11.4 reads a connection through a buffer that it drops after each
// request, so requests the client sent behind the one being answered are lost. The post-routing
// handler compares the bytes read from the socket (server/connection_sockets.h) with the size of
// the request as a client writes it (`Name: value` header lines, CRLF); when more was read, the
// answer carries `Connection: close` and the connection is closed after it, so the client
// retries the rest on a new connection (RFC 9112 9.3.2) instead of waiting for httplib's 5 s
// keep-alive timeout. A request sent with LF-only lines and pipelined behind may go undetected
// (then the connection closes at that timeout); a header value httplib percent-decodes, or
// extra spaces, make an unpipelined request look longer than counted: it gets the close too,
// which costs the client a new connection only. (The head is counted in the pre-routing
// handler, before Range is dropped.)
// Half-close: httplib 0.11.4 writes nothing to a socket whose peer has sent FIN (its
// SocketStream::is_writable() peeks and sees the end), so a client that sent its request and
// shut its sending side got no answer. The post-routing handler writes such an answer itself
// (and a pipelined one: status line, headers, body, `Connection: close`), then ends the
// connection (LingeringClose); httplib's own write then fails and it closes the socket. A
// stream (a content provider) only gets `Connection: close` (and a half-closed streaming client
// is taken as gone: server/connection_watch.h).
//
// Lifecycle: construct, Bind() (port 0 picks a free port), then Serve() blocks on the calling
// thread until Stop() is called from any other thread (or a signal-watching thread). Stop() is
// thread-safe and idempotent; after it, Serve() returns once in-flight handlers finish.
//
// Ownership: owns the httplib::Server; the context's pointers are borrowed and must outlive the
// server. Handlers run on the server's worker threads. The thread running Serve() must have
// returned before the server is destroyed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "server/sse_writer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

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
  int num_threads = 512;                    // worker pool (one per concurrent connection/stream)
  // Connections queued for a worker or being served beyond which a new one gets 503 and is
  // closed (0: unlimited, they wait unseen in the queue). --max-connections.
  int64_t max_connections = 2048;
  size_t keep_alive_max_count = 1000;  // requests per keep-alive connection
  // Threads writing the SSE streams, each taking every other new stream (0: each stream's HTTP
  // worker). 2 beat 1 at 100 streams even on 2 vCPUs (bench/RESULTS.md).
  int sse_writer_threads = 2;
  SseWriterOptions sse_writer_options;  // stall limit; a send observer for benchmarks
  int socket_send_buffer_bytes = 0;     // > 0: SO_SNDBUF of every connection (0: the kernel's)
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
  // Stops accepting, ends the streams in flight (their engine requests are aborted), shuts the
  // reading side of every accepted connection and makes Serve() return once the workers end.
  // Thread-safe, idempotent; each call shuts the connections accepted since the last one again.
  void Stop();
  // Shuts both sides of every accepted connection (writes in progress fail). For a shutdown whose
  // connections did not end after Stop(). Thread-safe.
  void AbortConnections();
  // Returns true iff Serve() has returned (every worker has ended). Thread-safe.
  bool has_stopped() const { return serve_done_.load(); }
  // New generation requests get 503 from now on; those in flight go on. Thread-safe.
  void Drain();
  // The generation requests in flight (0 without the OpenAI routes). Thread-safe.
  int64_t num_in_flight() const;
  // The engine requests in flight, as --max-num-queued-reqs counts them. Thread-safe.
  int64_t num_waiting() const;
  // The HTTP connections queued for a worker or being served (as max_connections counts them;
  // the refused ones excluded). Thread-safe.
  int64_t num_connections() const { return num_connections_.load(); }

 private:
  void RegisterRoutes();
  void HandleHealth(const httplib::Request& req, httplib::Response& res) const;
  void HandleMetrics(const httplib::Request& req, httplib::Response& res) const;
  // GET /debug/request_timelines: RequestTimelineLog::RenderJson at the clock's now.
  void HandleRequestTimelines(const httplib::Request& req, httplib::Response& res) const;
  // GET /load: vLLM's shape, {"server_load": N} (vLLM's OpenAI server, route GET /load,
  // get_server_load_metrics: the requests in flight on the generation routes). GET /get_load:
  // what vllm-project/router's load monitor polls (src/routers/http/router.rs,
  // get_worker_load_static: GET {worker}/get_load, reads the integer field "load"), {"load": N}.
  // N is num_in_flight(): HTTP generation requests admitted and not yet answered.
  void HandleLoad(const httplib::Request& req, httplib::Response& res, const char* key) const;

  const HttpServerOptions options_;
  const ServerContext context_;
  std::unique_ptr<Clock> own_clock_;      // a SteadyClock when the context has no clock
  const Clock* clock_;                    // context_.clock, or own_clock_
  std::unique_ptr<OpenAiRoutes> openai_;  // null without a tokenizer
  std::unique_ptr<httplib::Server> server_;
  int port_ = -1;
  int listen_socket_ = -1;  // set by httplib's socket-options callback when it binds

  Mutex mu_;
  bool stop_requested_ TS_GUARDED_BY(mu_) = false;
  bool serving_ TS_GUARDED_BY(mu_) = false;  // Serve() has entered the listen loop
  std::atomic<bool> serve_done_{false};      // the listen loop has returned
  std::atomic<bool> listen_stopped_{false};  // Stop() has called httplib's stop()
  std::atomic<int64_t> num_connections_{0};  // kept by the ConnectionQueue
};

}  // namespace tinyserve
