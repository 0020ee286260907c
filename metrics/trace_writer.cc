#include "metrics/trace_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <string_view>
#include <vector>

#include "base/json_writer.h"

namespace tinyserve {
namespace {

constexpr int kRequestsPid = 1;
constexpr int kEnginePid = 2;

void AppendF(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void AppendF(std::string* out, const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  if (n > 0) out->append(buf, static_cast<size_t>(std::min<int>(n, sizeof(buf) - 1)));
}

double Micros(double seconds) { return seconds * 1e6; }

}  // namespace

StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return Unavailable("cannot create trace file " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<TraceWriter> writer(new TraceWriter(file, path));
  return writer;
}

TraceWriter::TraceWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {
  std::setvbuf(file_, nullptr, _IOFBF, size_t{1} << 20);
  MutexLock lock(mu_);
  std::fputs("[\n", file_);
  std::string e;
  AppendF(&e, R"({"name":"process_name","ph":"M","pid":%d,"args":{"name":"requests"}})",
          kRequestsPid);
  WriteEventLocked(e);
  e.clear();
  AppendF(&e, R"({"name":"process_name","ph":"M","pid":%d,"args":{"name":"engine"}})", kEnginePid);
  WriteEventLocked(e);
}

TraceWriter::~TraceWriter() { (void)Close(); }

void TraceWriter::WriteEventLocked(const std::string& json) {
  if (!first_event_) std::fputs(",\n", file_);
  first_event_ = false;
  std::fwrite(json.data(), 1, json.size(), file_);
}

void TraceWriter::WriteSpanLocked(const char* name, int64_t tid, double begin, double end) {
  scratch_.clear();
  AppendF(&scratch_,
          R"({"name":"%s","cat":"request","ph":"X","pid":%d,"tid":%lld,"ts":%.3f,"dur":%.3f})",
          name, kRequestsPid, static_cast<long long>(tid), Micros(begin), Micros(end - begin));
  WriteEventLocked(scratch_);
}

void TraceWriter::OnRequestEvent(const RequestRecord& request, const RequestEvent& event) {
  // NEW_TOKENS come here only with wants_every_token_event() (not ours): OnTokenOutputs.
  if (event.type == EventType::kNewTokens) return;
  MutexLock lock(mu_);
  if (file_ == nullptr) return;
  Track* track = tracks_.Find(request.key);
  if (track == nullptr) {
    track = &tracks_.FindOrInsert(request.key);
    track->tid = next_tid_++;
    track->timeline.arrival_ts = request.arrival_ts;
    scratch_.clear();
    AppendF(&scratch_, R"({"name":"thread_name","ph":"M","pid":%d,"tid":%lld,"args":{"name":)",
            kRequestsPid, static_cast<long long>(track->tid));
    AppendJsonString(request.request_id, &scratch_);
    scratch_.append("}}");
    WriteEventLocked(scratch_);
  }
  RequestTimeline& t = track->timeline;
  if (event.type == EventType::kFinished) {
    outputs_.Settle(t);
    t.TakeOutputsFrom(request);
  }
  const RequestTimeline before = t;
  t.Apply(event);
  switch (event.type) {
    case EventType::kScheduled:
      if (!before.first_scheduled_ts && t.queued_ts) {
        WriteSpanLocked("queued", track->tid, *t.queued_ts, event.ts);
      }
      if (before.preempted_ts)
        WriteSpanLocked("preempted", track->tid, *before.preempted_ts, event.ts);
      break;
    case EventType::kFinished: {
      if (t.preempted_ts) WriteSpanLocked("preempted", track->tid, *t.preempted_ts, event.ts);
      if (t.first_token_ts) {
        WriteSpanLocked("decode", track->tid, *t.first_token_ts, t.last_token_ts);
      } else if (t.first_scheduled_ts) {
        WriteSpanLocked("prefill (unfinished)", track->tid, *t.first_scheduled_ts, event.ts);
      } else if (t.queued_ts) {
        WriteSpanLocked("queued (unfinished)", track->tid, *t.queued_ts, event.ts);
      }
      scratch_.clear();
      AppendF(&scratch_,
              R"({"name":"finished","cat":"request","ph":"i","s":"t","pid":%d,"tid":%lld,)"
              R"("ts":%.3f,"args":{"reason":"%s","preemptions":%d,"generated_tokens":%d}})",
              kRequestsPid, static_cast<long long>(track->tid), Micros(event.ts),
              FinishReasonName(event.finish_reason), t.num_preemptions, t.num_generation_tokens);
      WriteEventLocked(scratch_);
      tracks_.Erase(request.key);
      break;
    }
    default:
      break;
  }
}

void TraceWriter::OnTokenOutputs(const TokenOutputs& outputs) {
  MutexLock lock(mu_);
  if (file_ == nullptr) return;
  // A request's first token ends its prefill span; the tracker keeps the last output times for
  // the decode spans. (The lambdas run inside this call, under mu_; the analysis cannot see it.)
  first_token_keys_.clear();
  outputs_.Apply(
      outputs,
      [this](uint64_t key) TS_NO_THREAD_SAFETY_ANALYSIS {
        Track* track = tracks_.Find(key);
        return track == nullptr ? nullptr : &track->timeline;
      },
      [this](uint64_t key, const RequestTimeline::TokenOutput& out) TS_NO_THREAD_SAFETY_ANALYSIS {
        if (out.is_first) first_token_keys_.push_back(key);
      });
  for (uint64_t key : first_token_keys_) {
    const Track& track = *tracks_.Find(key);
    if (track.timeline.first_scheduled_ts) {
      WriteSpanLocked("prefill", track.tid, *track.timeline.first_scheduled_ts, outputs.ts);
    }
  }
}

void TraceWriter::OnStep(const SchedulerStats& s) {
  MutexLock lock(mu_);
  if (file_ == nullptr) return;
  scratch_.clear();
  AppendF(&scratch_,
          R"({"name":"requests","ph":"C","pid":%d,"ts":%.3f,"args":{"running":%d,"waiting":%d}})",
          kEnginePid, Micros(s.ts), s.num_running, s.num_waiting);
  WriteEventLocked(scratch_);
  scratch_.clear();
  AppendF(&scratch_,
          R"({"name":"kv_cache_usage","ph":"C","pid":%d,"ts":%.3f,"args":{"usage":%.6f}})",
          kEnginePid, Micros(s.ts), s.kv_cache_usage);
  WriteEventLocked(scratch_);
}

Status TraceWriter::Close() {
  MutexLock lock(mu_);
  if (file_ == nullptr) return Status::Ok();
  std::fputs("\n]\n", file_);
  const bool write_failed = std::ferror(file_) != 0;
  const bool close_failed = std::fclose(file_) != 0;
  file_ = nullptr;
  if (write_failed || close_failed) return Unavailable("writing trace file " + path_ + " failed");
  return Status::Ok();
}

}  // namespace tinyserve
