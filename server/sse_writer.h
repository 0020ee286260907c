// SseWriter: a thread that writes the SSE responses (server/sse_stream.h) of streaming requests
// straight to their sockets (the server runs a few, each taking every other new stream).
//
// Why: with one HTTP worker thread per stream, every engine step woke every stream's thread (a
// futex wake-up, a context switch and a poll per stream per token); at 100 streams on a few cores
// the wake-ups alone took longer than a step. Here the engine's step wakes this one thread: each
// stream's StreamWaker puts the stream on a ready list, and after the whole step's batch the first
// Flush() writes the eventfd (RequestStream::NotifyAll); the thread, for each ready stream, takes
// its new output, formats the chunks and sends them (one non-blocking send per stream per step),
// while the HTTP workers of the streams sleep until their response is complete. Every 20 ms it
// also looks at every stream (pings, stalled clients).
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
// - Benchmarks can observe each moment a stream's bytes are all sent (SseWriterOptions::on_sent).
// - A client that closes or resets its connection (EPOLLRDHUP/EPOLLHUP/EPOLLERR, or a failed
//   send) has its job aborted at once (within the loop iteration that sees it), also while it
//   waits for its first token; pings (SseStream::Produce) keep idle streams probed.
// - Shutdown() (and the destructor) fails every stream, current and future: their jobs are
//   aborted and Run() returns false. The destructor joins the thread.
//
// Linux-only (epoll, eventfd): Create() returns null where they are missing; callers then write
// on the HTTP workers. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"

namespace tinyserve {

class SseStream;

// Called on a writer thread (several writers call it concurrently: it must be thread-safe) each
// time every byte produced so far for a stream has been sent:
// the engine request id of the stream's first choice, how many of that choice's completion tokens
// the sent chunks carry, and the steady_clock time in seconds.
using SseSentObserver =
    std::function<void(const std::string& request_id, int32_t num_tokens, double sent_s)>;

struct SseWriterOptions {
  double stall_seconds = 5.0;  // a client that takes nothing this long is gone
  SseSentObserver on_sent;     // for benchmarks; null: none
};

class SseWriter {
 public:
  // Starts the writer thread. Returns null if epoll or eventfd is not available.
  static std::unique_ptr<SseWriter> Create(SseWriterOptions options = {});
  ~SseWriter();
  SseWriter(const SseWriter&) = delete;
  SseWriter& operator=(const SseWriter&) = delete;

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

 private:
  struct Entry;
  class Signal;
  class Waker;

  SseWriter(int epoll_fd, int event_fd, SseWriterOptions options);  // takes both descriptors
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
  const SseWriterOptions options_;
  std::shared_ptr<Signal> signal_;  // shared with the streams' wakers

  Mutex mu_;
  std::vector<std::unique_ptr<Entry>> incoming_ TS_GUARDED_BY(mu_);
  bool shut_down_ TS_GUARDED_BY(mu_) = false;

  // Writer thread only.
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> entries_;  // by id (epoll data)
  uint64_t next_id_ = 1;                                          // 0 is the eventfd
  std::vector<uint64_t> ready_;                                   // scratch: streams woken
  uint64_t pass_ = 0;                                             // loop iterations
  double last_full_pass_s_ = 0.0;                                 // when every stream was seen
  std::string frame_;                                             // scratch

  std::thread thread_;
};

}  // namespace tinyserve
