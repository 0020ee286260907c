// Clock: the one monotonic time source of the engine (DESIGN §4).
//
// Everything that is stamped with a time (arrival, QUEUED, SCHEDULED, PREEMPTED, token outputs,
// FINISHED) reads the same Clock, so interval identities hold exactly. Production code uses
// SteadyClock; tests inject a FakeClock and move time by hand, which makes event timestamps exact.
// Both implementations are thread-safe. In base/ because it is the time base of every stamp an
// engine observer gets (engine_observer.h) as well as of the engine's own.
#pragma once

#include <chrono>
#include <mutex>

#include "base/thread_annotations.h"

namespace tinyserve {

class Clock {
 public:
  virtual ~Clock() = default;
  // Returns monotonic seconds since an arbitrary, fixed origin. Never decreases.
  virtual double Now() const = 0;
};

// std::chrono::steady_clock in seconds.
class SteadyClock final : public Clock {
 public:
  double Now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told. Starts at `start` seconds.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(double start = 0.0) : now_(start) {}

  double Now() const override {
    MutexLock lock(mu_);
    return now_;
  }
  // REQUIRES: t >= Now() (monotonic).
  void Set(double t) {
    MutexLock lock(mu_);
    if (t > now_) now_ = t;
  }
  // REQUIRES: dt >= 0.
  void Advance(double dt) {
    MutexLock lock(mu_);
    if (dt > 0) now_ += dt;
  }

 private:
  mutable Mutex mu_;
  double now_ TS_GUARDED_BY(mu_);
};

}  // namespace tinyserve
