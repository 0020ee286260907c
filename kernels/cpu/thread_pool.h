// ThreadPool: the CPU backend's one pool of compute threads.
//
// ParallelFor(n, fn) runs fn(i) for every i in [0, n) on the pool's threads and the caller, and
// returns when all n calls have finished. Items are handed out one at a time from a shared
// counter, so a thread that the OS deschedules delays only the item it holds. Idle workers spin
// briefly (back-to-back parallel regions of one forward pass hand over fast), then sleep on a
// condition variable, so a busy machine is not burned by spinning threads (OpenMP's default
// spin-wait made tests 10x slower on a loaded 2-core machine).
//
// Thread-compatible: one caller at a time (the engine thread); fn must not call ParallelFor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include "base/thread_annotations.h"

namespace tinyserve {

class ThreadPool {
 public:
  // `num_threads` counts the caller: a pool of 1 runs everything on the caller.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for i in [0, n); returns when every call has returned.
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  struct Job {
    const std::function<void(int64_t)>* fn = nullptr;
    int64_t n = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
  };

  void WorkerLoop();
  static void RunItems(Job& job);

  std::vector<std::thread> workers_;
  Mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Job> job_ TS_GUARDED_BY(mu_);  // the latest job
  std::atomic<uint64_t> generation_{0};          // bumped (under mu_) when job_ changes
  bool stopping_ TS_GUARDED_BY(mu_) = false;
};

}  // namespace tinyserve
