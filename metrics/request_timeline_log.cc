#include "metrics/request_timeline_log.h"

#include <algorithm>

#include "base/json_writer.h"

namespace tinyserve {
namespace {

void AppendSpan(const char* phase, double start, double end, bool* first, std::string* out) {
  if (!*first) out->push_back(',');
  *first = false;
  out->append("{\"phase\":\"");
  out->append(phase);
  out->append("\",\"start\":");
  AppendJsonDouble(start, out);
  out->append(",\"end\":");
  AppendJsonDouble(std::max(start, end), out);
  out->push_back('}');
}

}  // namespace

void RequestTimelineLog::OnRequestEvent(const RequestRecord& request, const RequestEvent& event) {
  if (event.type == EventType::kNewTokens) return;  // OnTokenOutputs
  MutexLock lock(mu_);
  auto [it, inserted] = live_.try_emplace(request.key);
  Entry& e = it->second;
  if (inserted) {
    e.id = std::string(request.request_id);
    e.key = request.key;
    e.timeline.arrival_ts = request.arrival_ts;
  }
  RequestTimeline& t = e.timeline;
  switch (event.type) {
    case EventType::kPreempted:
      if (e.preemptions.size() < kMaxPreemptionSpans) e.preemptions.emplace_back(event.ts, -1.0);
      break;
    case EventType::kScheduled:
      if (!e.preemptions.empty() && e.preemptions.back().second < 0) {
        e.preemptions.back().second = event.ts;
      }
      break;
    case EventType::kFinished:
      outputs_.Settle(t);
      t.TakeOutputsFrom(request);
      if (!e.preemptions.empty() && e.preemptions.back().second < 0) {
        e.preemptions.back().second = event.ts;
      }
      break;
    default:
      break;
  }
  t.Apply(event);
  if (event.type == EventType::kFinished) {
    finished_.push_back(std::move(e));
    live_.erase(it);
    while (finished_.size() > max_finished_) finished_.pop_front();
  }
}

void RequestTimelineLog::OnTokenOutputs(const TokenOutputs& outputs) {
  MutexLock lock(mu_);
  // (The lambdas run inside this call, under mu_; the analysis cannot see it.)
  outputs_.Apply(
      outputs,
      [this](uint64_t key) TS_NO_THREAD_SAFETY_ANALYSIS -> RequestTimeline* {
        auto it = live_.find(key);
        return it == live_.end() ? nullptr : &it->second.timeline;
      },
      [](uint64_t, const RequestTimeline::TokenOutput&) {});
}

void RequestTimelineLog::OnStep(const SchedulerStats&) {}

size_t RequestTimelineLog::num_live() const {
  MutexLock lock(mu_);
  return live_.size();
}

size_t RequestTimelineLog::num_finished() const {
  MutexLock lock(mu_);
  return finished_.size();
}

void RequestTimelineLog::AppendEntryJson(const Entry& e, double now, std::string* out) {
  const RequestTimeline& t = e.timeline;
  const bool finished = t.is_finished();
  const double end = finished ? *t.finished_ts : now;
  const char* state = "queued";
  if (finished) {
    state = "finished";
  } else if (t.preempted_ts) {
    state = "preempted";
  } else if (t.first_token_ts) {
    state = "decode";
  } else if (t.first_scheduled_ts) {
    state = "prefill";
  }
  out->append("{\"id\":");
  AppendJsonString(e.id, out);
  out->append(",\"state\":\"");
  out->append(state);
  out->append("\",\"arrival\":");
  AppendJsonDouble(t.arrival_ts, out);
  out->append(",\"finish_reason\":");
  if (finished) {
    out->push_back('"');
    out->append(FinishReasonName(t.finish_reason));
    out->push_back('"');
  } else {
    out->append("null");
  }
  out->append(",\"num_preemptions\":");
  AppendJsonInt(t.num_preemptions, out);
  // A live request's count lags in the tracker (steady decode steps are not applied one by one).
  out->append(",\"generated_tokens\":");
  if (finished) {
    AppendJsonInt(t.num_generation_tokens, out);
  } else {
    out->append("null");
  }
  out->append(",\"spans\":[");
  bool first = true;
  if (t.queued_ts)
    AppendSpan("queued", *t.queued_ts, t.first_scheduled_ts.value_or(end), &first, out);
  if (t.first_scheduled_ts) {
    AppendSpan("prefill", *t.first_scheduled_ts, t.first_token_ts.value_or(end), &first, out);
  }
  if (t.first_token_ts) {
    // A live request's last output may lag in the tracker; its decode runs on to now.
    AppendSpan("decode", *t.first_token_ts, finished ? t.last_token_ts : now, &first, out);
  }
  for (const auto& [start, stop] : e.preemptions) {
    AppendSpan("preempted", start, stop < 0 ? end : stop, &first, out);
  }
  out->append("]}");
}

std::string RequestTimelineLog::RenderJson(double now) const {
  MutexLock lock(mu_);
  std::vector<const Entry*> live;
  live.reserve(live_.size());
  for (const auto& kv : live_) live.push_back(&kv.second);
  std::sort(live.begin(), live.end(), [](const Entry* a, const Entry* b) {
    return a->timeline.arrival_ts != b->timeline.arrival_ts
               ? a->timeline.arrival_ts < b->timeline.arrival_ts
               : a->key < b->key;
  });
  std::string out = "{\"now\":";
  AppendJsonDouble(now, &out);
  out.append(",\"requests\":[");
  bool first = true;
  for (const Entry& e : finished_) {
    if (!first) out.push_back(',');
    first = false;
    AppendEntryJson(e, now, &out);
  }
  for (const Entry* e : live) {
    if (!first) out.push_back(',');
    first = false;
    AppendEntryJson(*e, now, &out);
  }
  out.append("]}");
  return out;
}

}  // namespace tinyserve
