#include "engine/request_stream.h"

#include <chrono>
#include <iterator>
#include <utility>

namespace tinyserve {

void RequestOutput::Clear() {
  token_ids.clear();
  token_ts.clear();
  logprobs.clear();
  prompt_logprobs.clear();
  events.clear();
  finished = false;
  finish_reason = FinishReason::kNone;
  stop_token_id.reset();
  error_message.clear();
  counts = RequestCounts{};
}

void RequestOutput::Append(const RequestOutput& d) {
  token_ids.insert(token_ids.end(), d.token_ids.begin(), d.token_ids.end());
  token_ts.insert(token_ts.end(), d.token_ts.begin(), d.token_ts.end());
  logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  prompt_logprobs.insert(prompt_logprobs.end(), d.prompt_logprobs.begin(), d.prompt_logprobs.end());
  events.insert(events.end(), d.events.begin(), d.events.end());
  if (d.finished) {
    finished = true;
    finish_reason = d.finish_reason;
    stop_token_id = d.stop_token_id;
    error_message = d.error_message;
    counts = d.counts;
  }
}

bool RequestStream::TakeLocked(RequestOutput* out) {
  out->Clear();
  if (pending_.empty()) return false;
  std::swap(*out, pending_);  // pending_ gets out's cleared buffers back
  if (out->finished) finish_handed_out_ = true;
  return true;
}

bool RequestStream::Next(RequestOutput* out, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  MutexLock lock(mu_);
  while (pending_.empty() && !finish_handed_out_) {
    if (!lock.WaitUntil(cv_, deadline)) break;
  }
  return TakeLocked(out);
}

bool RequestStream::TryNext(RequestOutput* out) {
  MutexLock lock(mu_);
  return TakeLocked(out);
}

bool RequestStream::WaitForFinish(RequestOutput* out, double timeout_s) {
  out->Clear();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  RequestOutput delta;
  while (true) {
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (Next(&delta, left > 0 ? left : 0.0)) out->Append(delta);
    if (out->finished) return true;
    if (is_done() || std::chrono::steady_clock::now() >= deadline) return false;
  }
}

bool RequestStream::is_done() const {
  MutexLock lock(mu_);
  return finish_handed_out_;
}

void RequestStream::PushToken(int32_t token_id, double ts, const TokenLogprobs* logprobs,
                              bool notify) {
  {
    MutexLock lock(mu_);
    pending_.token_ids.push_back(token_id);
    pending_.token_ts.push_back(ts);
    if (logprobs != nullptr) pending_.logprobs.push_back(*logprobs);
  }
  if (notify) Notify();
}

void RequestStream::PushPromptLogprobs(std::vector<TokenLogprobs>&& logprobs, bool notify) {
  {
    MutexLock lock(mu_);
    if (pending_.prompt_logprobs.empty()) {
      pending_.prompt_logprobs = std::move(logprobs);
    } else {
      pending_.prompt_logprobs.insert(pending_.prompt_logprobs.end(),
                                      std::make_move_iterator(logprobs.begin()),
                                      std::make_move_iterator(logprobs.end()));
    }
  }
  if (notify) Notify();
}

void RequestStream::PushEvent(const RequestEvent& event, bool notify) {
  {
    MutexLock lock(mu_);
    pending_.events.push_back(event);
  }
  if (notify) Notify();
}

void RequestStream::Finish(const RequestEvent& finished, std::optional<int32_t> stop_token_id,
                           const std::string& error_message, bool notify,
                           const RequestCounts& counts) {
  {
    MutexLock lock(mu_);
    pending_.events.push_back(finished);
    pending_.finished = true;
    pending_.finish_reason = finished.finish_reason;
    pending_.stop_token_id = stop_token_id;
    pending_.error_message = error_message;
    pending_.counts = counts;
  }
  if (notify) Notify();
}

std::shared_ptr<StreamWaker> RequestStream::WakeWithoutFlush() {
  cv_.notify_all();
  if (!has_waker_.load(std::memory_order_acquire)) return nullptr;
  std::shared_ptr<StreamWaker> waker;
  {
    MutexLock lock(mu_);
    waker = waker_;
  }
  if (waker != nullptr) waker->Wake();
  return waker;
}

void RequestStream::Notify() {
  if (std::shared_ptr<StreamWaker> waker = WakeWithoutFlush()) waker->Flush();
}

void RequestStream::NotifyAll(const std::vector<RequestStream*>& streams) {
  // Every waker is flushed after all of them were woken. Wakers sharing a consumer (the SSE
  // writer's) make its system call on the first Flush; the later ones find it done.
  std::vector<std::shared_ptr<StreamWaker>> to_flush;
  to_flush.reserve(streams.size());
  for (RequestStream* stream : streams) {
    if (std::shared_ptr<StreamWaker> waker = stream->WakeWithoutFlush()) {
      to_flush.push_back(std::move(waker));
    }
  }
  for (const auto& waker : to_flush) waker->Flush();
}

void RequestStream::SetWaker(std::shared_ptr<StreamWaker> waker) {
  MutexLock lock(mu_);
  has_waker_.store(waker != nullptr, std::memory_order_release);
  waker_ = std::move(waker);
}

}  // namespace tinyserve
