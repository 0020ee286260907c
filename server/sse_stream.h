// SseStream: writes one GenerationJob as a Server-Sent-Events response (DESIGN §6), through
// cpp-httplib's chunked content provider.
//
// Each provider call: if the client is gone (ConnectionWatch, looked at most every 20 ms, or a
// failed write) the job is aborted and the response ends; else it waits up to 20 ms for output,
// turns every update into `data: {json}\n\n` chunks (the subclass' OnUpdate), and when every
// choice has finished, writes OnFinish()'s chunks (the usage chunk) and `data: [DONE]\n\n`. When
// nothing has been written for 100 ms (waiting for the first token during a long prefill, or
// while preempted) it writes the SSE comment `: ping\n\n`, so that a vanished client is also
// noticed by a failed write where the socket watch is unavailable. The releaser aborts the job if
// the response did not complete.
//
// Runs on the HTTP worker thread that serves the connection; single-owner.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/connection_watch.h"
#include "server/generation_job.h"

namespace httplib {
class DataSink;
struct Response;
}  // namespace httplib

namespace tinyserve {

class SseStream {
 public:
  SseStream(std::unique_ptr<GenerationJob> job, ConnectionWatch watch)
      : job_(std::move(job)), watch_(watch) {}
  virtual ~SseStream() = default;
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  // Makes `res` a `text/event-stream` response written by `stream`.
  static void Attach(std::shared_ptr<SseStream> stream, httplib::Response& res);

 protected:
  // Chunks to send before any output (echoed prompts, chat role chunks).
  virtual void OnStart(std::string* out) = 0;
  // Chunks for one update.
  virtual void OnUpdate(const ChoiceUpdate& update, std::string* out) = 0;
  // Chunks after every choice finished, before [DONE] (the usage chunk).
  virtual void OnFinish(std::string* out) = 0;

  GenerationJob& job() { return *job_; }

 private:
  // One provider call. Returns false to end the response with an error (client gone).
  bool Pump(httplib::DataSink& sink);

  std::unique_ptr<GenerationJob> job_;
  ConnectionWatch watch_;
  bool started_ = false;
  double last_write_s_ = 0.0;  // steady seconds of the last write
  double last_watch_s_ = 0.0;  // steady seconds of the last ConnectionWatch check
  std::vector<ChoiceUpdate> updates_;
};

}  // namespace tinyserve
