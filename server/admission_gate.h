// AdmissionGate: the frontend's admission control for generation requests, in vLLM's terms
// (vllm-project/vllm#49445).
//
// - `--max-num-queued-reqs` (alias `--max-queue-len`): the engine requests submitted by the
//   frontend and not finished (waiting or running; a request with n > 1 is n of them). A job whose
//   requests would push that count over the limit is refused, so an overloaded server answers 503
//   at once instead of queueing without bound.
// - `--max-num-queued-tokens`: the prompt tokens of the submitted requests that have not produced
//   their first token yet (waiting for or in their prefill); a rough TTFT guard: set it near
//   target TTFT x prefill throughput. A job whose prompt tokens would push that sum over the limit
//   is refused.
// Limit 0 = unlimited (everything is admitted, and still counted). The request cap is checked
// first. Two admissions racing near a limit may both be refused (each sees the other's
// tentative count); never both admitted over it.
// - Shutdown: it counts the live jobs (HTTP exchanges with engine requests), and after Drain()
//   refuses every new job, so a shutting-down server can wait for the in-flight ones to finish.
//
// A GenerationJob calls TryAdmit(k, tokens) for its k engine requests before submitting them;
// for each admitted request, LeavePrefill(its prompt tokens) once when its first token (or its
// finish) arrives or when it is dropped before that, and FinishRequest() once when its finish
// arrives or it is dropped; EndJob() when it is destroyed. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tinyserve {

struct AdmissionLimits {
  int64_t max_num_queued_reqs = 0;    // 0: unlimited
  int64_t max_num_queued_tokens = 0;  // 0: unlimited
};

class AdmissionGate {
 public:
  enum class Outcome { kAdmitted, kDraining, kMaxNumQueuedReqs, kMaxNumQueuedTokens };

  explicit AdmissionGate(AdmissionLimits limits) : limits_(limits) {}

  // Admits a job of `num_requests` engine requests with `num_prompt_tokens` prompt tokens in all,
  // or refuses it (admitting nothing) and sets *why.
  Outcome TryAdmit(int64_t num_requests, int64_t num_prompt_tokens, std::string* why) {
    if (draining_.load()) {
      *why = "The server is shutting down.";
      return Outcome::kDraining;
    }
    const int64_t reqs_before = num_queued_reqs_.fetch_add(num_requests);
    if (limits_.max_num_queued_reqs > 0 &&
        reqs_before + num_requests > limits_.max_num_queued_reqs) {
      num_queued_reqs_.fetch_sub(num_requests);
      *why = "The server is overloaded: " + std::to_string(reqs_before) +
             " requests are in flight (--max-num-queued-reqs " +
             std::to_string(limits_.max_num_queued_reqs) + "). Retry later.";
      return Outcome::kMaxNumQueuedReqs;
    }
    const int64_t tokens_before = num_queued_tokens_.fetch_add(num_prompt_tokens);
    if (limits_.max_num_queued_tokens > 0 &&
        tokens_before + num_prompt_tokens > limits_.max_num_queued_tokens) {
      num_queued_tokens_.fetch_sub(num_prompt_tokens);
      num_queued_reqs_.fetch_sub(num_requests);
      *why = "The server is overloaded: " + std::to_string(tokens_before) +
             " prompt tokens wait for their prefill (--max-num-queued-tokens " +
             std::to_string(limits_.max_num_queued_tokens) + "). Retry later.";
      return Outcome::kMaxNumQueuedTokens;
    }
    num_jobs_.fetch_add(1);
    return Outcome::kAdmitted;
  }
  // One admitted request's first token (or finish) arrived, or it was dropped before.
  void LeavePrefill(int64_t num_prompt_tokens) { num_queued_tokens_.fetch_sub(num_prompt_tokens); }
  // One admitted request finished or was dropped.
  void FinishRequest() { num_queued_reqs_.fetch_sub(1); }
  // One admitted job ended.
  void EndJob() { num_jobs_.fetch_sub(1); }
  // Refuses every later job.
  void Drain() { draining_.store(true); }

  // The engine requests in flight, as --max-num-queued-reqs counts them.
  int64_t num_queued_reqs() const { return num_queued_reqs_.load(); }
  // The prompt tokens waiting for their first token, as --max-num-queued-tokens counts them.
  int64_t num_queued_tokens() const { return num_queued_tokens_.load(); }
  int64_t num_jobs() const { return num_jobs_.load(); }
  const AdmissionLimits& limits() const { return limits_; }
  bool draining() const { return draining_.load(); }

 private:
  const AdmissionLimits limits_;
  std::atomic<int64_t> num_queued_reqs_{0};
  std::atomic<int64_t> num_queued_tokens_{0};
  std::atomic<int64_t> num_jobs_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace tinyserve
