// ConnectionQueue: the HTTP server's worker pool, an httplib::TaskQueue (Server::new_task_queue)
// that makes the queue of accepted connections visible and bounded.
//
// httplib 0.11.4's listen loop accepts a socket and calls enqueue() on the listen thread at once
// with a closure that serves the connection (every keep-alive request on it) and closes it.
// enqueue() stamps the accept time with the engine's Clock there and then:
//   - below max_connections (connections queued or being served; 0: unlimited) the closure waits
//     for one of num_threads workers, which runs it with CurrentConnection() set to its state;
//   - at the limit, the connection is refused: `on_reject` is called on the listen thread, then
//     the closure runs on one of a few rejection threads with CurrentConnection()->rejected set,
//     so the server's pre-routing handler answers the first request with 503 and
//     `Connection: close` (httplib 0.11.4 does not hand the accepted socket to any callback, and
//     its per-socket function is private, so the refusal is an HTTP answer to the request head
//     httplib reads). A client that sends nothing holds a rejection thread until httplib's
//     keep-alive timeout (5 s) ends the connection; rejected connections do not count against
//     max_connections.
// Request arrival (RequestArrival): the first request of a connection arrived at its accept
// time; a later keep-alive request when its handling began, i.e. when the pre-routing handler
// runs, after httplib has read its head (0.11.4 has no hook at the request line), so its wait for
// a worker is zero by construction (the worker was the connection's already).
//
// Thread-safe. shutdown() (called by httplib when the listen loop ends) runs the connections
// already queued and joins every thread; the destructor does it if httplib has not.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace tinyserve {

class Clock;

// The connection a worker thread is serving (set while it runs a connection's closure).
struct ConnectionState {
  double accept_ts = 0.0;           // the Clock's time when the listen thread accepted the socket
  int64_t num_requests = 0;         // requests whose handling has begun (see BeginRequest)
  bool rejected = false;            // over max_connections: every request gets 503 and the close
  double request_arrival_ts = 0.0;  // the arrival of the request being handled
  // Pipelining (HttpServer's check): the bytes read from the socket when the last answer began,
  // and the size of the request being handled as its client wrote it (counted before any header
  // is dropped).
  int64_t bytes_read = 0;
  int64_t request_head_bytes = 0;
};

// The state of the connection the calling thread serves, or null off the pool's threads.
ConnectionState* CurrentConnection();

// Starts a request on the calling thread's connection at `now` (the Clock's): its arrival is the
// accept time for the connection's first request, `now` for later ones (and off the pool).
// Returns the arrival (<= now). Call once per request, from the pre-routing handler.
double BeginRequest(double now);

// The arrival of the request the calling thread handles (BeginRequest's), or `now` when the
// calling thread serves no connection.
double RequestArrival(double now);

class ConnectionQueue final : public httplib::TaskQueue {
 public:
  // `num_connections` (borrowed, outlives this) is kept equal to the connections queued or being
  // served (rejected ones excluded), for readers on any thread; it must be 0 at construction.
  // REQUIRES: num_threads >= 1, max_connections >= 0, clock and num_connections non-null (they
  // must outlive this).
  ConnectionQueue(int num_threads, int64_t max_connections, const Clock* clock,
                  std::atomic<int64_t>* num_connections, std::function<void()> on_reject);
  ~ConnectionQueue() override;
  ConnectionQueue(const ConnectionQueue&) = delete;
  ConnectionQueue& operator=(const ConnectionQueue&) = delete;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  struct Task {
    std::function<void()> fn;
    double accept_ts = 0.0;
  };
  void Work(bool rejecting);

  const int64_t max_connections_;
  const Clock* const clock_;
  const std::function<void()> on_reject_;

  mutable Mutex mu_;
  std::condition_variable work_cv_;               // queued_ has a task, or shutdown_
  std::condition_variable reject_cv_;             // rejected_ has a task, or shutdown_
  std::deque<Task> queued_ TS_GUARDED_BY(mu_);    // accepted, waiting for a worker
  std::deque<Task> rejected_ TS_GUARDED_BY(mu_);  // refused, waiting for a rejection thread
  std::atomic<int64_t>* const num_connections_;   // written under mu_: queued_ + the workers'
  bool shutdown_ TS_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tinyserve
