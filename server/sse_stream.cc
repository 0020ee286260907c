#include "server/sse_stream.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/clock.h"
#include "server/protocol/responses.h"

namespace tinyserve {
namespace {

constexpr double kPingSeconds = 0.1;

}  // namespace

namespace {

// Calls a function on every wake-up of the engine's request streams.
class FunctionWaker final : public StreamWaker {
 public:
  explicit FunctionWaker(std::function<void()> wake) : wake_(std::move(wake)) {}
  void Wake() override { wake_(); }

 private:
  const std::function<void()> wake_;
};

}  // namespace

void SseStream::Attach(std::shared_ptr<SseStream> stream, HttpResponse& res) {
  res.status = 200;
  res.SetHeader("Content-Type", "text/event-stream");
  res.SetHeader("Cache-Control", "no-cache");
  res.SetHeader("X-Accel-Buffering", "no");
  res.stream = std::move(stream);
}

HttpBodyStream::State SseStream::Produce(std::string* out) {
  if (!Produce(0.0, out)) return State::kMore;
  SetWaker(nullptr);
  job_.reset();
  return State::kDone;
}

void SseStream::SetWake(std::function<void()> wake) {
  if (job_ == nullptr) return;  // done: nothing more to wake for
  SetWaker(wake ? std::make_shared<FunctionWaker>(std::move(wake)) : nullptr);
}

void SseStream::OnClosed(bool complete) {
  if (job_ == nullptr) return;  // done (and released) before the response ended
  SetWaker(nullptr);
  if (!complete) job_->Abort();
}

void SseStream::SetWaker(const std::shared_ptr<StreamWaker>& waker) {
  if (job_ == nullptr) return;
  for (const auto& c : job_->choices()) c->stream->SetWaker(waker);
}

bool SseStream::Produce(double wait_s, std::string* out) {
  const size_t before = out->size();
  const double start = SteadyClock().Now();  // one clock read unless Poll() may wait
  if (!started_) {
    started_ = true;
    last_write_s_ = start;
    OnStart(out);
  }
  double wait = std::min(wait_s, kPingSeconds - (start - last_write_s_));
  if (out->size() != before || wait < 0) wait = 0.0;
  updates_.clear();
  job_->Poll(wait, &updates_);
  for (const ChoiceUpdate& u : updates_) OnUpdate(u, out);
  bool done = job_->finished();
  if (done && UsageWaitsForEngineFinish()) {
    // A stop string ended a choice: its engine finish (the abort the job sent) follows within a
    // step. The usage chunk waits for it, up to GenerationJob::kEngineFinishSeconds, without
    // blocking a writer thread (it comes back on the finish's wake-up or its next tick).
    // The choices' last chunks, if made now, go out without waiting.
    const double finish_wait = out->size() != before ? 0.0 : wait;
    if (engine_finish_deadline_s_ < 0) {
      engine_finish_deadline_s_ = start + GenerationJob::kEngineFinishSeconds;
    }
    const double left = engine_finish_deadline_s_ - (wait > 0 ? SteadyClock().Now() : start);
    if (!job_->WaitForEngineFinish(std::clamp(left, 0.0, finish_wait)) && left > finish_wait) {
      done = false;
    }
  }
  if (done) {
    OnFinish(out);
    *out += protocol::SseDone();
  }
  const double now = wait > 0 ? SteadyClock().Now() : start;
  if (out->size() == before && now - last_write_s_ >= kPingSeconds) *out += protocol::kSsePing;
  if (out->size() != before) last_write_s_ = now;
  return done;
}

}  // namespace tinyserve
