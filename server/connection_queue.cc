#include "server/connection_queue.h"

#include <algorithm>
#include <utility>

#include "base/clock.h"

namespace tinyserve {
namespace {

// Threads answering the connections over max_connections (each holds one for a request head).
constexpr int kNumRejectionThreads = 2;

thread_local ConnectionState* current_connection = nullptr;

}  // namespace

ConnectionState* CurrentConnection() { return current_connection; }

double BeginRequest(double now) {
  ConnectionState* conn = current_connection;
  if (conn == nullptr) return now;
  conn->request_arrival_ts = conn->num_requests == 0 ? std::min(conn->accept_ts, now) : now;
  ++conn->num_requests;
  return conn->request_arrival_ts;
}

double RequestArrival(double now) {
  ConnectionState* conn = current_connection;
  return conn != nullptr && conn->num_requests > 0 ? conn->request_arrival_ts : now;
}

ConnectionQueue::ConnectionQueue(int num_threads, int64_t max_connections, const Clock* clock,
                                 std::atomic<int64_t>* num_connections,
                                 std::function<void()> on_reject)
    : max_connections_(max_connections),
      clock_(clock),
      on_reject_(std::move(on_reject)),
      num_connections_(num_connections) {
  const int num_rejection_threads = max_connections_ > 0 ? kNumRejectionThreads : 0;
  threads_.reserve(static_cast<size_t>(num_threads + num_rejection_threads));
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { Work(false); });
  for (int i = 0; i < num_rejection_threads; ++i) threads_.emplace_back([this] { Work(true); });
}

ConnectionQueue::~ConnectionQueue() { shutdown(); }

void ConnectionQueue::enqueue(std::function<void()> fn) {
  Task task{std::move(fn), clock_->Now()};
  bool accepted = false;
  {
    MutexLock lock(mu_);
    if (max_connections_ <= 0 || num_connections_->load() < max_connections_) {
      accepted = true;
      num_connections_->fetch_add(1);
      queued_.push_back(std::move(task));
    }
  }
  if (accepted) {
    work_cv_.notify_one();
    return;
  }
  // Refused: counted before a rejection thread can answer it (a client that has its 503 sees
  // the count).
  if (on_reject_) on_reject_();
  {
    MutexLock lock(mu_);
    rejected_.push_back(std::move(task));
  }
  reject_cv_.notify_one();
}

void ConnectionQueue::Work(bool rejecting) {
  while (true) {
    Task task;
    {
      MutexLock lock(mu_);
      std::deque<Task>& tasks = rejecting ? rejected_ : queued_;
      while (tasks.empty() && !shutdown_) lock.Wait(rejecting ? reject_cv_ : work_cv_);
      if (tasks.empty()) return;  // shut down, nothing left
      task = std::move(tasks.front());
      tasks.pop_front();
    }
    ConnectionState state;
    state.accept_ts = task.accept_ts;
    state.rejected = rejecting;
    current_connection = &state;
    task.fn();
    current_connection = nullptr;
    task.fn = nullptr;  // its captures go before the connection stops counting
    if (!rejecting) {
      MutexLock lock(mu_);
      num_connections_->fetch_sub(1);
    }
  }
}

void ConnectionQueue::shutdown() {
  {
    MutexLock lock(mu_);
    shutdown_ = true;
  }
  work_cv_.notify_all();
  reject_cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace tinyserve
