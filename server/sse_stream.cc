#include "server/sse_stream.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "server/protocol/responses.h"
#include "server/sse_writer.h"

namespace tinyserve {
namespace {

constexpr double kPollSeconds = 0.02;
constexpr double kPingSeconds = 0.1;
// As long as a non-streaming response waits (completions_route.cc, chat_route.cc).
constexpr double kEngineFinishSeconds = 1.0;

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void SseStream::Attach(std::shared_ptr<SseStream> stream, httplib::Response& res,
                       SseWriter* writer) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  if (writer == nullptr || stream->socket_fd() < 0) {
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream](size_t /*offset*/, httplib::DataSink& sink) { return stream->Pump(sink); },
        [stream](bool success) {
          if (!success) stream->Abort();
        });
    return;
  }
  // httplib has written the response head when it first calls the provider; from then until the
  // provider returns, nothing else touches the socket, so the writer thread may write the chunks.
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream, writer](size_t /*offset*/, httplib::DataSink& sink) {
        if (!stream->on_worker_) {
          switch (writer->Run(stream.get())) {
            case SseWriter::RunResult::kSent:
              sink.done();
              return true;
            case SseWriter::RunResult::kFailed:
              return false;
            case SseWriter::RunResult::kNotTaken:
              stream->on_worker_ = true;
              break;
          }
        }
        return stream->Pump(sink);
      },
      [stream](bool success) {
        if (!success) stream->Abort();
      });
}

void SseStream::SetWaker(const std::shared_ptr<StreamWaker>& waker) {
  for (const auto& c : job_->choices()) c->stream->SetWaker(waker);
}

bool SseStream::Produce(double wait_s, std::string* out) {
  const size_t before = out->size();
  const double start = SteadySeconds();  // one clock read unless Poll() may wait
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
    // step. The usage chunk waits for it, up to kEngineFinishSeconds, without blocking a writer
    // thread (it comes back on the finish's wake-up or its next tick).
    // The choices' last chunks, if made now, go out without waiting.
    const double finish_wait = out->size() != before ? 0.0 : wait;
    if (engine_finish_deadline_s_ < 0) engine_finish_deadline_s_ = start + kEngineFinishSeconds;
    const double left = engine_finish_deadline_s_ - (wait > 0 ? SteadySeconds() : start);
    if (!job_->WaitForEngineFinish(std::clamp(left, 0.0, finish_wait)) && left > finish_wait) {
      done = false;
    }
  }
  if (done) {
    OnFinish(out);
    *out += protocol::SseDone();
  }
  const double now = wait > 0 ? SteadySeconds() : start;
  if (out->size() == before && now - last_write_s_ >= kPingSeconds) *out += protocol::kSsePing;
  if (out->size() != before) last_write_s_ = now;
  return done;
}

bool SseStream::Pump(httplib::DataSink& sink) {
  // The watch costs a system call: while tokens flow (one provider call per engine step) look
  // at most every kPollSeconds; an idle stream comes back here every kPollSeconds anyway.
  const double start = SteadySeconds();
  if (start - last_watch_s_ >= kPollSeconds) {
    last_watch_s_ = start;
    if (watch_.IsPeerClosed()) {
      job_->Abort();
      return false;
    }
  }
  std::string out;
  const bool done = Produce(kPollSeconds, &out);
  if (!out.empty() && !sink.write(out.data(), out.size())) {
    job_->Abort();
    return false;
  }
  if (done) sink.done();
  return true;
}

}  // namespace tinyserve
