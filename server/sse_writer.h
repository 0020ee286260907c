// SseWriter: one thread that writes the SSE responses (server/sse_stream.h) of every streaming
// request of the server, straight to their sockets.
//
// Why: with one HTTP worker thread per stream, every engine step woke every stream's thread (a
// futex wake-up, a context switch and a poll per stream per token); at 100 streams on a few cores
// the wake-ups alone took longer than a step. Here the engine's step wakes this one thread (the
// streams' StreamWaker: at most one eventfd write per step), which then, for each stream, takes
// its new output, formats the chunks and sends them (one non-blocking send per stream per step),
// while the HTTP workers of the streams sleep until their response is complete.
//
// - Run(stream) is called by the connection's HTTP worker inside httplib's chunked content
//   provider (the response head is already sent and nothing else writes to the socket until the
//   provider returns). It blocks until the stream is complete (every byte, `data: [DONE]`
//   included, sent: returns true; the worker then writes the chunked terminator) or has failed
//   (returns false; the job has been aborted).
// - Chunks are framed for HTTP/1.1 chunked transfer encoding (`<hex length>\r\n<data>\r\n`), as
//   httplib's DataSink would. A client that reads slowly gets its chunks buffered (one pending
//   buffer per stream, sent when the socket is writable again); others never wait for it. A
//   client that takes nothing for `stall_seconds` (default httplib's own write timeout, 5 s), or
//   lets more than kMaxPendingBytes pile up, is treated as gone.
// - A client that closes or resets its connection (EPOLLRDHUP/EPOLLHUP/EPOLLERR, or a failed
//   send) has its job aborted at once (within the loop iteration that sees it), also while it
//   waits for its first token; pings (SseStream::Produce) keep idle streams probed.
// - Shutdown() (and the destructor) fails every stream, current and future: their jobs are
//   aborted and Run() returns false. The destructor joins the thread.
//
// Linux-only (epoll, eventfd): Create() returns null where they are missing; callers then write
// on the HTTP workers. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/request_stream.h"
#include "engine/thread_annotations.h"

namespace tinyserve {

class SseStream;

class SseWriter {
 public:
  // Starts the writer thread. Returns null if epoll or eventfd is not available.
  static std::unique_ptr<SseWriter> Create(double stall_seconds = kDefaultStallSeconds);
  ~SseWriter();
  SseWriter(const SseWriter&) = delete;
  SseWriter& operator=(const SseWriter&) = delete;

  static constexpr double kDefaultStallSeconds = 5.0;
  static constexpr size_t kMaxPendingBytes = size_t{16} << 20;

  enum class RunResult {
    kSent,      // every byte of the response was sent
    kFailed,    // the client is gone (or the writer shut down): the job has been aborted
    kNotTaken,  // the writer could not watch this socket: write it on the caller's thread
  };
  // Writes `stream` to its socket (stream->socket_fd(), REQUIRES: >= 0) until it is complete;
  // blocks the caller until then.
  RunResult Run(SseStream* stream);
  // Fails every stream now and every stream Run() is given later. Thread-safe, idempotent.
  void Shutdown();

  // The streams being written (for tests).
  int64_t num_streams() const { return num_streams_.load(); }

 private:
  struct Entry;
  class Waker;

  SseWriter(int epoll_fd, int event_fd, double stall_seconds);  // takes both descriptors
  void Loop();
  // Produces and sends what `e` has; completes it when done or failed.
  void Service(Entry& e);
  // Sends e.pending; returns false iff the socket failed.
  bool Flush(Entry& e);
  // Adds or removes EPOLLOUT; returns false iff epoll refused.
  bool WatchWritable(Entry& e, bool on);
  // Ends `e`: detaches it from the epoll set and its streams, aborts the job unless `ok`, and
  // releases Run().
  void Complete(Entry& e, bool ok);

  const int epoll_fd_;
  const double stall_seconds_;
  std::shared_ptr<Waker> waker_;

  Mutex mu_;
  std::vector<std::unique_ptr<Entry>> incoming_ TS_GUARDED_BY(mu_);
  bool shut_down_ TS_GUARDED_BY(mu_) = false;

  // Writer thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> entries_;  // by id (epoll data)
  uint64_t next_id_ = 1;                                          // 0 is the eventfd
  std::string frame_;                                             // scratch

  std::atomic<int64_t> num_streams_{0};
  std::thread thread_;
};

}  // namespace tinyserve
