// HttpServer: tinyserve's HTTP frontend (DESIGN §6), a cpp-httplib server with every route
// registered in one place (RegisterRoutes in http_server.cc).
//
// Routes so far: GET /health (200, or 503 when ServerContext::is_healthy says the engine is dead)
// and GET /metrics (the Prometheus text of ServerContext::metrics, Content-Type
// kPrometheusContentType). Unknown routes, oversized bodies and handler exceptions get the JSON
// error body of server/error_json.h. The OpenAI routes (/v1/...) are added here by the server
// issue.
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
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/status.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tinyserve {

class EngineCore;
class PrometheusMetrics;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                          // 0: any free port (see HttpServer::port())
  size_t max_body_bytes = size_t{4} << 20;  // larger request bodies get 413
  int num_threads = 64;                     // worker pool (one per concurrent connection)
  size_t keep_alive_max_count = 1000;       // requests per keep-alive connection
};

// What the handlers use. Every pointer may be null (a route that needs it then answers 503).
struct ServerContext {
  std::string served_model_name;
  EngineCore* engine = nullptr;
  const PrometheusMetrics* metrics = nullptr;
  std::function<bool()> is_healthy;  // null: always healthy
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
  // Stops accepting and makes Serve() return. Thread-safe, idempotent.
  void Stop();

 private:
  void RegisterRoutes();
  void HandleHealth(const httplib::Request& req, httplib::Response& res) const;
  void HandleMetrics(const httplib::Request& req, httplib::Response& res) const;

  const HttpServerOptions options_;
  const ServerContext context_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = -1;

  std::mutex mu_;
  bool stop_requested_ = false;          // guarded by mu_
  bool serving_ = false;                 // guarded by mu_; Serve() has entered the listen loop
  std::atomic<bool> serve_done_{false};  // the listen loop has returned
};

}  // namespace tinyserve
