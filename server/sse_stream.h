// SseStream: writes one GenerationJob as a Server-Sent-Events response (DESIGN §6), an
// HttpBodyStream (server/http_message.h) that the transport writes as chunks.
//
// Produce() makes the bytes: OnStart()'s chunks first, then `data: {json}\n\n` chunks for every
// update (the subclass' OnUpdate), and when every choice has finished, OnFinish()'s chunks (the
// usage chunk) and `data: [DONE]\n\n`. When nothing has been produced for 100 ms (waiting for the
// first token during a long prefill, or while preempted) it produces the SSE comment `: ping\n\n`,
// so that a vanished client is also noticed by a failed write. The engine's output wakes the
// transport (SetWake: a StreamWaker on every engine request stream of the job); a response that
// ends incomplete (the client went away, the server stopped) aborts the job.
//
// Single-owner: the transport's thread (the wake function is called from the engine's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/generation_job.h"
#include "server/http_message.h"

namespace tinyserve {

class SseStream : public HttpBodyStream {
 public:
  explicit SseStream(std::unique_ptr<GenerationJob> job) : job_(std::move(job)) {}
  ~SseStream() override = default;
  SseStream(const SseStream&) = delete;
  SseStream& operator=(const SseStream&) = delete;

  // Makes `res` a `text/event-stream` response written from `stream`.
  static void Attach(std::shared_ptr<SseStream> stream, HttpResponse& res);

  // HttpBodyStream.
  // At kDone the job goes (its admission slot, its engine streams): a request counts as in
  // flight (num_in_flight(), /load) until its whole response is made, not until the transport
  // has written the tail.
  State Produce(std::string* out) override;
  void SetWake(std::function<void()> wake) override;
  void OnClosed(bool complete) override;

  // Appends to *out everything there is to send now, waiting up to `wait_s` seconds for output
  // when there is nothing else to send (see above). Returns true iff the response is complete
  // (`data: [DONE]` produced); then it must not be called again.
  bool Produce(double wait_s, std::string* out);
  // Finishes every unfinished engine request of the job with reason abort (the client is gone).
  // Nothing once the job is done.
  void Abort() {
    if (job_ != nullptr) job_->Abort();
  }
  // Attaches `waker` to (null: detaches it from) every engine request stream of the job.
  void SetWaker(const std::shared_ptr<StreamWaker>& waker);

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
  std::unique_ptr<GenerationJob> job_;
  bool started_ = false;
  double last_write_s_ = 0.0;  // steady seconds of the last non-empty Produce()
  // Steady seconds until which OnFinish() waits for the engine's finishes; < 0: not started.
  double engine_finish_deadline_s_ = -1.0;
  std::vector<ChoiceUpdate> updates_;
};

}  // namespace tinyserve
