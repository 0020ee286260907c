// BitmaskFill and BitmaskFillWorker: the structured-output masks of one engine step, computed on a
// worker thread while the executor runs the forward pass.
//
// EngineCore sizes the step's ScheduledBatch::token_bitmask and bitmask_row on the engine thread,
// then (when the executor AwaitsBitmaskFill()) hands the fill of the mask words to its one
// long-lived BitmaskFillWorker and puts a BitmaskFill in the batch (ScheduledBatch::bitmask_fill).
// The executor calls ScheduledBatch::AwaitBitmask() right before it reads the words (before
// sampling); the engine always waits for the fill itself after Execute() returns, so no fill
// outlives its step. Done() publishes the words: everything the worker wrote before Done()
// happens-before every Await()/Wait() that returns.
//
// Thread safety: BitmaskFill is thread-safe; BitmaskFillWorker::Run() and its destructor belong to
// one thread (the engine thread), the job runs on the worker's thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <thread>

#include "base/thread_annotations.h"

namespace tinyserve {

class BitmaskFill {
 public:
  BitmaskFill() = default;
  BitmaskFill(const BitmaskFill&) = delete;
  BitmaskFill& operator=(const BitmaskFill&) = delete;

  // The executor's wait: blocks until the masks are written; the time it blocked adds to
  // awaited_seconds(). Returns at once when they already are.
  void Await() const TS_EXCLUDES(mu_);
  // The engine's wait (not counted in awaited_seconds()).
  void Wait() const TS_EXCLUDES(mu_);
  bool done() const TS_EXCLUDES(mu_);
  // Marks the masks written (the worker, once) and wakes the waiters; `fill_seconds` is the time
  // the fill took.
  void Done(double fill_seconds) TS_EXCLUDES(mu_);

  // Valid after Wait()/Await() returned.
  double fill_seconds() const TS_EXCLUDES(mu_);
  double awaited_seconds() const TS_EXCLUDES(mu_);

 private:
  mutable Mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ TS_GUARDED_BY(mu_) = false;
  double fill_seconds_ TS_GUARDED_BY(mu_) = 0.0;
  mutable double awaited_seconds_ TS_GUARDED_BY(mu_) = 0.0;
};

class BitmaskFillWorker {
 public:
  BitmaskFillWorker() = default;
  // Joins the thread (after the job in flight, if any).
  ~BitmaskFillWorker();
  BitmaskFillWorker(const BitmaskFillWorker&) = delete;
  BitmaskFillWorker& operator=(const BitmaskFillWorker&) = delete;

  // Runs `job` on the worker thread (started on the first call). REQUIRES: the previous job is
  // done (the caller waited for its BitmaskFill). Returns false, without running the job, if no
  // thread could be started; the caller then runs it itself.
  bool Run(std::function<void()> job) TS_EXCLUDES(mu_);

 private:
  void Loop() TS_EXCLUDES(mu_);

  Mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_ TS_GUARDED_BY(mu_);
  bool stopping_ TS_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tinyserve
