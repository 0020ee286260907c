// The benchmark report: one self-contained HTML page (inline SVG and CSS, no scripts, no network)
// drawn from a --save-result JSON (result_json.h) and, optionally, the server's --trace-file
// (metrics/trace_writer.h's Chrome trace-event JSON):
//   - a table of the summary numbers (client view, and the server's view when scraped);
//   - the CDFs of TTFT and of ITL (ms);
//   - output token throughput over time;
//   - the request timeline: one row (<g class="timeline-row">) per request track of the trace,
//     its queued / prefill / decode / preempted spans in distinct colours (a cut-short phase is
//     drawn paler), aborted finishes marked, under the engine's KV-cache usage over time. Without a
//     trace the rows are the client's view (waiting for the first token, then streaming).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace tinyserve::bench {

struct TraceSpan {
  std::string name;  // queued, prefill, decode, preempted, "queued (unfinished)", ...
  double begin_us = 0, end_us = 0;
};

struct TraceRequest {
  std::string id;  // the track's thread_name (the server's request id)
  std::vector<TraceSpan> spans;
  std::string finish_reason;  // "" if the trace has no finish for it
};

struct ParsedTrace {
  std::vector<TraceRequest> requests;               // in track order
  std::vector<std::pair<double, double>> kv_usage;  // (ts_us, usage 0..1), in trace order
};

// Parses a trace written by TraceWriter; an unterminated array (the server still running or
// killed) is accepted. InvalidArgument if the text is not a trace-event JSON array.
StatusOr<ParsedTrace> ParseTrace(const std::string& text);

// REQUIRES result: a --save-result object. `trace` may be null. Throws nlohmann::json::exception
// when a field has the wrong type (a hand-edited file).
std::string RenderReportHtml(const nlohmann::json& result, const ParsedTrace* trace);

}  // namespace tinyserve::bench
