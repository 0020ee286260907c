// ConnectionWatch: tells a handler whether its client has gone away, while the handler waits for
// the engine (cpp-httplib 0.11.4 has no Request::is_connection_closed, and DataSink::is_writable
// only checks that the send buffer has room, which stays true after the peer closed).
//
// ForRequest() finds the connection's socket among the process' descriptors by its two endpoints
// (local and remote address and port, as httplib reports them in the Request), once per request,
// through a process-wide index of the sockets that is rebuilt from /proc/self/fd only when a
// lookup misses (so a burst of N connections costs a few scans, not N scans of N descriptors).
// IsPeerClosed() then polls it without reading: the peer's FIN (POLLRDHUP), a reset or an error
// mean the client is gone. Linux-only; where the socket cannot be found (another OS, no /proc),
// found() is false and IsPeerClosed() always says false: callers then only learn of a disconnect
// from a failed write.
//
// The descriptor stays valid while the request's handler or content provider runs (httplib closes
// the socket only after both). Thread-compatible; one per request.
#pragma once

namespace httplib {
struct Request;
}

namespace tinyserve {

class ConnectionWatch {
 public:
  ConnectionWatch() = default;
  static ConnectionWatch ForRequest(const httplib::Request& req);

  // Returns true iff the request's socket was found.
  bool found() const { return fd_ >= 0; }
  // The socket's descriptor, or -1 when !found().
  int fd() const { return fd_; }
  // Returns true iff the peer has closed or reset the connection. False when !found().
  bool IsPeerClosed() const;

 private:
  explicit ConnectionWatch(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tinyserve
