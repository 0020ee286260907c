#include "engine/bitmask_fill.h"

#include <chrono>
#include <system_error>
#include <utility>

namespace tinyserve {

void BitmaskFill::Await() const {
  MutexLock lock(mu_);
  if (done_) return;
  const auto start = std::chrono::steady_clock::now();
  while (!done_) lock.Wait(cv_);
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
  awaited_seconds_ += waited.count();
}

void BitmaskFill::Wait() const {
  MutexLock lock(mu_);
  while (!done_) lock.Wait(cv_);
}

bool BitmaskFill::done() const {
  MutexLock lock(mu_);
  return done_;
}

void BitmaskFill::Done(double fill_seconds) {
  {
    MutexLock lock(mu_);
    done_ = true;
    fill_seconds_ = fill_seconds;
  }
  cv_.notify_all();
}

double BitmaskFill::fill_seconds() const {
  MutexLock lock(mu_);
  return fill_seconds_;
}

double BitmaskFill::awaited_seconds() const {
  MutexLock lock(mu_);
  return awaited_seconds_;
}

BitmaskFillWorker::~BitmaskFillWorker() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool BitmaskFillWorker::Run(std::function<void()> job) {
  if (!thread_.joinable()) {
    try {
      thread_ = std::thread([this] { Loop(); });
    } catch (const std::system_error&) {
      return false;
    }
  }
  {
    MutexLock lock(mu_);
    job_ = std::move(job);
  }
  cv_.notify_all();
  return true;
}

void BitmaskFillWorker::Loop() {
  while (true) {
    std::function<void()> job;
    {
      MutexLock lock(mu_);
      while (!stopping_ && !job_) lock.Wait(cv_);
      if (!job_) return;  // stopping, nothing left to run
      job = std::move(job_);
      job_ = nullptr;
    }
    job();
  }
}

}  // namespace tinyserve
