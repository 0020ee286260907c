// AdmissionGate: the frontend's admission control for generation requests.
//
// - `--max-queue-len`: it counts the engine requests submitted by the frontend that have not been
//   scheduled yet (in the engine's inbox or waiting queue) and refuses a job whose requests would
//   push that count over the limit, so an overloaded server answers 503 at once instead of
//   queueing without bound. Limit 0 = unlimited (everything is admitted, and still counted).
// - Shutdown: it counts the live jobs (HTTP exchanges with engine requests), and after Drain()
//   refuses every new job, so a shutting-down server can wait for the in-flight ones to finish.
//
// A GenerationJob calls TryAdmit(k) for its k engine requests before submitting them,
// LeaveWaiting() once per request when its first SCHEDULED event (or tokens, or finish) arrives or
// when it is dropped before that, and EndJob() when it is destroyed. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tinyserve {

class AdmissionGate {
 public:
  explicit AdmissionGate(int64_t max_waiting) : max_waiting_(max_waiting) {}

  // Admits a job of `n` engine requests and returns true, or returns false (admitting nothing) and
  // sets *why when draining or when the waiting count would exceed the limit.
  bool TryAdmit(int64_t n, std::string* why) {
    if (draining_.load()) {
      *why = "The server is shutting down.";
      return false;
    }
    const int64_t before = num_waiting_.fetch_add(n);
    if (max_waiting_ > 0 && before + n > max_waiting_) {
      num_waiting_.fetch_sub(n);
      *why = "The server is overloaded: " + std::to_string(before) +
             " requests are waiting to be scheduled (--max-queue-len " +
             std::to_string(max_waiting_) + "). Retry later.";
      return false;
    }
    num_jobs_.fetch_add(1);
    return true;
  }
  // One admitted request left the waiting state.
  void LeaveWaiting() { num_waiting_.fetch_sub(1); }
  // One admitted job ended.
  void EndJob() { num_jobs_.fetch_sub(1); }
  // Refuses every later job.
  void Drain() { draining_.store(true); }

  int64_t num_waiting() const { return num_waiting_.load(); }
  int64_t num_jobs() const { return num_jobs_.load(); }
  int64_t max_waiting() const { return max_waiting_; }
  bool draining() const { return draining_.load(); }

 private:
  const int64_t max_waiting_;
  std::atomic<int64_t> num_waiting_{0};
  std::atomic<int64_t> num_jobs_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace tinyserve
