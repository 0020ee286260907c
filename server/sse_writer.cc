#include "server/sse_writer.h"

#include <errno.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <utility>

#include "engine/request_stream.h"
#include "server/sse_stream.h"

namespace tinyserve {
namespace {

// How often the loop runs without a wake-up while it has streams (pings are due after 100 ms of
// silence; see SseStream::Produce).
constexpr int kTickMs = 20;
constexpr int kMaxEvents = 64;
constexpr uint32_t kWatchedEvents = EPOLLRDHUP;  // EPOLLHUP and EPOLLERR are always reported

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void AppendChunkFrame(const std::string& data, std::string* out) {
  char head[24];
  char* end = std::to_chars(head, head + sizeof(head) - 2, data.size(), 16).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out->append(head, end);
  out->append(data);
  out->append("\r\n", 2);
}

}  // namespace

struct SseWriter::Entry {
  SseStream* stream = nullptr;
  int fd = -1;
  uint64_t id = 0;
  std::promise<RunResult> result;
  std::string pending;  // framed bytes not yet sent, from pending[sent]
  size_t sent = 0;
  double stalled_since = 0.0;  // steady seconds of the EAGAIN that left bytes pending
  bool produced_all = false;   // `data: [DONE]` is in pending (or already sent)
  bool watching_out = false;   // EPOLLOUT is in the epoll set
  bool closed = false;         // Complete() ran; erased at the end of the loop iteration
  uint64_t serviced_pass = 0;  // the loop iteration that last serviced it
};

// The ready list and the eventfd, shared by the writer and its streams' wakers. Owns the eventfd,
// so that a RequestStream that still holds a waker after the writer is gone never writes to a
// closed (or reused) descriptor.
class SseWriter::Signal {
 public:
  explicit Signal(int fd) : fd_(fd) {}
  ~Signal() { close(fd_); }
  Signal(const Signal&) = delete;
  Signal& operator=(const Signal&) = delete;

  // Puts stream `id` on the ready list, without waking the writer (Flush() does). Any thread.
  void Mark(uint64_t id) {
    MutexLock lock(mu_);
    ready_.push_back(id);
  }
  // Wakes the writer if the ready list has ids it has not been woken for (`force`: in any case):
  // the first flush after the writer took the list writes the eventfd. Any thread.
  void Flush(bool force = false) {
    bool write_event = false;
    {
      MutexLock lock(mu_);
      write_event = !signaled_ && (force || !ready_.empty());
      signaled_ = signaled_ || write_event;
    }
    if (write_event) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof(one));
    }
  }
  // Writer thread: moves the ready list into *ids (replacing its contents); the next Flush() with
  // new marks writes the eventfd again. Everything pushed to a stream before its mark is visible
  // after this.
  void Take(std::vector<uint64_t>* ids) {
    ids->clear();
    MutexLock lock(mu_);
    ids->swap(ready_);
    signaled_ = false;
  }
  void Drain() {
    uint64_t value = 0;
    [[maybe_unused]] const ssize_t n = read(fd_, &value, sizeof(value));
  }

 private:
  const int fd_;
  Mutex mu_;
  std::vector<uint64_t> ready_ TS_GUARDED_BY(mu_);
  bool signaled_ TS_GUARDED_BY(mu_) = false;
};

// One stream's waker: marks its entry ready; Flush() wakes the writer once for all marks.
class SseWriter::Waker final : public StreamWaker {
 public:
  Waker(std::shared_ptr<Signal> signal, uint64_t id) : signal_(std::move(signal)), id_(id) {}
  void Wake() override { signal_->Mark(id_); }
  void Flush() override { signal_->Flush(); }

 private:
  const std::shared_ptr<Signal> signal_;
  const uint64_t id_;
};

std::unique_ptr<SseWriter> SseWriter::Create(SseWriterOptions options) {
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return nullptr;
  const int event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (event_fd < 0) {
    close(epoll_fd);
    return nullptr;
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, event_fd, &ev) != 0) {
    close(event_fd);
    close(epoll_fd);
    return nullptr;
  }
  return std::unique_ptr<SseWriter>(new SseWriter(epoll_fd, event_fd, std::move(options)));
}

SseWriter::SseWriter(int epoll_fd, int event_fd, SseWriterOptions options)
    : epoll_fd_(epoll_fd),
      options_(std::move(options)),
      signal_(std::make_shared<Signal>(event_fd)) {
  thread_ = std::thread([this] { Loop(); });
  pthread_setname_np(thread_.native_handle(), "sse-writer");
}

SseWriter::~SseWriter() {
  Shutdown();
  thread_.join();
  close(epoll_fd_);
}

void SseWriter::Shutdown() {
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  signal_->Flush(/*force=*/true);
}

SseWriter::RunResult SseWriter::Run(SseStream* stream) {
  auto entry = std::make_unique<Entry>();
  entry->stream = stream;
  entry->fd = stream->socket_fd();
  std::future<RunResult> result = entry->result.get_future();
  {
    MutexLock lock(mu_);
    if (shut_down_) {
      stream->Abort();
      return RunResult::kFailed;
    }
    incoming_.push_back(std::move(entry));
  }
  signal_->Flush(/*force=*/true);
  return result.get();
}

void SseWriter::Loop() {
  epoll_event events[kMaxEvents];
  bool running = true;
  while (running) {
    // Sleep until woken, or until the next full pass is due.
    int timeout_ms = -1;
    if (!entries_.empty()) {
      const double due_ms = (last_full_pass_s_ - SteadySeconds()) * 1e3 + kTickMs;
      timeout_ms = due_ms <= 0 ? 0 : static_cast<int>(due_ms) + 1;
    }
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
    ++pass_;
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == 0) {
        signal_->Drain();
        continue;
      }
      auto it = entries_.find(id);
      if (it == entries_.end() || it->second->closed) continue;
      Entry& e = *it->second;
      if ((events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
        Complete(e, false);  // the client is gone
      } else if ((events[i].events & EPOLLOUT) != 0) {
        if (!Flush(e)) {
          Complete(e, false);
        } else if (e.produced_all && e.pending.empty()) {
          Complete(e, true);
        }
      }
    }
    signal_->Take(&ready_);
    std::vector<std::unique_ptr<Entry>> incoming;
    {
      MutexLock lock(mu_);
      incoming.swap(incoming_);
      running = !shut_down_;
    }
    for (std::unique_ptr<Entry>& e : incoming) {
      e->id = next_id_++;
      epoll_event ev{};
      ev.events = kWatchedEvents;
      ev.data.u64 = e->id;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, e->fd, &ev) != 0) {
        e->result.set_value(RunResult::kNotTaken);  // e.g. ENOSPC (max_user_watches)
        continue;
      }
      e->stream->SetWaker(std::make_shared<Waker>(signal_, e->id));
      ready_.push_back(e->id);  // whatever came before the waker
      entries_.emplace(e->id, std::move(e));
    }
    // The woken streams; every stream every kTickMs (pings, stalled clients) and at shutdown.
    const double now = SteadySeconds();
    if (!running || now - last_full_pass_s_ >= kTickMs * 1e-3) {
      last_full_pass_s_ = now;
      for (auto& [id, e] : entries_) {
        if (e->closed) continue;
        if (!running || (e->watching_out && now - e->stalled_since > options_.stall_seconds)) {
          Complete(*e, false);  // shutting down, or a client that has stopped taking anything
        } else {
          Service(*e);
        }
      }
    } else {
      for (const uint64_t id : ready_) {
        auto it = entries_.find(id);
        if (it == entries_.end() || it->second->closed) continue;
        Service(*it->second);
      }
    }
    std::erase_if(entries_, [](const auto& kv) { return kv.second->closed; });
  }
}

void SseWriter::Service(Entry& e) {
  if (e.produced_all || e.serviced_pass == pass_) return;  // flush left (EPOLLOUT), or done
  e.serviced_pass = pass_;
  frame_.clear();
  try {
    e.produced_all = e.stream->Produce(0.0, &frame_);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "tinyserve: SSE stream failed: %s\n", ex.what());
    Complete(e, false);
    return;
  }
  if (!frame_.empty()) AppendChunkFrame(frame_, &e.pending);
  if (e.pending.size() - e.sent > kMaxPendingBytes) {
    Complete(e, false);  // a client this far behind is not reading
    return;
  }
  if (!e.watching_out && !Flush(e)) {
    Complete(e, false);
    return;
  }
  if (e.produced_all && e.pending.empty()) Complete(e, true);
}

bool SseWriter::Flush(Entry& e) {
  const size_t sent_before = e.sent;
  while (e.sent < e.pending.size()) {
    const ssize_t n = send(e.fd, e.pending.data() + e.sent, e.pending.size() - e.sent,
                           MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      e.sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!e.watching_out || e.sent != sent_before) e.stalled_since = SteadySeconds();
      if (e.sent > e.pending.size() / 2) {  // keep the buffer to what is still to send
        e.pending.erase(0, e.sent);
        e.sent = 0;
      }
      return WatchWritable(e, true);
    } else {
      return false;
    }
  }
  const bool sent_any = e.sent > sent_before;
  e.pending.clear();
  e.sent = 0;
  if (options_.on_sent && sent_any) {
    options_.on_sent(e.stream->first_request_id(), e.stream->first_choice_tokens(),
                     SteadySeconds());
  }
  return WatchWritable(e, false);
}

bool SseWriter::WatchWritable(Entry& e, bool on) {
  if (e.watching_out == on) return true;
  e.watching_out = on;
  epoll_event ev{};
  ev.events = kWatchedEvents | (on ? EPOLLOUT : 0u);
  ev.data.u64 = e.id;
  return epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, e.fd, &ev) == 0;
}

void SseWriter::Complete(Entry& e, bool ok) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, e.fd, nullptr);
  e.stream->SetWaker(nullptr);
  if (!ok) e.stream->Abort();
  e.closed = true;
  // From here on the stream may be gone (its HTTP worker goes on).
  e.result.set_value(ok ? RunResult::kSent : RunResult::kFailed);
}

}  // namespace tinyserve
