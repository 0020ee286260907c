#include "bench/serve/runner.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "bench/serve/arrivals.h"

namespace tinyserve::bench {
namespace {

// Prints "done/total" with a bar on stderr, at most every 100 ms (and at the end).
class ProgressBar {
 public:
  ProgressBar(bool enabled, int total) : enabled_(enabled), total_(total) {}
  void Update(int done, int failed) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 40;
    const int filled = total_ > 0 ? done * kWidth / total_ : kWidth;
    std::fprintf(stderr, "\r[%-*s] %d/%d requests (%d failed)", kWidth,
                 std::string(static_cast<size_t>(filled), '=').c_str(), done, total_, failed);
    if (done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  int total_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

Status RunWarmup(const RunOptions& o, const std::vector<BenchPrompt>& prompts, int num_warmup,
                 const Clock& clock) {
  StreamClient client(o.target, &clock);
  for (int i = 0; i < num_warmup && !prompts.empty(); ++i) {
    StatusOr<std::string> body =
        BuildRequestBody(o.target, o.model, prompts[static_cast<size_t>(i) % prompts.size()],
                         o.ignore_eos, o.sampling);
    if (!body.ok()) return body.status();
    const RequestRecord r = client.Send(*body);
    if (!r.success) return Unavailable("the warm-up request failed: " + r.error);
  }
  return Status::Ok();
}

StatusOr<RunResult> RunBenchmark(const RunOptions& o, const std::vector<BenchPrompt>& prompts,
                                 const Clock& clock) {
  if (o.max_concurrency < 0) return InvalidArgument("--max-concurrency must be >= 0");
  StatusOr<std::vector<double>> offsets =
      ArrivalOffsets(static_cast<int>(prompts.size()), o.request_rate, o.burstiness, o.seed);
  if (!offsets.ok()) return offsets.status();
  std::vector<std::string> bodies;
  bodies.reserve(prompts.size());
  for (const BenchPrompt& p : prompts) {
    StatusOr<std::string> body = BuildRequestBody(o.target, o.model, p, o.ignore_eos, o.sampling);
    if (!body.ok()) return body.status();
    bodies.push_back(std::move(*body));
  }

  RunResult result;
  result.records.resize(prompts.size());
  const int max_workers =
      o.max_concurrency > 0 ? o.max_concurrency : static_cast<int>(prompts.size());
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> due;    // guarded by mu
  int idle = 0;              // guarded by mu; workers waiting for a request
  int starting = 0;          // guarded by mu; workers spawned that have not looked at `due` yet
  bool closing = false;      // guarded by mu
  int done = 0, failed = 0;  // guarded by mu
  ProgressBar progress(o.progress, static_cast<int>(prompts.size()));
  std::vector<std::thread> workers;
  auto work = [&] {
    StreamClient client(o.target, &clock);
    std::unique_lock<std::mutex> lock(mu);
    --starting;
    while (true) {
      ++idle;
      cv.wait(lock, [&] { return !due.empty() || closing; });
      --idle;
      if (due.empty()) return;
      const size_t i = due.front();
      due.pop_front();
      lock.unlock();
      RequestRecord r = client.Send(bodies[i]);
      r.index = static_cast<int>(i);
      r.requested_output_len = prompts[i].output_len;
      if (r.prompt_len == 0) r.prompt_len = prompts[i].prompt_len;
      result.records[i] = std::move(r);
      lock.lock();
      ++done;
      if (!result.records[i].success) ++failed;
      progress.Update(done, failed);
    }
  };

  result.start_s = clock.Now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const double due_s = result.start_s + (*offsets)[i];
    if ((*offsets)[i] > 0) {
      for (double now = clock.Now(); now < due_s; now = clock.Now()) {
        std::this_thread::sleep_for(std::chrono::duration<double>(due_s - now));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    due.push_back(i);
    if (idle + starting < static_cast<int>(due.size()) &&
        static_cast<int>(workers.size()) < max_workers) {
      ++starting;
      workers.emplace_back(work);
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    closing = true;
  }
  cv.notify_all();
  for (std::thread& t : workers) t.join();
  result.end_s = clock.Now();
  return result;
}

}  // namespace tinyserve::bench
