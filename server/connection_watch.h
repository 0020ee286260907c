// ConnectionWatch: tells a handler whether its client has gone away while it waits for the engine
// (the transport parks the connection meanwhile and does not look at it).
//
// ForRequest() takes the connection's socket from the request (the transport's); IsPeerClosed()
// then polls it without reading: the peer's FIN (POLLRDHUP), a reset or an error mean the client
// is gone. Where the socket is unknown, found() is false and IsPeerClosed() always says false.
//
// A FIN alone is also what a half-closed client sends (its whole request, then shutdown(SHUT_WR),
// still reading): IsPeerClosed() counts it as gone (a stream then ends, as uvicorn and so vLLM
// treat it). IsClientGone(), for a handler that has sent nothing of its answer yet, tells the two
// apart: at the first FIN it sends an interim `HTTP/1.1 100 Continue` response (HTTP/1.1 clients
// skip 1xx responses, RFC 9110 15.2), which a client that closed its socket answers with a reset,
// seen by a later call; a half-closed one reads it and gets its answer after it. So a client
// that closed is seen one poll (plus a round trip) later than by IsPeerClosed(), and one whose
// host vanished without a reset is answered into the void.
//
// The descriptor stays valid while the request's handler runs (the transport closes the socket
// only after the answer). Thread-compatible; one per request.
#pragma once

#include "server/http_message.h"

namespace tinyserve {

class ConnectionWatch {
 public:
  ConnectionWatch() = default;
  static ConnectionWatch ForRequest(const HttpRequest& req) {
    return ConnectionWatch(req.socket_fd, req.version == "HTTP/1.1");
  }

  // Returns true iff the request's socket was found.
  bool found() const { return fd_ >= 0; }
  // The socket's descriptor, or -1 when !found().
  int fd() const { return fd_; }
  // Returns true iff the peer has closed or reset the connection. False when !found().
  bool IsPeerClosed() const;
  // Returns true iff the client has gone away, a half-close not counted (see above). REQUIRES:
  // nothing of the answer has been sent on the connection (the probe is an interim response).
  // HTTP/1.0 requests (which may get no 1xx) count a FIN as gone. False when !found().
  bool IsClientGone();

 private:
  ConnectionWatch(int fd, bool may_probe) : fd_(fd), may_probe_(may_probe) {}
  int fd_ = -1;
  bool may_probe_ = false;  // the request is HTTP/1.1: an interim response may be sent
  bool probed_ = false;     // IsClientGone sent its 100 Continue
};

}  // namespace tinyserve
