// The /dashboard page: one self-contained HTML document (inline CSS and JS, charts drawn by hand
// on canvases, no external assets) that polls /metrics and /debug/request_timelines of the server
// that serves it and draws, over the last minutes: output and prompt throughput, running and
// waiting requests, KV-cache usage with used/cached/free blocks, preemptions and recomputed tokens,
// TTFT and ITL quantiles (from the histograms' bucket deltas, as histogram_quantile() computes
// them), and a timeline of the recent requests (queued, prefill, decode, preempted spans).
//
// Every chart canvas carries `data-points`, the number of data points it drew in its last
// redraw, and #status carries `data-polls` (polls answered): the headless-browser test reads them.
// Query parameters: interval_ms (poll period, default 1000, at least 100), window_s (history
// kept and drawn, default 300). Plain data; thread-safe.
#pragma once

#include <string>

namespace tinyserve {

// The page's HTML.
const std::string& DashboardHtml();

}  // namespace tinyserve
