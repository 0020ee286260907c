#include "server/sse_stream.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "server/protocol/responses.h"

namespace tinyserve {
namespace {

constexpr double kPollSeconds = 0.02;
constexpr double kPingSeconds = 0.1;

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void SseStream::Attach(std::shared_ptr<SseStream> stream, httplib::Response& res) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t /*offset*/, httplib::DataSink& sink) { return stream->Pump(sink); },
      [stream](bool success) {
        if (!success) stream->job_->Abort();
      });
}

bool SseStream::Pump(httplib::DataSink& sink) {
  std::string out;
  if (!started_) {
    started_ = true;
    last_write_s_ = SteadySeconds();
    OnStart(&out);
  }
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
  const double wait = std::min(kPollSeconds, kPingSeconds - (start - last_write_s_));
  updates_.clear();
  job_->Poll(out.empty() && wait > 0 ? wait : 0.0, &updates_);
  for (const ChoiceUpdate& u : updates_) OnUpdate(u, &out);
  const bool done = job_->finished();
  if (done) {
    OnFinish(&out);
    out += protocol::SseDone();
  }
  const double now = SteadySeconds();
  if (out.empty() && now - last_write_s_ >= kPingSeconds) out = protocol::kSsePing;
  if (!out.empty()) {
    if (!sink.write(out.data(), out.size())) {
      job_->Abort();
      return false;
    }
    last_write_s_ = now;
  }
  if (done) sink.done();
  return true;
}

}  // namespace tinyserve
