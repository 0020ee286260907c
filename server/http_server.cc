#include "server/http_server.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "metrics/openmetrics_text.h"
#include "metrics/prometheus_metrics.h"
#include "metrics/request_timeline_log.h"
#include "server/dashboard_page.h"
#include "server/error_json.h"
#include "server/openai_routes.h"
#include "server/request_guard.h"

namespace tinyserve {
namespace {

// Connections accepted beyond max_connections that still get their 503; past these, libmicrohttpd
// closes a new connection at once.
constexpr int64_t kRefusedConnections = 64;
// How often the sweeper looks at parked streams (their ticks) and at request deadlines.
constexpr auto kSweepPeriod = std::chrono::milliseconds(20);
// A lingering close (Transport::Connection::linger_fd) drains for at most this long and this much.
constexpr double kLingerSeconds = 1.0;
constexpr size_t kLingerBytes = size_t{16} << 20;
// The size of the chunks libmicrohttpd asks a stream for.
constexpr size_t kStreamBlockBytes = size_t{32} << 10;

double SteadySeconds() { return SteadyClock().Now(); }

}  // namespace

// The libmicrohttpd daemon (one epoll thread), the handler workers, and a sweeper thread (stream
// ticks, request deadlines). Callbacks named On* run on the daemon thread.
class HttpServer::Transport {
 public:
  explicit Transport(HttpServer* server) : server_(server), options_(server->options_) {}
  ~Transport();

  Status Bind(int* port);
  Status Serve();
  void Stop();
  void Abort() { abort_.store(true); }

 private:
  // One TCP connection (libmicrohttpd's socket context).
  struct Connection {
    int fd = -1;
    double accept_ts = 0.0;  // the server clock's
    int64_t num_requests = 0;
    bool refused = false;  // over max_connections: every request gets 503 and the close
    // Steady seconds since which the connection's next (or current) request head and body are
    // awaited; < 0 while a request is being handled or answered. Guarded by connections_mu_.
    double reading_since_s = -1.0;
    // A duplicate of the socket, taken when an answer is queued before the request's body was
    // read: once libmicrohttpd has closed the connection, the sweeper drains what the client
    // still sends through it (a lingering close), so that the client reads the answer instead of
    // a reset.
    int linger_fd = -1;
  };
  // A socket being drained after its connection was closed (Connection::linger_fd).
  struct Lingering {
    int fd = -1;
    double deadline_s = 0.0;  // steady seconds
    size_t num_drained = 0;
    bool fin_sent = false;
  };
  // One request (libmicrohttpd's request context), from its request line to its completion.
  struct Exchange {
    Connection* connection = nullptr;
    MHD_Connection* mhd = nullptr;
    HttpRequest req;
    HttpResponse res;
    enum class Phase { kHead, kBody, kHandling, kAnswered } phase = Phase::kHead;
    bool answering = false;  // an answer was queued (counted in num_answering_)
  };
  // One streamed response (the content reader's closure).
  struct Stream {
    Transport* transport = nullptr;
    MHD_Connection* mhd = nullptr;
    int fd = -1;  // the connection's socket
    std::shared_ptr<HttpBodyStream> body;
    // Daemon thread only.
    std::string pending;  // produced, not yet handed to libmicrohttpd
    size_t offset = 0;
    bool finished = false;  // the body produced its last bytes
    bool complete = false;  // ... and libmicrohttpd took them all
    // Wake-ups, any thread.
    Mutex mu;
    bool parked TS_GUARDED_BY(mu) = false;  // the connection is suspended until a wake-up
    double parked_since_s TS_GUARDED_BY(mu) = 0.0;
    uint64_t num_wakes TS_GUARDED_BY(mu) = 0;
    std::atomic<bool> fail{false};  // end the response with an error (the server stops)
  };

  // libmicrohttpd's callbacks are C: an exception escaping one (an allocation failing) would end
  // the process. Each is registered through a Guarded* form that catches it: the request's
  // connection is closed (OnRequestLine, OnAccess), the stream ends with an error (ReadStream),
  // or the bookkeeping of a closing connection goes on (OnConnection, OnCompleted, FreeStream).
  static void OnConnection(void* cls, MHD_Connection* mhd, void** socket_context,
                           MHD_ConnectionNotificationCode code);
  static void* OnRequestLine(void* cls, const char* uri, MHD_Connection* mhd);
  static MHD_Result OnAccess(void* cls, MHD_Connection* mhd, const char* url, const char* method,
                             const char* version, const char* upload_data, size_t* upload_data_size,
                             void** request_context);
  static void OnCompleted(void* cls, MHD_Connection* mhd, void** request_context,
                          MHD_RequestTerminationCode code);
  static ssize_t ReadStream(void* cls, uint64_t pos, char* buf, size_t max);
  static void FreeStream(void* cls);
  static void GuardedOnConnection(void* cls, MHD_Connection* mhd, void** socket_context,
                                  MHD_ConnectionNotificationCode code) noexcept {
    try {
      OnConnection(cls, mhd, socket_context, code);
    } catch (...) {
    }
  }
  static void* GuardedOnRequestLine(void* cls, const char* uri, MHD_Connection* mhd) noexcept {
    try {
      return OnRequestLine(cls, uri, mhd);
    } catch (...) {
      return nullptr;  // OnAccess then closes the connection
    }
  }
  static MHD_Result GuardedOnAccess(void* cls, MHD_Connection* mhd, const char* url,
                                    const char* method, const char* version,
                                    const char* upload_data, size_t* upload_data_size,
                                    void** request_context) noexcept {
    try {
      return OnAccess(cls, mhd, url, method, version, upload_data, upload_data_size,
                      request_context);
    } catch (...) {
      return MHD_NO;
    }
  }
  static void GuardedOnCompleted(void* cls, MHD_Connection* mhd, void** request_context,
                                 MHD_RequestTerminationCode code) noexcept {
    try {
      OnCompleted(cls, mhd, request_context, code);
    } catch (...) {
    }
  }
  static ssize_t GuardedReadStream(void* cls, uint64_t pos, char* buf, size_t max) noexcept {
    try {
      return ReadStream(cls, pos, buf, max);
    } catch (...) {
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }

  // The request's head, from libmicrohttpd's parse.
  void ReadHead(Exchange& ex, const char* url, const char* method, const char* version);
  // Queues ex.res; returns false iff libmicrohttpd refused it (the connection is closed).
  bool QueueAnswer(Exchange& ex);
  // Resumes a parked stream (a wake-up).
  static void Wake(Stream& stream);
  // Ends every stream now.
  void FailStreams();
  void SetReadingSince(Connection* connection, double since_s);
  void Work();
  void Sweep();
  // Accepts connections until the stop, stamps each, and hands it to the daemon.
  void Accept();
  // Drains the lingering sockets; closes those done (or all, with `all`). REQUIRES: the sweeper
  // thread, or the sweeper has ended.
  void Linger(bool all);

  HttpServer* const server_;
  const HttpServerOptions& options_;
  int listen_fd_ = -1;
  MHD_Daemon* daemon_ = nullptr;

  Mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_requested_ TS_GUARDED_BY(stop_mu_) = false;
  std::atomic<bool> stopping_{false};  // Serve() is shutting down
  std::atomic<bool> abort_{false};
  std::atomic<int64_t> num_answering_{0};  // answers queued and not completed

  Mutex tasks_mu_;
  std::condition_variable tasks_cv_;
  std::deque<Exchange*> tasks_ TS_GUARDED_BY(tasks_mu_);
  bool tasks_closed_ TS_GUARDED_BY(tasks_mu_) = false;
  std::vector<std::thread> workers_;

  Mutex connections_mu_;
  std::unordered_set<Connection*> connections_ TS_GUARDED_BY(connections_mu_);
  Mutex streams_mu_;
  std::unordered_map<Stream*, std::shared_ptr<Stream>> streams_ TS_GUARDED_BY(streams_mu_);
  std::vector<Lingering> lingering_ TS_GUARDED_BY(connections_mu_);
  std::atomic<bool> sweeping_{false};
  std::thread sweeper_;
  // Accept times (the server clock's) by socket, from the acceptor to OnConnection.
  Mutex accepted_mu_;
  std::unordered_map<int, double> accept_ts_ TS_GUARDED_BY(accepted_mu_);
  std::thread acceptor_;
};

HttpServer::Transport::~Transport() {
  if (listen_fd_ >= 0) close(listen_fd_);
}

Status HttpServer::Transport::Bind(int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  const std::string service = std::to_string(options_.port);
  if (getaddrinfo(options_.host.c_str(), service.c_str(), &hints, &found) != 0) {
    return Unavailable("cannot resolve " + where);
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only: SO_REUSEPORT would let a second server silently share the port.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    // Accepted sockets inherit it from the listening socket.
    if (options_.socket_send_buffer_bytes > 0) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options_.socket_send_buffer_bytes,
                 sizeof(options_.socket_send_buffer_bytes));
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return Unavailable("cannot bind " + where);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  listen_fd_ = fd;
  return Status::Ok();
}

Status HttpServer::Transport::Serve() {
  {
    MutexLock lock(stop_mu_);
    if (stop_requested_) return Status::Ok();
  }
  // libmicrohttpd's own default limit is FD_SETSIZE - 4 (1020): "unlimited" is what descriptors
  // allow.
  const int64_t limit =
      options_.max_connections > 0 ? options_.max_connections + kRefusedConnections : 1 << 24;
  // Our own thread accepts (and stamps each accept), so that a burst of connects is taken off the
  // listen queue at once rather than between the daemon's other work.
  daemon_ = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET, 0,
      nullptr, nullptr, &GuardedOnAccess, this, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      options_.connection_memory_bytes, MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned int>(std::max(1.0, options_.idle_timeout_s)),
      MHD_OPTION_NOTIFY_CONNECTION, &GuardedOnConnection, this, MHD_OPTION_NOTIFY_COMPLETED,
      &GuardedOnCompleted, this, MHD_OPTION_URI_LOG_CALLBACK, &GuardedOnRequestLine, this,
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(std::min<int64_t>(limit, 1 << 24)),
      MHD_OPTION_END);
  if (daemon_ == nullptr) return Unavailable("the HTTP daemon (libmicrohttpd) did not start");
  for (int i = 0; i < std::max(1, options_.num_threads); ++i) {
    workers_.emplace_back([this] { Work(); });
  }
  sweeping_.store(true);
  sweeper_ = std::thread([this] { Sweep(); });
  acceptor_ = std::thread([this] { Accept(); });
  {
    MutexLock lock(stop_mu_);
    while (!stop_requested_) lock.Wait(stop_cv_);
  }
  // Stop: no new connection; the streams end; the handlers running answer (requests still queued
  // get 503), and those answers are written; then every connection is closed.
  stopping_.store(true);
  shutdown(listen_fd_, SHUT_RDWR);  // ends the acceptor's accept()
  acceptor_.join();
  close(listen_fd_);
  listen_fd_ = -1;
  FailStreams();
  {
    MutexLock lock(tasks_mu_);
    tasks_closed_ = true;
  }
  tasks_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  FailStreams();  // those the last handlers started
  while (num_answering_.load() > 0 && !abort_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  sweeping_.store(false);
  sweeper_.join();
  MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
  Linger(/*all=*/true);
  return Status::Ok();
}

void HttpServer::Transport::Stop() {
  {
    MutexLock lock(stop_mu_);
    stop_requested_ = true;
  }
  stop_cv_.notify_all();
}

void HttpServer::Transport::SetReadingSince(Connection* connection, double since_s) {
  MutexLock lock(connections_mu_);
  connection->reading_since_s = since_s;
}

void HttpServer::Transport::OnConnection(void* cls, MHD_Connection* mhd, void** socket_context,
                                         MHD_ConnectionNotificationCode code) {
  auto* self = static_cast<Transport*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    auto* connection = new Connection;
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_CONNECTION_FD);
    connection->fd = info != nullptr ? info->connect_fd : -1;
    connection->accept_ts = self->server_->clock_->Now();
    {
      MutexLock lock(self->accepted_mu_);
      auto it = self->accept_ts_.find(connection->fd);
      if (it != self->accept_ts_.end()) {
        connection->accept_ts = it->second;
        self->accept_ts_.erase(it);
      }
    }
    const int64_t max = self->options_.max_connections;
    {
      MutexLock lock(self->connections_mu_);
      connection->reading_since_s = SteadySeconds();
      connection->refused = max > 0 && self->server_->num_connections_.load() >= max;
      if (!connection->refused) self->server_->num_connections_.fetch_add(1);
      self->connections_.insert(connection);
    }
    const PrometheusMetrics* metrics = self->server_->context_.metrics;
    if (connection->refused && metrics != nullptr) {
      metrics->admission_rejections[static_cast<int>(AdmissionRejection::kMaxConnections)]
          ->Increment();
    }
    *socket_context = connection;
    return;
  }
  auto* connection = static_cast<Connection*>(*socket_context);
  if (connection == nullptr) return;
  {
    // Before libmicrohttpd closes the socket: the sweeper never shuts a reused descriptor.
    MutexLock lock(self->connections_mu_);
    self->connections_.erase(connection);
    if (!connection->refused) self->server_->num_connections_.fetch_sub(1);
    if (connection->linger_fd >= 0) {
      self->lingering_.push_back({connection->linger_fd, SteadySeconds() + kLingerSeconds});
    }
  }
  delete connection;
  *socket_context = nullptr;
}

void* HttpServer::Transport::OnRequestLine(void* cls, const char* uri, MHD_Connection* mhd) {
  auto* self = static_cast<Transport*>(cls);
  auto* ex = new Exchange;
  ex->mhd = mhd;
  const MHD_ConnectionInfo* info = MHD_get_connection_info(mhd, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  ex->connection = info != nullptr ? static_cast<Connection*>(info->socket_context) : nullptr;
  ex->req.target = uri != nullptr ? uri : "";
  // A connection's first request arrived with the connection; a later one now, at its request
  // line.
  const double now = self->server_->clock_->Now();
  ex->req.arrival_ts = now;
  if (ex->connection != nullptr) {
    if (ex->connection->num_requests == 0) ex->req.arrival_ts = ex->connection->accept_ts;
    ++ex->connection->num_requests;
  }
  return ex;
}

void HttpServer::Transport::ReadHead(Exchange& ex, const char* url, const char* method,
                                     const char* version) {
  HttpRequest& req = ex.req;
  req.method = method;
  req.path = url;
  req.version = version;
  req.socket_fd = ex.connection != nullptr ? ex.connection->fd : -1;
  MHD_get_connection_values_n(
      ex.mhd, MHD_HEADER_KIND,
      [](void* cls, MHD_ValueKind, const char* key, size_t key_size, const char* value,
         size_t value_size) {
        static_cast<HttpHeaders*>(cls)->emplace(
            std::string(key, key_size),
            value != nullptr ? std::string(value, value_size) : std::string());
        return MHD_YES;
      },
      &req.headers);
  MHD_get_connection_values_n(
      ex.mhd, MHD_GET_ARGUMENT_KIND,
      [](void* cls, MHD_ValueKind, const char* key, size_t key_size, const char* value,
         size_t value_size) {
        static_cast<std::multimap<std::string, std::string>*>(cls)->emplace(
            std::string(key, key_size),
            value != nullptr ? std::string(value, value_size) : std::string());
        return MHD_YES;
      },
      &req.params);
}

MHD_Result HttpServer::Transport::OnAccess(void* cls, MHD_Connection* mhd, const char* url,
                                           const char* method, const char* version,
                                           const char* upload_data, size_t* upload_data_size,
                                           void** request_context) {
  auto* self = static_cast<Transport*>(cls);
  auto* ex = static_cast<Exchange*>(*request_context);
  if (ex == nullptr) return MHD_NO;  // OnRequestLine always makes one
  switch (ex->phase) {
    case Exchange::Phase::kHead: {
      self->ReadHead(*ex, url, method, version);
      std::optional<protocol::ApiError> error;
      if (ex->connection != nullptr && ex->connection->refused) {
        error = protocol::ApiError::Make(
            503, "the server has too many connections (--max-connections " +
                     std::to_string(self->options_.max_connections) + "); retry later");
      } else if (self->stopping_.load()) {
        error = protocol::ApiError::Make(503, "the server is shutting down");
      } else {
        error = self->server_->CheckHead(ex->req);
      }
      if (error) {
        SetErrorAndClose(ex->res, *error);
        if (ex->connection != nullptr) {
          self->SetReadingSince(ex->connection, -1.0);
          if (ex->connection->linger_fd < 0 && ex->connection->fd >= 0) {
            ex->connection->linger_fd = fcntl(ex->connection->fd, F_DUPFD_CLOEXEC, 0);
          }
        }
        ex->phase = Exchange::Phase::kAnswered;
        return self->QueueAnswer(*ex) ? MHD_YES : MHD_NO;
      }
      ex->phase = Exchange::Phase::kBody;
      return MHD_YES;
    }
    case Exchange::Phase::kBody:
      if (*upload_data_size > 0) {
        // Over the limit (a chunked body; a Content-Length over it was refused with the head):
        // the connection is closed.
        if (ex->req.body.size() + *upload_data_size > self->options_.max_body_bytes) return MHD_NO;
        ex->req.body.append(upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
      }
      if (ex->connection != nullptr) self->SetReadingSince(ex->connection, -1.0);
      ex->phase = Exchange::Phase::kHandling;
      MHD_suspend_connection(mhd);
      {
        MutexLock lock(self->tasks_mu_);
        self->tasks_.push_back(ex);
      }
      self->tasks_cv_.notify_one();
      return MHD_YES;
    case Exchange::Phase::kHandling:
      // Resumed by the worker with the answer in ex->res.
      ex->phase = Exchange::Phase::kAnswered;
      return self->QueueAnswer(*ex) ? MHD_YES : MHD_NO;
    case Exchange::Phase::kAnswered:
      return MHD_YES;
  }
  return MHD_NO;
}

void HttpServer::Transport::OnCompleted(void* cls, MHD_Connection*, void** request_context,
                                        MHD_RequestTerminationCode) {
  auto* self = static_cast<Transport*>(cls);
  auto* ex = static_cast<Exchange*>(*request_context);
  if (ex == nullptr) return;
  if (ex->answering) self->num_answering_.fetch_sub(1);
  // The connection now awaits its next request.
  if (ex->connection != nullptr) self->SetReadingSince(ex->connection, SteadySeconds());
  delete ex;
  *request_context = nullptr;
}

bool HttpServer::Transport::QueueAnswer(Exchange& ex) {
  HttpResponse& res = ex.res;
  MHD_Response* response = nullptr;
  std::shared_ptr<Stream> stream;
  if (res.stream != nullptr) {
    stream = std::make_shared<Stream>();
    stream->transport = this;
    stream->mhd = ex.mhd;
    stream->fd = ex.connection != nullptr ? ex.connection->fd : -1;
    stream->body = res.stream;
    response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, kStreamBlockBytes,
                                                 &GuardedReadStream, stream.get(), &FreeStream);
  } else {
    response =
        MHD_create_response_from_buffer(res.body.size(), res.body.data(), MHD_RESPMEM_MUST_COPY);
  }
  if (response == nullptr) return false;
  for (const auto& [name, value] : res.headers) {
    if (strcasecmp(name.c_str(), "Content-Length") == 0 ||
        strcasecmp(name.c_str(), "Transfer-Encoding") == 0 ||
        strcasecmp(name.c_str(), "Connection") == 0) {
      continue;
    }
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  if (res.close_connection) MHD_add_response_header(response, "Connection", "close");
  if (stream != nullptr) {
    MutexLock lock(streams_mu_);
    streams_.emplace(stream.get(), stream);
  }
  const bool queued =
      MHD_queue_response(ex.mhd, static_cast<unsigned int>(res.status), response) == MHD_YES;
  MHD_destroy_response(response);  // the connection holds it; a stream's FreeStream runs later
  if (!queued) return false;
  ex.answering = true;
  num_answering_.fetch_add(1);
  if (stream != nullptr) {
    std::weak_ptr<Stream> weak = stream;
    stream->body->SetWake([weak] {
      if (std::shared_ptr<Stream> s = weak.lock()) Wake(*s);
    });
    if (stopping_.load()) {
      stream->fail.store(true);
      Wake(*stream);
    }
  }
  return true;
}

ssize_t HttpServer::Transport::ReadStream(void* cls, uint64_t, char* buf, size_t max) {
  Stream& s = *static_cast<Stream*>(cls);
  for (;;) {
    if (s.fail.load()) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (s.offset < s.pending.size()) {
      const size_t n = std::min(max, s.pending.size() - s.offset);
      std::memcpy(buf, s.pending.data() + s.offset, n);
      s.offset += n;
      if (s.offset == s.pending.size()) {
        s.pending.clear();
        s.offset = 0;
      }
      return static_cast<ssize_t>(n);
    }
    if (s.finished) {
      s.complete = true;
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    uint64_t seen = 0;
    {
      MutexLock lock(s.mu);
      seen = s.num_wakes;
    }
    HttpBodyStream::State state = HttpBodyStream::State::kFailed;
    try {
      state = s.body->Produce(&s.pending);
    } catch (...) {
      state = HttpBodyStream::State::kFailed;
    }
    if (state == HttpBodyStream::State::kFailed) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (state == HttpBodyStream::State::kDone) s.finished = true;
    if (!s.pending.empty() || s.finished) continue;
    MutexLock lock(s.mu);
    if (s.num_wakes != seen) continue;  // woken while producing: produce again
    // Nothing to send: park until a wake-up (the engine's output, a tick, the stop).
    MHD_suspend_connection(s.mhd);
    s.parked = true;
    s.parked_since_s = SteadySeconds();
    return 0;
  }
}

void HttpServer::Transport::FreeStream(void* cls) {
  auto* s = static_cast<Stream*>(cls);
  s->body->SetWake(nullptr);
  try {
    s->body->OnClosed(s->complete);  // (an abort of the request, which allocates)
  } catch (...) {
    // Not aborted: the request runs to its end unread. The stream is forgotten all the same.
  }
  Transport* self = s->transport;
  std::shared_ptr<Stream> keep;  // destroyed after the lock
  MutexLock lock(self->streams_mu_);
  auto it = self->streams_.find(s);
  if (it != self->streams_.end()) {
    keep = std::move(it->second);
    self->streams_.erase(it);
  }
}

void HttpServer::Transport::Wake(Stream& stream) {
  MutexLock lock(stream.mu);
  ++stream.num_wakes;
  if (!stream.parked) return;
  stream.parked = false;
  MHD_resume_connection(stream.mhd);
}

void HttpServer::Transport::FailStreams() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    MutexLock lock(streams_mu_);
    for (const auto& [ptr, stream] : streams_) streams.push_back(stream);
  }
  for (const auto& s : streams) {
    s->fail.store(true);
    Wake(*s);
  }
}

void HttpServer::Transport::Work() {
  for (;;) {
    Exchange* ex = nullptr;
    {
      MutexLock lock(tasks_mu_);
      while (tasks_.empty() && !tasks_closed_) lock.Wait(tasks_cv_);
      if (tasks_.empty()) return;
      ex = tasks_.front();
      tasks_.pop_front();
    }
    if (stopping_.load()) {
      SetErrorAndClose(ex->res, protocol::ApiError::Make(503, "the server is shutting down"));
    } else {
      server_->Handle(ex->req, ex->res);
    }
    MHD_resume_connection(ex->mhd);  // the daemon queues ex->res (OnAccess, kHandling)
  }
}

void HttpServer::Transport::Accept() {
  while (!stopping_.load()) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd =
        accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      if (stopping_.load()) return;
      // Out of descriptors or memory: the connection waits in the listen queue meanwhile.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    {
      MutexLock lock(accepted_mu_);
      accept_ts_[fd] = server_->clock_->Now();
    }
    if (MHD_add_connection(daemon_, fd, reinterpret_cast<sockaddr*>(&addr), len) != MHD_YES) {
      // Refused (over the connection limit, out of memory): libmicrohttpd closed the socket.
      MutexLock lock(accepted_mu_);
      accept_ts_.erase(fd);
    }
  }
}

void HttpServer::Transport::Sweep() {
  while (sweeping_.load()) {
    std::this_thread::sleep_for(kSweepPeriod);
    const double now = SteadySeconds();
    // Parked streams: those due for a tick, and those whose client has gone (libmicrohttpd does
    // not watch a suspended connection): a FIN, a reset or an error ends the stream now.
    std::vector<std::shared_ptr<Stream>> due;
    std::vector<std::shared_ptr<Stream>> parked;
    std::vector<pollfd> fds;
    {
      MutexLock lock(streams_mu_);
      for (const auto& [ptr, stream] : streams_) {
        MutexLock stream_lock(stream->mu);
        if (!stream->parked) continue;
        if (now - stream->parked_since_s >= HttpBodyStream::kTickSeconds) {
          due.push_back(stream);
        } else if (stream->fd >= 0) {
          parked.push_back(stream);
          fds.push_back({stream->fd, POLLRDHUP, 0});
        }
      }
    }
    if (!fds.empty() && poll(fds.data(), fds.size(), 0) > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
          parked[i]->fail.store(true);
          due.push_back(parked[i]);
        }
      }
    }
    for (const auto& s : due) Wake(*s);
    Linger(/*all=*/false);
    // A request whose head and body take longer than the deadline: its connection is shut (the
    // daemon then sees it end and closes it).
    MutexLock lock(connections_mu_);
    for (Connection* connection : connections_) {
      if (connection->reading_since_s >= 0 &&
          now - connection->reading_since_s > options_.request_read_deadline_s) {
        connection->reading_since_s = -1.0;
        if (connection->fd >= 0) shutdown(connection->fd, SHUT_RDWR);
      }
    }
  }
}

void HttpServer::Transport::Linger(bool all) {
  std::vector<Lingering> sockets;
  {
    MutexLock lock(connections_mu_);
    sockets.swap(lingering_);
  }
  if (sockets.empty()) return;
  const double now = SteadySeconds();
  std::vector<Lingering> kept;
  char buf[16384];
  for (Lingering& l : sockets) {
    if (!l.fin_sent) shutdown(l.fd, SHUT_WR);  // the answer is out: the FIN (if not yet sent)
    l.fin_sent = true;
    bool done = all || now >= l.deadline_s;
    while (!done && l.num_drained < kLingerBytes) {
      const ssize_t n = recv(l.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) done = true;  // the client closed its side, or an error
      if (n > 0) l.num_drained += static_cast<size_t>(n);
    }
    if (done || l.num_drained >= kLingerBytes) {
      close(l.fd);
    } else {
      kept.push_back(l);
    }
  }
  MutexLock lock(connections_mu_);
  lingering_.insert(lingering_.end(), kept.begin(), kept.end());
}

HttpServer::HttpServer(HttpServerOptions options, ServerContext context)
    : options_(std::move(options)),
      context_(std::move(context)),
      own_clock_(context_.clock == nullptr ? std::make_unique<SteadyClock>() : nullptr),
      clock_(context_.clock != nullptr ? context_.clock : own_clock_.get()) {
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
    openai_ = std::make_unique<OpenAiRoutes>(std::move(openai));
  }
  RegisterRoutes();
  transport_ = std::make_unique<Transport>(this);
}

HttpServer::~HttpServer() {
  Stop();
  // Serve() has returned (REQUIRES); the transport's threads are joined.
}

std::optional<protocol::ApiError> HttpServer::CheckHead(const HttpRequest& req) const {
  std::optional<protocol::ApiError> error =
      CheckRequestHead(req, openai_ != nullptr && OpenAiRoutes::TakesJsonBody(req.method, req.path),
                       options_.max_body_bytes);
  if (!error && openai_ != nullptr) error = openai_->CheckAuthorization(req);
  return error;
}

void HttpServer::Handle(const HttpRequest& req, HttpResponse& res) const noexcept {
  // The request's handling starts: the wait since its arrival (the accept, for a connection's
  // first).
  try {
    if (context_.metrics != nullptr) {
      context_.metrics->http_queue_time.Observe(clock_->Now() - req.arrival_ts);
    }
    router_.Route(req, res);
  } catch (...) {
    res = HttpResponse();
    SetInternalErrorResponse(res, std::current_exception());
  }
}

// Every route of the server, in one place.
void HttpServer::RegisterRoutes() {
  router_.Get("/health",
              [this](const HttpRequest& req, HttpResponse& res) { HandleHealth(req, res); });
  router_.Get("/metrics",
              [this](const HttpRequest& req, HttpResponse& res) { HandleMetrics(req, res); });
  router_.Get("/dashboard", [](const HttpRequest&, HttpResponse& res) {
    res.SetHeader("Cache-Control", "no-store");
    res.SetContent(DashboardHtml(), "text/html; charset=utf-8");
  });
  router_.Get("/debug/request_timelines", [this](const HttpRequest& req, HttpResponse& res) {
    HandleRequestTimelines(req, res);
  });
  router_.Get("/load", [this](const HttpRequest& req, HttpResponse& res) {
    HandleLoad(req, res, "server_load");
  });
  router_.Get("/get_load",
              [this](const HttpRequest& req, HttpResponse& res) { HandleLoad(req, res, "load"); });
  if (openai_ != nullptr) openai_->Register(router_);
}

void HttpServer::Drain() {
  if (openai_ != nullptr) openai_->Drain();
}

int64_t HttpServer::num_waiting() const { return openai_ != nullptr ? openai_->num_waiting() : 0; }

int64_t HttpServer::num_in_flight() const {
  return openai_ != nullptr ? openai_->num_in_flight() : 0;
}

Status HttpServer::Bind() { return transport_->Bind(&port_); }

Status HttpServer::Serve() {
  Status status = transport_->Serve();
  serve_done_.store(true);
  return status;
}

void HttpServer::Stop() { transport_->Stop(); }

void HttpServer::AbortConnections() { transport_->Abort(); }

void HttpServer::HandleHealth(const HttpRequest&, HttpResponse& res) const {
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

void HttpServer::HandleLoad(const HttpRequest&, HttpResponse& res, const char* key) const {
  nlohmann::json body = nlohmann::json::object();
  body[key] = num_in_flight();
  res.SetContent(body.dump(), "application/json");
}

void HttpServer::HandleMetrics(const HttpRequest& req, HttpResponse& res) const {
  if (context_.metrics == nullptr) {
    SetErrorResponse(res, 503, "metrics are not enabled");
    return;
  }
  // Prometheus text 0.0.4 unless the scraper's Accept asks for OpenMetrics.
  res.SetHeader("Vary", "Accept");
  if (NegotiateExposition(req.HeaderValue("Accept")) == ExpositionFormat::kOpenMetrics100) {
    res.SetContent(context_.metrics->RenderOpenMetrics(), kOpenMetricsContentType);
    return;
  }
  res.SetContent(context_.metrics->Render(), kPrometheusContentType);
}

void HttpServer::HandleRequestTimelines(const HttpRequest&, HttpResponse& res) const {
  if (context_.timelines == nullptr || context_.clock == nullptr) {
    SetErrorResponse(res, 503, "request timelines are not enabled");
    return;
  }
  res.SetHeader("Cache-Control", "no-store");
  res.SetContent(context_.timelines->RenderJson(context_.clock->Now()), "application/json");
}

}  // namespace tinyserve
