#include "kernels/cpu/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TINYSERVE_CPU_RELAX() _mm_pause()
#else
#define TINYSERVE_CPU_RELAX() std::this_thread::yield()
#endif

namespace tinyserve {
namespace {
// About 50-100 microseconds of spinning before a worker sleeps.
constexpr int kSpinIterations = 1 << 13;
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunItems(Job& job) {
  for (int64_t i; (i = job.next.fetch_add(1, std::memory_order_relaxed)) < job.n;) {
    (*job.fn)(i);
    job.done.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  {
    MutexLock lock(mu_);
    job_ = job;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  RunItems(*job);
  // Wait for items other threads hold; they finish soon (no new items can start).
  for (int spins = 0; job->done.load(std::memory_order_acquire) < n; ++spins) {
    if (spins < kSpinIterations) {
      TINYSERVE_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    // Spin a little for the next job, then sleep until one comes.
    for (int spins = 0;
         spins < kSpinIterations && generation_.load(std::memory_order_acquire) == seen; ++spins) {
      TINYSERVE_CPU_RELAX();
    }
    std::shared_ptr<Job> job;
    {
      MutexLock lock(mu_);
      while (generation_.load(std::memory_order_relaxed) == seen) lock.Wait(cv_);
      if (stopping_) return;
      seen = generation_.load(std::memory_order_relaxed);
      job = job_;
    }
    if (job) RunItems(*job);
  }
}

}  // namespace tinyserve
