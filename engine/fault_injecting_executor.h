// FaultInjectingExecutor: a ModelExecutor wrapper that makes chosen executor calls fail, to test
// (and soak) the engine's failure paths against a real model: `tinyserve serve
// --fault-inject-rate P --fault-seed S --fault-kind error|exception|fatal|hang` (hidden flags), and
// the reliability tests.
//
// Which calls fail: call k (1-based, counting every Execute()) fails iff k is in `config.calls`,
// or a counter-based draw keyed by (seed, k) falls below `config.rate`; so one seed gives the same
// failing calls in every run. A failing call first runs the wrapped executor (so the device has
// written K/V for the batch, as a real mid-step failure would), then discards its output and:
//   kError      returns Unavailable("injected fault at executor call k (N sequences)")
//   kException  throws std::runtime_error with that message (EngineCore catches it)
//   kFatal      returns DeviceLost with that message (EngineCore dies)
//   kHang       never returns (a wedged device or driver): the engine thread blocks for good, so
//               the shutdown cannot finish and its watchdog must end the process
// Every injected fault is logged (faults(), and `on_fault` when set, called on the engine thread).
//
// Thread safety: Execute() on the engine thread only; faults() and num_calls() are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/model_executor.h"

namespace tinyserve {

enum class FaultKind : uint8_t { kError, kException, kFatal, kHang };

// "error", "exception", "fatal", "hang".
const char* FaultKindName(FaultKind kind);
// Parses FaultKindName()'s names. Returns InvalidArgument for anything else.
StatusOr<FaultKind> ParseFaultKind(const std::string& name);

struct FaultInjectionConfig {
  double rate = 0.0;           // probability in [0, 1] that a call fails
  uint64_t seed = 0;           // keys the draws
  std::vector<int64_t> calls;  // these calls (1-based) fail too
  FaultKind kind = FaultKind::kError;

  bool enabled() const { return rate > 0.0 || !calls.empty(); }
};

struct InjectedFault {
  int64_t call = 0;      // the executor call (1-based)
  int32_t num_seqs = 0;  // sequences in that batch: the requests the fault fails
  FaultKind kind = FaultKind::kError;
};

class FaultInjectingExecutor final : public ModelExecutor {
 public:
  // `inner` must outlive this object.
  FaultInjectingExecutor(ModelExecutor* inner, FaultInjectionConfig config,
                         std::function<void(const InjectedFault&)> on_fault = nullptr);

  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override;
  void Release(const std::vector<uint64_t>& keys) override { inner_->Release(keys); }
  int32_t num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  int32_t block_size() const override { return inner_->block_size(); }
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t max_model_len() const override { return inner_->max_model_len(); }

  // Returns true iff call `call` (1-based) is one that fails.
  bool ShouldFail(int64_t call) const;
  // The executor calls so far. Thread-safe.
  int64_t num_calls() const { return num_calls_.load(); }
  // The faults injected so far, in order.
  std::vector<InjectedFault> faults() const;
  // The message of the fault injected at `call` into a batch of `num_seqs` sequences.
  static std::string FaultMessage(int64_t call, int32_t num_seqs);

 private:
  ModelExecutor* const inner_;
  const FaultInjectionConfig config_;
  const std::function<void(const InjectedFault&)> on_fault_;
  std::atomic<int64_t> num_calls_{0};  // written by the engine thread
  mutable std::mutex mu_;
  std::vector<InjectedFault> faults_;  // guarded by mu_
};

}  // namespace tinyserve
