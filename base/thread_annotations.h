// Clang thread-safety annotations and the annotated Mutex / MutexLock they check.
//
// A member written `T x_ TS_GUARDED_BY(mu_);` may only be touched while `mu_` is held; clang's
// -Wthread-safety (on in the clang sanitizer build, scripts/sanitize.sh) reports every access
// that it cannot prove holds the lock, and every function that is called without a lock it
// TS_REQUIRES. With other compilers the macros expand to nothing. std::mutex carries no
// annotations in libstdc++, so guarded state uses this Mutex; MutexLock is its scoped lock, with
// the condition-variable waits (write the wait predicate as a loop around Wait so that the
// analysis sees the guarded reads under the lock).
//
// Header-only (no link dependency): kernels/ may use it too.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TS_THREAD_ANNOTATION(x)
#endif

#define TS_CAPABILITY(name) TS_THREAD_ANNOTATION(capability(name))
#define TS_SCOPED_CAPABILITY TS_THREAD_ANNOTATION(scoped_lockable)
#define TS_GUARDED_BY(mu) TS_THREAD_ANNOTATION(guarded_by(mu))
#define TS_PT_GUARDED_BY(mu) TS_THREAD_ANNOTATION(pt_guarded_by(mu))
#define TS_REQUIRES(...) TS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TS_ACQUIRE(...) TS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TS_RELEASE(...) TS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TS_EXCLUDES(...) TS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TS_NO_THREAD_SAFETY_ANALYSIS TS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tinyserve {

// std::mutex as a capability the analysis knows. Not recursive; lock through MutexLock.
class TS_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() TS_ACQUIRE() { mu_.lock(); }
  void Unlock() TS_RELEASE() { mu_.unlock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction.
class TS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TS_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() TS_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the lock, blocks until `cv` is notified (or spuriously), retakes the lock. The
  // analysis treats the lock as held throughout: re-check the condition in a loop.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // The same, returning false once `deadline` has passed.
  bool WaitUntil(std::condition_variable& cv, std::chrono::steady_clock::time_point deadline) {
    return cv.wait_until(lock_, deadline) == std::cv_status::no_timeout;
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace tinyserve
