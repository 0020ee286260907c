// RequestStream: one request's outputs, from the engine thread to the frontend that submitted it.
//
// The engine appends tokens (each with its step's output time and, when asked, its logprobs) and
// lifecycle events (QUEUED, SCHEDULED, PREEMPTED, FINISHED) as they happen; the consumer takes
// everything pending in one RequestOutput delta, blocking (Next) or not (TryNext). A PREEMPTED
// event is pushed when it happens, so it reaches the stream before the request's next token or
// finish. Within a delta, tokens and events are each in order; merge them by timestamp if needed.
// Nothing handed out is ever changed or re-sent.
//
// A consumer that waits for many streams at once (the server's SSE writer) gives each of them a
// StreamWaker instead of blocking in Next().
//
// Thread-safe: one producer (the engine thread) and any number of consumer calls.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "base/token_logprobs.h"
#include "engine/events.h"

namespace tinyserve {

struct RequestOutput {
  std::vector<int32_t> token_ids;       // [n] new tokens, in order
  std::vector<double> token_ts;         // [n] the output time of the step that made each token
  std::vector<TokenLogprobs> logprobs;  // [n] if the request asked for logprobs, else empty
  // Prompt logprobs (SamplingParams::prompt_logprobs), in prompt order: entry i of the whole
  // request's sequence is prompt token i + 1's (token_id = that token). They arrive chunk by
  // chunk during the prefill, all of them before (or with) the first token; each exactly once.
  std::vector<TokenLogprobs> prompt_logprobs;
  std::vector<RequestEvent> events;  // lifecycle events (never NEW_TOKENS), in order
  bool finished = false;             // the last delta of the request
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<int32_t> stop_token_id;  // the stop_token_ids entry that finished it
  std::string error_message;             // finish_reason == kError
  RequestCounts counts;                  // with `finished`: the request's final counts

  bool empty() const {
    return token_ids.empty() && prompt_logprobs.empty() && events.empty() && !finished;
  }
  void Clear();
  // Appends `delta` (a later output of the same request) to this one.
  void Append(const RequestOutput& delta);
};

// Told whenever a stream it is attached to wakes its consumer (on the producer's thread, after
// the stream's new outputs are in: once per stream per engine step). Wake() marks the stream; a
// waker may hold back the consumer's wake-up (its system call) until Flush(), so that one engine
// step wakes a consumer of many streams once, after marking all of them (RequestStream::
// NotifyAll). Both must be quick and must not call back into the stream.
class StreamWaker {
 public:
  virtual ~StreamWaker() = default;
  virtual void Wake() = 0;
  // Delivers the wake-ups held back by earlier Wake() calls (of this waker or of others sharing
  // its consumer).
  virtual void Flush() {}
};

class RequestStream {
 public:
  explicit RequestStream(std::string request_id) : request_id_(std::move(request_id)) {}

  const std::string& request_id() const { return request_id_; }

  // Consumer side. Waits up to `timeout_s` seconds (wall time) for anything new, then moves all
  // of it into *out (replacing its contents). Returns true iff *out is not empty; false on timeout
  // or once the finish has already been handed out.
  bool Next(RequestOutput* out, double timeout_s);
  // Like Next() without waiting.
  bool TryNext(RequestOutput* out);
  // Collects every delta into *out until the finish, or until `timeout_s` passes. Returns true
  // iff the finish arrived.
  bool WaitForFinish(RequestOutput* out, double timeout_s);
  // Returns true iff the finish has been handed out.
  bool is_done() const;

  // Producer side (engine thread). Each call wakes a waiting consumer unless `notify` is false;
  // then the producer calls Notify() once after its batch of pushes (EngineCore: once per stream
  // per step, after every stream of the step has its outputs).
  void PushToken(int32_t token_id, double ts, const TokenLogprobs* logprobs, bool notify = true);
  // Appends the next prompt logprobs (see RequestOutput::prompt_logprobs).
  void PushPromptLogprobs(std::vector<TokenLogprobs>&& logprobs, bool notify = true);
  // REQUIRES: event.type != kFinished, kNewTokens
  void PushEvent(const RequestEvent& event, bool notify = true);
  void Finish(const RequestEvent& finished, std::optional<int32_t> stop_token_id,
              const std::string& error_message, bool notify = true,
              const RequestCounts& counts = {});
  // Wakes the consumer if it waits in Next() (cheap when nobody waits: no system call), and the
  // waker if one is set (Wake() then Flush()).
  void Notify();
  // Notify() for each of `streams`, with every waker's Flush() after all the Wake() calls.
  static void NotifyAll(const std::vector<RequestStream*>& streams);

  // From now on Notify() (and every notifying push) also calls waker->Wake() then Flush()
  // (NotifyAll: the Flush() after every stream's Wake()); null detaches. Thread-safe.
  void SetWaker(std::shared_ptr<StreamWaker> waker);

 private:
  bool TakeLocked(RequestOutput* out) TS_REQUIRES(mu_);
  // Wakes a consumer waiting in Next() and returns the waker (null if none) after its Wake().
  std::shared_ptr<StreamWaker> WakeWithoutFlush();

  const std::string request_id_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  RequestOutput pending_ TS_GUARDED_BY(mu_);
  bool finish_handed_out_ TS_GUARDED_BY(mu_) = false;
  std::shared_ptr<StreamWaker> waker_ TS_GUARDED_BY(mu_);
  std::atomic<bool> has_waker_{false};  // waker_ != null, read without the lock
};

}  // namespace tinyserve
