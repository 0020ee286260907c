// SseStream: writes one GenerationJob as a Server-Sent-Events response (DESIGN §6), through
// cpp-httplib's chunked content provider.
//
// Produce() makes the bytes: OnStart()'s chunks first, then `data: {json}\n\n` chunks for every
// update (the subclass' OnUpdate), and when every choice has finished, OnFinish()'s chunks (the
// usage chunk) and `data: [DONE]\n\n`. When nothing has been produced for 100 ms (waiting for the
// first token during a long prefill, or while preempted) it produces the SSE comment `: ping\n\n`,
// so that a vanished client is also noticed by a failed write.
//
// Two ways to write them (Attach picks):
// - With an SseWriter and a found socket (ConnectionWatch): the connection's HTTP worker hands the
//   stream to the writer thread, which writes every stream of the server right after each engine
//   step and sees a client leave at once (server/sse_writer.h), and sleeps until the writer is
//   done.
// - Otherwise, on the HTTP worker thread, one provider call per engine step (Pump): if the client
//   is gone (ConnectionWatch, looked at most every 20 ms, or a failed write) the job is aborted and
//   the response ends; else it waits up to 20 ms for output and writes what Produce() made.
// Either way the releaser aborts the job if the response did not complete.
//
// Single-owner: one thread at a time (the HTTP worker, or the writer thread while it has it).
#pragma once

#include <cstdint>
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

class SseWriter;

class SseStream {
 public:
  SseStream(std::unique_ptr<GenerationJob> job, ConnectionWatch watch)
      : job_(std::move(job)), watch_(watch) {}
  virtual ~SseStream() = default;
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  // Makes `res` a `text/event-stream` response written by `stream`: through `writer` when it is
  // non-null and the stream's socket was found, else by the HTTP worker (see above). `writer`, if
  // any, must outlive the response.
  static void Attach(std::shared_ptr<SseStream> stream, httplib::Response& res, SseWriter* writer);

  // Appends to *out everything there is to send now, waiting up to `wait_s` seconds for output
  // when there is nothing else to send (see above). Returns true iff the response is complete
  // (`data: [DONE]` produced); then it must not be called again.
  bool Produce(double wait_s, std::string* out);
  // Finishes every unfinished engine request of the job with reason abort (the client is gone).
  void Abort() { job_->Abort(); }
  // Attaches `waker` to (null: detaches it from) every engine request stream of the job.
  void SetWaker(const std::shared_ptr<StreamWaker>& waker);
  // The client's socket, or -1 when it was not found.
  int socket_fd() const { return watch_.fd(); }
  // The engine request id of the first choice, and how many of its completion tokens the chunks
  // produced so far carry (for benchmarks).
  const std::string& first_request_id() const { return job_->choices().front()->request_id; }
  int32_t first_choice_tokens() const { return job_->choices().front()->text.num_tokens(); }

 protected:
  // Chunks to send before any output (echoed prompts, chat role chunks).
  virtual void OnStart(std::string* out) = 0;
  // Chunks for one update.
  virtual void OnUpdate(const ChoiceUpdate& update, std::string* out) = 0;
  // Chunks after every choice finished, before [DONE] (the usage chunk).
  virtual void OnFinish(std::string* out) = 0;
  // Returns true iff OnFinish() needs every choice's engine finish (the usage chunk's per-request
  // metrics): then, when a stop string ended a choice, OnFinish() waits for that finish, up to
  // 1 s, as a non-streaming response does.
  virtual bool UsageWaitsForEngineFinish() const { return false; }

  GenerationJob& job() { return *job_; }

 private:
  // One provider call on the HTTP worker. Returns false to end the response with an error
  // (client gone).
  bool Pump(httplib::DataSink& sink);

  std::unique_ptr<GenerationJob> job_;
  ConnectionWatch watch_;
  bool started_ = false;
  bool on_worker_ = false;     // the writer could not take the stream: Pump() writes it
  double last_write_s_ = 0.0;  // steady seconds of the last non-empty Produce()
  double last_watch_s_ = 0.0;  // steady seconds of the last ConnectionWatch check
  // Steady seconds until which OnFinish() waits for the engine's finishes; < 0: not started.
  double engine_finish_deadline_s_ = -1.0;
  std::vector<ChoiceUpdate> updates_;
};

}  // namespace tinyserve
