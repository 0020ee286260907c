// TraceWriter: every request's life as a Chrome trace-event JSON file (DESIGN §5), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open.
//
// Process "requests" holds one track (thread) per request, named by its request id, with "X"
// spans whose names and bounds are exactly the metrics' phases, so per name the span durations
// sum to the phase histogram's sum:
//   queued     QUEUED -> first SCHEDULED            (vllm:request_queue_time_seconds)
//   prefill    first SCHEDULED -> first token       (vllm:request_prefill_time_seconds)
//   decode     first token -> last token            (vllm:request_decode_time_seconds)
//   preempted  PREEMPTED -> next SCHEDULED, or -> FINISHED if it never resumed
// A phase cut short by the finish is drawn as "queued (unfinished)" or "prefill (unfinished)"
// (up to FINISHED), and the finish is an instant event "finished" with args.reason. Process
// "engine" holds counter tracks per step: requests {running, waiting} and kv_cache_usage.
// Timestamps are the engine Clock in microseconds.
//
// Events are appended to the file as they happen (a JSON array, the trace format's "JSON Array
// Format"); Close() writes the closing bracket, so the file is valid JSON after a clean shutdown
// (a killed process leaves an unterminated array, which the trace viewers also accept).
// Thread-safe (one mutex); observer calls come from the engine thread, Close() from anywhere.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "engine/engine_observer.h"
#include "metrics/live_request_map.h"
#include "metrics/request_timeline.h"
#include "metrics/token_output_tracker.h"

namespace tinyserve {

class TraceWriter final : public EngineObserver {
 public:
  // Creates (truncates) `path` and writes the trace header. Returns NotFound/Unavailable if the
  // file cannot be created.
  static StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path);
  ~TraceWriter() override;  // Close()

  void OnRequestEvent(const RequestRecord& request, const RequestEvent& event) override;
  void OnTokenOutputs(const TokenOutputs& outputs) override;
  void OnStep(const SchedulerStats& stats) override;
  bool wants_every_token_event() const override { return false; }

  // Terminates the JSON array and closes the file; later events are dropped. Idempotent.
  // Returns an error if a write failed.
  Status Close();

 private:
  struct Track {
    RequestTimeline timeline;
    int64_t tid = 0;
  };

  TraceWriter(std::FILE* file, std::string path);
  void WriteSpanLocked(const char* name, int64_t tid, double begin, double end) TS_REQUIRES(mu_);
  void WriteEventLocked(const std::string& json) TS_REQUIRES(mu_);

  Mutex mu_;
  std::FILE* file_ TS_GUARDED_BY(mu_);  // null once closed
  const std::string path_;
  LiveRequestMap<Track> tracks_ TS_GUARDED_BY(mu_);
  TokenOutputTracker outputs_ TS_GUARDED_BY(mu_);
  std::vector<uint64_t> first_token_keys_ TS_GUARDED_BY(mu_);  // OnTokenOutputs scratch
  int64_t next_tid_ TS_GUARDED_BY(mu_) = 1;
  bool first_event_ TS_GUARDED_BY(mu_) = true;
  std::string scratch_ TS_GUARDED_BY(mu_);  // reused event buffer
};

}  // namespace tinyserve
