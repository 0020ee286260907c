#include "bench/serve/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>

namespace tinyserve::bench {
namespace {

using Json = nlohmann::json;

std::string F(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string F(const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  const int n = std::vsnprintf(buf, sizeof(buf), fmt, args);
  va_end(args);
  return std::string(buf, static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof(buf)) - 1)));
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// A "nice" tick step for a range (1, 2 or 5 times a power of ten).
double TickStep(double range, int max_ticks) {
  if (!(range > 0)) return 1;
  const double raw = range / max_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

constexpr int kW = 720, kH = 260, kLeft = 60, kRight = 20, kTop = 20, kBottom = 40;

// Axes with ticks for a chart of [x0, x1] x [y0, y1]; returns the SVG elements.
std::string Axes(double x0, double x1, double y0, double y1, const std::string& xlabel,
                 const std::string& ylabel) {
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  std::string s =
      F(R"(<rect x="%d" y="%d" width="%.0f" height="%.0f" class="plot"/>)", kLeft, kTop, pw, ph);
  const double xs = TickStep(x1 - x0, 8), ys = TickStep(y1 - y0, 5);
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs) {
    const double px = kLeft + (x - x0) / (x1 - x0) * pw;
    s +=
        F(R"(<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" class="grid"/>)", px, kTop, px, kTop + ph);
    s += F(R"(<text x="%.1f" y="%.0f" class="tick" text-anchor="middle">%g</text>)", px,
           kTop + ph + 14, x);
  }
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + 1e-9; y += ys) {
    const double py = kTop + ph - (y - y0) / (y1 - y0) * ph;
    s += F(R"(<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" class="grid"/>)", kLeft, py, kLeft + pw,
           py);
    s += F(R"(<text x="%d" y="%.1f" class="tick" text-anchor="end">%g</text>)", kLeft - 4, py + 4,
           y);
  }
  s += F(R"(<text x="%.0f" y="%d" class="label" text-anchor="middle">%s</text>)", kLeft + pw / 2,
         kH - 6, Escape(xlabel).c_str());
  s += F(
      R"svg(<text x="14" y="%.0f" class="label" text-anchor="middle" transform="rotate(-90 14 %.0f)">%s</text>)svg",
      kTop + ph / 2, kTop + ph / 2, Escape(ylabel).c_str());
  return s;
}

// A polyline chart of (x, y) points.
std::string LineChart(const std::vector<std::pair<double, double>>& pts, const std::string& cls,
                      const std::string& xlabel, const std::string& ylabel, double y_max_hint) {
  std::string s = F(R"(<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" class="%s">)",
                    kW, kH, cls.c_str());
  if (pts.empty()) {
    s += F(R"(<text x="%d" y="%d" class="label">no data</text></svg>)", kLeft, kH / 2);
    return s;
  }
  double x0 = pts.front().first, x1 = pts.front().first, y1 = y_max_hint;
  for (const auto& [x, y] : pts) {
    x0 = std::min(x0, x);
    x1 = std::max(x1, x);
    y1 = std::max(y1, y);
  }
  x0 = std::min(x0, 0.0);
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= 0) y1 = 1;
  s += Axes(x0, x1, 0, y1, xlabel, ylabel);
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  s += R"(<polyline class="series" points=")";
  for (const auto& [x, y] : pts) {
    s += F("%.1f,%.1f ", kLeft + (x - x0) / (x1 - x0) * pw, kTop + ph - y / y1 * ph);
  }
  s += R"("/></svg>)";
  return s;
}

// The empirical CDF of `values` (ms) as a step line.
std::string CdfChart(std::vector<double> values, const std::string& cls, const std::string& what) {
  std::sort(values.begin(), values.end());
  std::vector<std::pair<double, double>> pts;
  const double n = static_cast<double>(values.size());
  // At most ~2000 steps: enough for the eye, small for the page.
  const size_t stride = std::max<size_t>(1, values.size() / 2000);
  for (size_t i = 0; i < values.size(); i += stride) {
    pts.emplace_back(values[i], static_cast<double>(i) / n);
    pts.emplace_back(values[i], static_cast<double>(i + 1) / n);
  }
  if (!values.empty()) pts.emplace_back(values.back(), 1.0);
  return LineChart(pts, cls, what + " (ms)", "fraction of samples", 1.0);
}

const std::map<std::string, std::string>& SpanColours() {
  static const std::map<std::string, std::string> colours = {
      {"queued", "#9e9e9e"},           {"queued (unfinished)", "#d0d0d0"},
      {"prefill", "#1f77b4"},          {"prefill (unfinished)", "#9ec5e8"},
      {"decode", "#2ca02c"},           {"preempted", "#d62728"},
      {"waiting (client)", "#ff7f0e"}, {"streaming (client)", "#17becf"}};
  return colours;
}

std::string Timeline(const std::vector<TraceRequest>& rows,
                     const std::vector<std::pair<double, double>>& kv_usage, double unit_to_s,
                     bool from_trace) {
  double t0 = INFINITY, t1 = -INFINITY;
  for (const TraceRequest& r : rows) {
    for (const TraceSpan& s : r.spans) {
      t0 = std::min(t0, s.begin_us);
      t1 = std::max(t1, s.end_us);
    }
  }
  if (!(t1 > t0)) {
    t0 = 0;
    t1 = 1;
  }
  const int n = static_cast<int>(rows.size());
  const double row_h = std::clamp(600.0 / std::max(1, n), 2.0, 14.0);
  const double pw = kW - kLeft - kRight;
  const double kv_h = kv_usage.empty() ? 0 : 60;
  const double rows_top = kTop + kv_h + (kv_h > 0 ? 10 : 0);
  const double height = rows_top + row_h * n + kBottom;
  auto px = [&](double t) { return kLeft + (t - t0) / (t1 - t0) * pw; };
  std::string s =
      F(R"(<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" class="timeline">)", kW,
        height);
  const double secs = (t1 - t0) * unit_to_s;
  const double step = TickStep(secs, 8);
  for (double x = 0; x <= secs + 1e-9; x += step) {
    const double p = kLeft + x / secs * pw;
    s += F(R"(<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" class="grid"/>)", p, kTop, p,
           rows_top + row_h * n);
    s += F(R"(<text x="%.1f" y="%.0f" class="tick" text-anchor="middle">%g</text>)", p,
           rows_top + row_h * n + 14, x);
  }
  s += F(
      R"(<text x="%.0f" y="%.0f" class="label" text-anchor="middle">seconds since the first %s</text>)",
      kLeft + pw / 2, height - 6, from_trace ? "trace event" : "request");
  if (!kv_usage.empty()) {
    s += F(R"(<text x="%d" y="%.0f" class="tick" text-anchor="end">KV 100%%</text>)", kLeft - 4,
           double{kTop} + 8);
    s += F(R"(<rect x="%d" y="%d" width="%.0f" height="%.0f" class="plot"/>)", kLeft, kTop, pw,
           kv_h);
    s += R"(<polyline class="kv" points=")";
    for (const auto& [ts, u] : kv_usage) s += F("%.1f,%.1f ", px(ts), kTop + kv_h * (1 - u));
    s += R"("/>)";
  }
  for (int i = 0; i < n; ++i) {
    const TraceRequest& r = rows[static_cast<size_t>(i)];
    const double y = rows_top + i * row_h;
    s += R"(<g class="timeline-row" data-request=")" + Escape(r.id) + R"(">)";
    s += "<title>" + Escape(r.id) + (r.finish_reason.empty() ? "" : " (" + r.finish_reason + ")") +
         "</title>";
    for (const TraceSpan& sp : r.spans) {
      auto c = SpanColours().find(sp.name);
      const std::string colour = c == SpanColours().end() ? "#8c564b" : c->second;
      s += F(R"(<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>)", px(sp.begin_us),
             y, std::max(0.5, px(sp.end_us) - px(sp.begin_us)), std::max(1.0, row_h - 1),
             colour.c_str());
    }
    if (r.finish_reason == "abort" || r.finish_reason == "error") {
      double end = t0;
      for (const TraceSpan& sp : r.spans) end = std::max(end, sp.end_us);
      s += F(R"(<rect x="%.2f" y="%.2f" width="2" height="%.2f" fill="#000"/>)", px(end), y,
             std::max(1.0, row_h - 1));
    }
    s += "</g>";
  }
  s += "</svg>";
  return s;
}

std::string Legend(bool from_trace) {
  std::string s = R"(<div class="legend">)";
  const std::vector<std::string> names =
      from_trace ? std::vector<std::string>{"queued",
                                            "prefill",
                                            "decode",
                                            "preempted",
                                            "queued (unfinished)",
                                            "prefill (unfinished)"}
                 : std::vector<std::string>{"waiting (client)", "streaming (client)"};
  for (const std::string& n : names) {
    s += R"(<span><i style="background:)" + SpanColours().at(n) + R"("></i>)" + Escape(n) +
         "</span>";
  }
  if (from_trace) s += R"(<span><i style="background:#000"></i>aborted</span>)";
  return s + "</div>";
}

std::string Num(const Json& j, const char* key, const char* fmt = "%.2f") {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  return F(fmt, j[key].get<double>());
}

}  // namespace

StatusOr<ParsedTrace> ParseTrace(const std::string& text) {
  Json events = Json::parse(text, nullptr, false);
  if (events.is_discarded()) {
    std::string fixed = text;
    while (!fixed.empty() &&
           (std::isspace(static_cast<unsigned char>(fixed.back())) || fixed.back() == ',')) {
      fixed.pop_back();
    }
    events = Json::parse(fixed + "\n]", nullptr, false);
  }
  if (events.is_object() && events.contains("traceEvents")) events = events["traceEvents"];
  if (events.is_discarded() || !events.is_array()) {
    return InvalidArgument("not a Chrome trace-event JSON array");
  }
  ParsedTrace trace;
  std::map<int64_t, size_t> row_of_tid;
  auto row = [&](int64_t tid) -> TraceRequest& {
    auto [it, inserted] = row_of_tid.emplace(tid, trace.requests.size());
    if (inserted) trace.requests.push_back(TraceRequest{"track " + std::to_string(tid), {}, ""});
    return trace.requests[it->second];
  };
  int64_t requests_pid = -1;
  for (const Json& e : events) {
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    const std::string name = e.value("name", "");
    if (ph == "M" && name == "process_name" && e.contains("args") &&
        e["args"].value("name", "") == "requests") {
      requests_pid = e.value("pid", int64_t{-1});
    }
  }
  for (const Json& e : events) {
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    const std::string name = e.value("name", "");
    if (ph == "C" && name == "kv_cache_usage" && e.contains("args")) {
      trace.kv_usage.emplace_back(e.value("ts", 0.0), e["args"].value("usage", 0.0));
      continue;
    }
    if (e.value("pid", int64_t{-2}) != requests_pid || !e.contains("tid")) continue;
    const int64_t tid = e.value("tid", int64_t{0});
    if (ph == "M" && name == "thread_name" && e.contains("args")) {
      row(tid).id = e["args"].value("name", "");
    } else if (ph == "X") {
      const double ts = e.value("ts", 0.0);
      row(tid).spans.push_back({name, ts, ts + e.value("dur", 0.0)});
    } else if (ph == "i" && name == "finished" && e.contains("args")) {
      row(tid).finish_reason = e["args"].value("reason", "");
    }
  }
  return trace;
}

std::string RenderReportHtml(const Json& result, const ParsedTrace* trace) {
  std::string h = R"(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>tinyserve bench serve report</title><style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:780px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}.plot{fill:#fafafa;stroke:#bbb}.grid{stroke:#e4e4e4}
.tick{font-size:10px;fill:#555}.label{font-size:12px;fill:#333}
.series{fill:none;stroke:#1f77b4;stroke-width:1.5}.kv{fill:none;stroke:#9467bd;stroke-width:1.2}
.legend span{margin-right:14px;font-size:12px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
</style></head><body>
)";
  h += "<h1>Serving benchmark</h1>\n<p>" + Escape(result.value("model_id", "")) + " at " +
       Escape(result.value("base_url", "")) + Escape(result.value("endpoint", "")) + ", " +
       std::to_string(result.value("num_prompts", 0)) + " prompts (" +
       Escape(result.value("dataset", "")) + "), request rate " +
       Escape(result.value("request_rate", Json()).dump()) + ", max concurrency " +
       Escape(result.value("max_concurrency", Json()).dump()) + ", " +
       Escape(result.value("date", "")) + ".</p>\n";
  h += "<table><tr><th>completed</th><th>failed</th><th>duration (s)</th><th>req/s</th>"
       "<th>output tok/s</th><th>total tok/s</th></tr><tr><td>" +
       Num(result, "completed", "%.0f") + "</td><td>" + Num(result, "failed", "%.0f") +
       "</td><td>" + Num(result, "duration") + "</td><td>" + Num(result, "request_throughput") +
       "</td><td>" + Num(result, "output_throughput") + "</td><td>" +
       Num(result, "total_token_throughput") + "</td></tr></table>\n";
  h += "<table><tr><th>ms</th><th>mean</th><th>median</th><th>p99</th></tr>";
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    const std::string k(m);
    std::string upper = k;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    h += "<tr><th>" + upper + "</th><td>" + Num(result, ("mean_" + k + "_ms").c_str()) +
         "</td><td>" + Num(result, ("median_" + k + "_ms").c_str()) + "</td><td>" +
         Num(result, ("p99_" + k + "_ms").c_str()) + "</td></tr>";
  }
  h += "</table>\n";
  if (result.contains("server_metrics") && result["server_metrics"].is_object()) {
    const Json& s = result["server_metrics"];
    h += "<h2>Server view (/metrics)</h2><table><tr><th>preemptions</th><th>mean TTFT (ms)</th>"
         "<th>mean E2EL (ms)</th><th>mean queue (ms)</th><th>mean prefill (ms)</th>"
         "<th>mean decode (ms)</th><th>peak KV usage</th></tr><tr><td>" +
         Num(s, "preemptions", "%.0f") + "</td><td>" + Num(s, "mean_ttft_ms") + "</td><td>" +
         Num(s, "mean_e2el_ms") + "</td><td>" + Num(s, "mean_queue_ms") + "</td><td>" +
         Num(s, "mean_prefill_ms") + "</td><td>" + Num(s, "mean_decode_ms") + "</td><td>" +
         Num(s, "peak_kv_cache_usage", "%.3f") + "</td></tr></table>\n";
  }

  std::vector<double> ttfts, itls;
  std::vector<TraceRequest> client_rows;
  double duration = result.value("duration", 0.0);
  std::vector<std::pair<double, double>> chunk_tokens;  // (time s, tokens)
  if (result.contains("requests")) {
    for (const Json& r : result["requests"]) {
      if (!r.is_object() || !r.value("success", false)) continue;
      ttfts.push_back(r.value("ttft_s", 0.0) * 1e3);
      for (const Json& g : r.value("itls_s", Json::array())) itls.push_back(g.get<double>() * 1e3);
      const Json chunks = r.value("chunk_times_s", Json::array());
      const double per = chunks.empty() ? 0 : r.value("output_len", 0) / double(chunks.size());
      for (const Json& t : chunks) chunk_tokens.emplace_back(t.get<double>(), per);
      const double start = r.value("start_s", 0.0) * 1e6;
      const double first = chunks.empty() ? start : chunks[0].get<double>() * 1e6;
      client_rows.push_back({"request " + std::to_string(r.value("index", 0)),
                             {{"waiting (client)", start, first},
                              {"streaming (client)", first, r.value("end_s", 0.0) * 1e6}},
                             ""});
    }
  }
  h += "<h2>Time to first token (CDF)</h2>\n" + CdfChart(ttfts, "cdf-ttft", "TTFT") + "\n";
  h += "<h2>Inter-token latency (CDF)</h2>\n" + CdfChart(itls, "cdf-itl", "ITL") + "\n";
  const double bucket = duration > 20 ? 1.0 : std::max(0.05, duration / 20);
  std::vector<double> buckets(static_cast<size_t>(std::max(1.0, std::ceil(duration / bucket))), 0);
  for (const auto& [t, n] : chunk_tokens) {
    const size_t b = static_cast<size_t>(
        std::clamp(std::floor(t / bucket), 0.0, static_cast<double>(buckets.size() - 1)));
    buckets[b] += n / bucket;
  }
  std::vector<std::pair<double, double>> tput;
  for (size_t i = 0; i < buckets.size(); ++i) {
    tput.emplace_back(i * bucket, buckets[i]);
    tput.emplace_back((i + 1) * bucket, buckets[i]);
  }
  h += "<h2>Output throughput over time</h2>\n" +
       LineChart(chunk_tokens.empty() ? std::vector<std::pair<double, double>>{} : tput,
                 "throughput", F("seconds since the start (%.2g s buckets)", bucket),
                 "output tokens/s", 0) +
       "\n";
  const bool from_trace = trace != nullptr && !trace->requests.empty();
  h += "<h2>Request timeline</h2>\n";
  h += from_trace ? F("<p>From the server's trace: %zu requests, one row each; the purple line on "
                      "top is the KV-cache usage.</p>\n",
                      trace->requests.size())
                  : std::string(
                        "<p>No server trace given (start the server with --trace-file and "
                        "pass it with --trace): the client's view, one row per "
                        "successful request.</p>\n");
  h += Legend(from_trace) + "\n";
  h += from_trace ? Timeline(trace->requests, trace->kv_usage, 1e-6, true)
                  : Timeline(client_rows, {}, 1e-6, false);
  h += "\n</body></html>\n";
  return h;
}

}  // namespace tinyserve::bench
