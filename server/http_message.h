// HttpRequest and HttpResponse: what the route handlers see of HTTP, independent of the library
// that carries it (server/http_server.h runs them on libmicrohttpd; issue 16 item 4).
//
// A request arrives whole: its head as the client sent it (header values are not decoded, every
// header line is kept, duplicates included, names compared case-insensitively), its query
// arguments decoded, and its whole body. A response is a status, headers and either a whole body
// or an HttpBodyStream that produces a chunked body over time (the SSE streams).
//
// HttpBodyStream is driven by the transport on its own thread: Produce() must not block. When it
// has nothing to send, the transport parks the connection until the stream calls the `wake`
// function it was given (from any thread), or until the transport's periodic tick (every
// HttpBodyStream::kTickSeconds at most), whichever comes first. OnClosed() is called once, when
// the response ends, complete or not.
//
// Plain values; the stream is single-owner (the transport's thread, plus `wake` from anywhere).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace tinyserve {

// Orders header names case-insensitively (RFC 9110 5.1).
struct CaseInsensitiveLess {
  bool operator()(std::string_view a, std::string_view b) const;
};

// Header name -> value, in the order received for equal names.
using HttpHeaders = std::multimap<std::string, std::string, CaseInsensitiveLess>;

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // the request target as sent: path and query, not decoded
  std::string path;     // the target's path, percent-decoded
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  HttpHeaders headers;  // values as sent (surrounding whitespace trimmed), NUL bytes kept
  std::multimap<std::string, std::string> params;  // the query's arguments, decoded
  std::string body;
  int socket_fd = -1;       // the connection's socket (ConnectionWatch); -1: unknown
  double arrival_ts = 0.0;  // the engine clock's time the request arrived (see HttpServer)

  // The first value of header `name`, or "" when it has none.
  std::string HeaderValue(std::string_view name) const;
  // Returns true iff the request has header `name`.
  bool HasHeader(std::string_view name) const;
  // How many `name` header lines the request has.
  size_t HeaderCount(std::string_view name) const;
  // Returns true iff the query has argument `name`.
  bool HasParam(const std::string& name) const { return params.count(name) != 0; }
  // The first value of query argument `name`, or "".
  std::string ParamValue(const std::string& name) const;
};

class HttpBodyStream {
 public:
  // How long a parked stream waits at most before Produce() is called again (its pings).
  static constexpr double kTickSeconds = 0.1;

  enum class State {
    kMore,    // more will follow
    kDone,    // *out holds the last bytes: the body is complete
    kFailed,  // end the response with an error (the connection is closed)
  };
  virtual ~HttpBodyStream() = default;
  // Appends what there is to send now to *out without waiting (nothing: the transport parks the
  // stream until a wake-up).
  virtual State Produce(std::string* out) = 0;
  // From now on, calls `wake` (thread-safe, quick) whenever Produce() may have more; null stops.
  virtual void SetWake(std::function<void()> wake) = 0;
  // The response has ended: `complete` iff every byte up to kDone was sent.
  virtual void OnClosed(bool complete) = 0;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;
  std::string body;
  std::shared_ptr<HttpBodyStream> stream;  // non-null: a chunked body from it (body unused)
  bool close_connection = false;           // `Connection: close` and the connection ends

  // Sets the body and its Content-Type.
  void SetContent(std::string content, const std::string& content_type);
  // Sets header `name` to `value`, replacing any value it had.
  void SetHeader(const std::string& name, const std::string& value);
  std::string HeaderValue(std::string_view name) const;
  bool HasHeader(std::string_view name) const { return headers.count(std::string(name)) != 0; }
};

}  // namespace tinyserve
