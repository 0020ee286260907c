#include "server/http_server.h"

#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>

#include <thread>
#include "engine/engine_core.h"

#include "base/clock.h"
#include "metrics/openmetrics_text.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/request_timeline_log.h"
#include "server/connection_queue.h"
#include "server/connection_sockets.h"
#include "server/connection_watch.h"
#include "server/dashboard_page.h"
#include "server/error_json.h"
#include "server/openai_routes.h"
#include "server/request_guard.h"

namespace tinyserve {
namespace {

// The bytes of `req`'s head as clients write it: the request line and `Name: value` header lines,
// each ended by CRLF, and the blank line. httplib adds the connection's addresses as headers of
// its own; they are not counted.
int64_t HeadBytes(const httplib::Request& req) {
  int64_t size = static_cast<int64_t>(req.method.size() + req.target.size() + req.version.size()) +
                 4;  // two spaces, CRLF
  for (const auto& [name, value] : req.headers) {
    if (name == "REMOTE_ADDR" || name == "REMOTE_PORT" || name == "LOCAL_ADDR" ||
        name == "LOCAL_PORT") {
      continue;
    }
    size += static_cast<int64_t>(name.size() + value.size()) + 4;  // ": ", CRLF
  }
  return size + 2;
}

// Returns true iff the peer of socket `fd` has sent FIN (a half-close, or a close) but no reset.
bool PeerSentFin(int fd) {
  pollfd p{};
  p.fd = fd;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & POLLRDHUP) != 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) == 0;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";  // clients ignore the phrase (RFC 9112 4)
  }
}

// Writes `res` (a whole body, not a content provider) to socket `fd` with `Connection: close`,
// then ends the connection (LingeringClose). httplib's own write of the answer then fails (its
// SocketStream::is_writable() peeks, and sees the end), and it closes the connection.
void WriteAnswerAndClose(int fd, const httplib::Request& req, const httplib::Response& res) {
  std::string out =
      "HTTP/1.1 " + std::to_string(res.status) + " " + ReasonPhrase(res.status) + "\r\n";
  for (const auto& [name, value] : res.headers) {
    if (name == "Connection" || name == "Keep-Alive") continue;
    out += name + ": " + value + "\r\n";
  }
  out += "Connection: close\r\n\r\n";
  if (req.method != "HEAD") out += res.body;
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  LingeringClose(fd);
}

// The post-routing handler (see http_server.h): when more bytes were read from the connection
// than this request holds (pipelining), or the client has sent FIN (a half-close: httplib 0.11.4
// would write nothing to it), the answer is written here and closes the connection. A stream
// (a content provider) only gets `Connection: close`.
void CloseIfPipelinedOrHalfClosed(const httplib::Request& req, httplib::Response& res) {
  ConnectionState* connection = CurrentConnection();
  if (connection == nullptr || res.get_header_value("Connection") == "close") return;
  const int fd = ConnectionWatch::ForRequest(req).fd();
  const int64_t bytes_read = fd >= 0 ? BytesReadFromSocket(fd) : -1;
  if (bytes_read < 0) return;
  const int64_t request_bytes = bytes_read - connection->bytes_read;
  connection->bytes_read = bytes_read;
  const bool pipelined =
      request_bytes > connection->request_head_bytes + static_cast<int64_t>(req.body.size());
  if (!pipelined && !PeerSentFin(fd)) return;
  if (res.content_provider_ == nullptr) {
    WriteAnswerAndClose(fd, req, res);
    return;
  }
  res.headers.erase("Keep-Alive");
  res.headers.erase("Connection");
  res.set_header("Connection", "close");
}

}  // namespace

HttpServer::HttpServer(HttpServerOptions options, ServerContext context)
    : options_(std::move(options)),
      context_(std::move(context)),
      own_clock_(context_.clock == nullptr ? std::make_unique<SteadyClock>() : nullptr),
      clock_(context_.clock != nullptr ? context_.clock : own_clock_.get()),
      server_(std::make_unique<httplib::Server>()) {
  if (context_.tokenizer != nullptr) {
    OpenAiContext openai;
    openai.engine = context_.engine;
    openai.tokenizer = context_.tokenizer;
    openai.clock = context_.clock;
    openai.served_model_name = context_.served_model_name;
    openai.model_root = context_.model_root;
    openai.max_model_len = context_.max_model_len > 0 || context_.engine == nullptr
                               ? context_.max_model_len
                               : context_.engine->max_model_len();
    openai.chat_template = context_.chat_template;
    openai.tool_call_parser = context_.tool_call_parser;
    openai.api_key = context_.api_key;
    openai.max_queue_len = context_.max_queue_len;
    openai.max_num_queued_tokens = context_.max_num_queued_tokens;
    openai.metrics = context_.metrics;
    openai.enable_per_request_metrics = context_.enable_per_request_metrics;
    openai.max_choices_per_request = context_.max_choices_per_request;
    openai.max_logprobs_per_request = context_.max_logprobs_per_request;
    openai.version = TINYSERVE_VERSION;
    openai.is_healthy = context_.is_healthy;
    openai.sse_writer_threads = options_.sse_writer_threads;
    openai.sse_writer_options = options_.sse_writer_options;
    openai_ = std::make_unique<OpenAiRoutes>(std::move(openai));
  }
  server_->new_task_queue = [this] {
    const PrometheusMetrics* metrics = context_.metrics;
    return new ConnectionQueue(
        options_.num_threads, options_.max_connections, clock_, &num_connections_, [metrics] {
          if (metrics == nullptr) return;
          metrics->admission_rejections[static_cast<int>(AdmissionRejection::kMaxConnections)]
              ->Increment();
        });
  };
  // Without TCP_NODELAY every small write (an SSE chunk) can stall ~40 ms (Nagle + delayed ACK).
  server_->set_tcp_nodelay(true);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let a second server
  // silently share (and load-balance) the port instead of failing to bind.
  server_->set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // Accepted sockets inherit it from the listening socket.
    if (options_.socket_send_buffer_bytes > 0) {
      setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &options_.socket_send_buffer_bytes,
                 sizeof(options_.socket_send_buffer_bytes));
    }
    listen_socket_ = static_cast<int>(sock);
  });
  server_->set_keep_alive_max_count(options_.keep_alive_max_count);
  server_->set_payload_max_length(options_.max_body_bytes);
  httplib::Server::HandlerWithResponse on_error = [](const httplib::Request& req,
                                                     httplib::Response& res) {
    // Our own errors: a body, or the closing answer of SendErrorAndClose (a content provider).
    if (!res.body.empty() || res.has_header("Connection")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string message;
    switch (res.status) {
      case 404:
        message = "Route " + req.method + " " + req.path + " not found";
        break;
      case 413:
        message = "Request body is larger than the limit";
        break;
      default:
        message = "HTTP error " + std::to_string(res.status);
        break;
    }
    // httplib's own errors (a malformed head, an oversized body, no route) may leave bytes of
    // the request unread: the connection is closed after the answer.
    SendErrorAndClose(req, res, protocol::ApiError::Make(res.status, message));
    return httplib::Server::HandlerResponse::Handled;
  };
  server_->set_error_handler(std::move(on_error));
  // Before the body is read: the head checks, then the API key (answers close the connection).
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // The request's handling starts: its arrival (the accept, for a connection's first) and the
    // wait between.
    const double now = clock_->Now();
    const double arrival = BeginRequest(now);
    if (context_.metrics != nullptr) context_.metrics->http_queue_time.Observe(now - arrival);
    ConnectionState* connection = CurrentConnection();
    if (connection != nullptr) connection->request_head_bytes = HeadBytes(req);
    if (connection != nullptr && connection->rejected) {
      SendErrorAndClose(req, res,
                        protocol::ApiError::Make(
                            503, "the server has too many connections (--max-connections " +
                                     std::to_string(options_.max_connections) + "); retry later"));
      return httplib::Server::HandlerResponse::Handled;
    }
    IgnoreRange(req);
    std::optional<protocol::ApiError> error = CheckRequestHead(
        req, openai_ != nullptr && OpenAiRoutes::TakesJsonBody(req.method, req.path),
        options_.max_body_bytes);
    if (!error && openai_ != nullptr) error = openai_->CheckAuthorization(req);
    if (!error) return httplib::Server::HandlerResponse::Unhandled;
    SendErrorAndClose(req, res, *error);
    return httplib::Server::HandlerResponse::Handled;
  });
  server_->set_post_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    CloseIfPipelinedOrHalfClosed(req, res);
  });
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res,
                                    std::exception_ptr ep) { SetInternalErrorResponse(res, ep); });
  RegisterRoutes();
}

HttpServer::~HttpServer() { Stop(); }

// Every route of the server, in one place.
void HttpServer::RegisterRoutes() {
  server_->Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    HandleHealth(req, res);
  });
  server_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    HandleMetrics(req, res);
  });
  server_->Get("/dashboard", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(DashboardHtml(), "text/html; charset=utf-8");
  });
  server_->Get("/debug/request_timelines",
               [this](const httplib::Request& req, httplib::Response& res) {
                 HandleRequestTimelines(req, res);
               });
  server_->Get("/load", [this](const httplib::Request& req, httplib::Response& res) {
    HandleLoad(req, res, "server_load");
  });
  server_->Get("/get_load", [this](const httplib::Request& req, httplib::Response& res) {
    HandleLoad(req, res, "load");
  });
  if (openai_ != nullptr) openai_->Register(*server_);
}

void HttpServer::Drain() {
  if (openai_ != nullptr) openai_->Drain();
}

int64_t HttpServer::num_waiting() const { return openai_ != nullptr ? openai_->num_waiting() : 0; }

int64_t HttpServer::num_in_flight() const {
  return openai_ != nullptr ? openai_->num_in_flight() : 0;
}

Status HttpServer::Bind() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ < 0) return Unavailable("cannot bind " + options_.host + " to a free port");
  } else {
    if (!server_->bind_to_port(options_.host, options_.port)) {
      return Unavailable("cannot bind " + options_.host + ":" + std::to_string(options_.port));
    }
    port_ = options_.port;
  }
  // The system libcpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when
  // the library was built): a burst of new connections (hundreds of clients starting streams at
  // once) would overflow the accept queue and stall or fail. listen() again raises it.
  if (listen_socket_ >= 0) listen(listen_socket_, SOMAXCONN);
  return Status::Ok();
}

Status HttpServer::Serve() {
  {
    MutexLock lock(mu_);
    if (stop_requested_) return Status::Ok();
    serving_ = true;
  }
  const bool ok = server_->listen_after_bind();
  serve_done_.store(true);
  return ok ? Status::Ok() : Unavailable("the HTTP listen loop failed");
}

void HttpServer::Stop() {
  // The streams' workers sleep until the writer ends them (httplib only ends a stream between
  // provider calls).
  if (openai_ != nullptr) openai_->Stop();
  {
    MutexLock lock(mu_);
    stop_requested_ = true;
    if (!serving_) return;  // Serve() has not started; it will return at once
  }
  // httplib's stop() only acts on a running listen loop: wait for Serve() to get there. Once only:
  // the loop counts as running until its workers have ended, and a second stop() asserts.
  if (!listen_stopped_.exchange(true)) {
    while (!server_->is_running() && !serve_done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    server_->stop();
  }
  // Workers blocked reading a request head or waiting for the next request wake up now.
  if (port_ > 0) ShutdownAcceptedSockets(port_, SHUT_RD);
}

void HttpServer::AbortConnections() {
  if (port_ > 0) ShutdownAcceptedSockets(port_, SHUT_RDWR);
}

void HttpServer::HandleHealth(const httplib::Request&, httplib::Response& res) const {
  if (context_.engine != nullptr && context_.engine->is_dead()) {
    SetErrorResponse(
        res, 503,
        "the engine is dead after a fatal error: " + context_.engine->death_status().ToString());
    return;
  }
  if (context_.is_healthy && !context_.is_healthy()) {
    SetErrorResponse(res, 503, "the engine is not running");
    return;
  }
  res.status = 200;
}

void HttpServer::HandleLoad(const httplib::Request&, httplib::Response& res,
                            const char* key) const {
  nlohmann::json body = nlohmann::json::object();
  body[key] = num_in_flight();
  res.set_content(body.dump(), "application/json");
}

void HttpServer::HandleMetrics(const httplib::Request& req, httplib::Response& res) const {
  if (context_.metrics == nullptr) {
    SetErrorResponse(res, 503, "metrics are not enabled");
    return;
  }
  // Prometheus text 0.0.4 unless the scraper's Accept asks for OpenMetrics.
  res.set_header("Vary", "Accept");
  if (NegotiateExposition(req.get_header_value("Accept")) == ExpositionFormat::kOpenMetrics100) {
    res.set_content(context_.metrics->RenderOpenMetrics(), kOpenMetricsContentType);
    return;
  }
  res.set_content(context_.metrics->Render(), kPrometheusContentType);
}

void HttpServer::HandleRequestTimelines(const httplib::Request&, httplib::Response& res) const {
  if (context_.timelines == nullptr || context_.clock == nullptr) {
    SetErrorResponse(res, 503, "request timelines are not enabled");
    return;
  }
  res.set_header("Cache-Control", "no-store");
  res.set_content(context_.timelines->RenderJson(context_.clock->Now()), "application/json");
}

}  // namespace tinyserve
