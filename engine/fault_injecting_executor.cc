#include "engine/fault_injecting_executor.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>

#include "base/hash.h"

namespace tinyserve {

const char* FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kError:
      return "error";
    case FaultKind::kException:
      return "exception";
    case FaultKind::kFatal:
      return "fatal";
    case FaultKind::kHang:
      return "hang";
  }
  return "unknown";
}

StatusOr<FaultKind> ParseFaultKind(const std::string& name) {
  for (FaultKind k :
       {FaultKind::kError, FaultKind::kException, FaultKind::kFatal, FaultKind::kHang}) {
    if (name == FaultKindName(k)) return k;
  }
  return InvalidArgument("unknown fault kind '" + name + "' (error, exception, fatal or hang)");
}

FaultInjectingExecutor::FaultInjectingExecutor(ModelExecutor* inner, FaultInjectionConfig config,
                                               std::function<void(const InjectedFault&)> on_fault)
    : inner_(inner), config_(std::move(config)), on_fault_(std::move(on_fault)) {}

bool FaultInjectingExecutor::ShouldFail(int64_t call) const {
  if (std::find(config_.calls.begin(), config_.calls.end(), call) != config_.calls.end()) {
    return true;
  }
  if (config_.rate <= 0.0) return false;
  const uint64_t bits = SplitMix64(config_.seed ^ SplitMix64(static_cast<uint64_t>(call)));
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // uniform in [0, 1)
  return u < config_.rate;
}

std::string FaultInjectingExecutor::FaultMessage(int64_t call, int32_t num_seqs) {
  return "injected fault at executor call " + std::to_string(call) + " (" +
         std::to_string(num_seqs) + " sequences)";
}

std::vector<InjectedFault> FaultInjectingExecutor::faults() const {
  std::lock_guard<std::mutex> lock(mu_);
  return faults_;
}

StatusOr<ExecutorOutput> FaultInjectingExecutor::Execute(const ScheduledBatch& batch) {
  const int64_t call = ++num_calls_;
  StatusOr<ExecutorOutput> out = inner_->Execute(batch);
  if (!out.ok() || !ShouldFail(call)) return out;
  const InjectedFault fault{call, batch.num_seqs(), config_.kind};
  {
    std::lock_guard<std::mutex> lock(mu_);
    faults_.push_back(fault);
  }
  if (on_fault_) on_fault_(fault);
  const std::string message = FaultMessage(call, fault.num_seqs);
  switch (config_.kind) {
    case FaultKind::kError:
      return Unavailable(message);
    case FaultKind::kException:
      throw std::runtime_error(message);
    case FaultKind::kFatal:
      return DeviceLost(message);
    case FaultKind::kHang:
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  return Internal(message);
}

}  // namespace tinyserve
