#include "server/dashboard_page.h"

namespace tinyserve {
namespace {

// One literal (about 14 KB: under the 65,536 characters C++ compilers must support).
constexpr const char kHtml[] = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>tinyserve live view</title>
<style>
body{font:13px/1.35 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{padding:10px 16px;background:#1d2330;color:#fff;display:flex;gap:16px;align-items:baseline}
header h1{font-size:16px;margin:0}
#status{color:#b8c2d6}
main{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:12px;padding:12px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:8px 10px}
section.wide{grid-column:1/-1}
h2{font-size:13px;margin:0 0 4px 0}
.legend span{margin-right:12px;white-space:nowrap}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:-1px}
canvas{width:100%;display:block}
</style>
</head>
<body>
<header><h1>tinyserve live view</h1><span id="model"></span>
<span id="status" data-polls="0">waiting for the first scrape of /metrics</span></header>
<main>
<section><h2>Throughput (tokens/s)</h2><div class="legend" id="l-throughput"></div>
<canvas id="c-throughput" height="200" data-points="0"></canvas></section>
<section><h2>Requests</h2><div class="legend" id="l-requests"></div>
<canvas id="c-requests" height="200" data-points="0"></canvas></section>
<section><h2>KV cache blocks (usage %)</h2><div class="legend" id="l-kv"></div>
<canvas id="c-kv" height="200" data-points="0"></canvas></section>
<section><h2>Preemptions and recomputed tokens (per s)</h2><div class="legend" id="l-preempt"></div>
<canvas id="c-preempt" height="200" data-points="0"></canvas></section>
<section><h2>Time to first token (s, quantiles over 10 s)</h2><div class="legend" id="l-ttft"></div>
<canvas id="c-ttft" height="200" data-points="0"></canvas></section>
<section><h2>Inter-token latency (s, quantiles over 10 s)</h2><div class="legend" id="l-itl"></div>
<canvas id="c-itl" height="200" data-points="0"></canvas></section>
<section class="wide"><h2>Recent requests</h2><div class="legend" id="l-timeline"></div>
<canvas id="c-timeline" height="360" data-points="0" data-requests="0"></canvas></section>
</main>
<script>
"use strict";
const params = new URLSearchParams(location.search);
const POLL_MS = Math.max(100, Number(params.get("interval_ms")) || 1000);
const WINDOW_S = Math.max(10, Number(params.get("window_s")) || 300);
const QUANTILE_WINDOW_S = 10;
const COLORS = ["#2f6fdf", "#e5842a", "#2aa36b", "#c8413b", "#8a5cc7", "#6b7280"];
const history = [];  // {t, s: {key: value}, h: {name: {le: count}}}
let polls = 0;

function parseLabels(text) {
  const labels = {};
  const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  let m;
  while ((m = re.exec(text)) !== null) labels[m[1]] = m[2].replace(/\\(.)/g, (_, c) => c === "n" ? "\n" : c);
  return labels;
}

// Prometheus text: scalars summed over label sets (tinyserve_kv_cache_blocks by state), and the
// histograms' cumulative bucket counts by le.
function parseMetrics(text) {
  const s = {}, h = {};
  let model = "";
  for (const line of text.split("\n")) {
    if (line === "" || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const name = m[1], labels = m[2] ? parseLabels(m[2]) : {}, value = Number(m[3]);
    if (labels.model_name) model = labels.model_name;
    if (name.endsWith("_bucket") && labels.le !== undefined) {
      const base = name.slice(0, -7);
      const buckets = h[base] || (h[base] = {});
      buckets[labels.le] = (buckets[labels.le] || 0) + value;
      continue;
    }
    const key = labels.state ? name + "{" + labels.state + "}" : name;
    s[key] = (s[key] || 0) + value;
  }
  return {s, h, model};
}

// Prometheus' histogram_quantile over cumulative buckets {le: count}.
function quantile(q, buckets) {
  const les = Object.keys(buckets).map(le => [le === "+Inf" ? Infinity : Number(le), buckets[le]])
      .sort((a, b) => a[0] - b[0]);
  if (les.length < 2) return null;
  const total = les[les.length - 1][1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, count] of les) {
    if (count >= rank) {
      if (le === Infinity) return prevLe;
      if (count === prevCount) return le;
      return prevLe + (le - prevLe) * (rank - prevCount) / (count - prevCount);
    }
    prevLe = le; prevCount = count;
  }
  return prevLe;
}

function rateSeries(key) {
  const pts = [];
  for (let i = 1; i < history.length; i++) {
    const a = history[i - 1], b = history[i];
    if (a.s[key] === undefined || b.s[key] === undefined || b.t <= a.t) continue;
    pts.push([b.t, Math.max(0, (b.s[key] - a.s[key]) / (b.t - a.t))]);
  }
  return pts;
}

function gaugeSeries(key, scale) {
  return history.filter(x => x.s[key] !== undefined).map(x => [x.t, x.s[key] * (scale || 1)]);
}

function quantileSeries(name, q) {
  const pts = [];
  let j = 0;
  for (let i = 1; i < history.length; i++) {
    const b = history[i];
    while (j + 1 < i && history[j + 1].t <= b.t - QUANTILE_WINDOW_S) j++;
    const a = history[j], hb = b.h[name], ha = a.h[name];
    if (!hb || !ha) continue;
    const delta = {};
    for (const le in hb) delta[le] = hb[le] - (ha[le] || 0);
    const v = quantile(q, delta);
    if (v !== null) pts.push([b.t, v]);
  }
  return pts;
}

function legend(id, series) {
  document.getElementById(id).innerHTML = series.map((s, i) =>
      '<span><i style="background:' + (s.color || COLORS[i]) + '"></i>' + s.label + "</span>").join("");
}

function fmt(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1000) return (v / 1000).toFixed(a >= 10000 ? 0 : 1) + "k";
  if (a >= 10) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1);
  if (a >= 0.001) return (v * 1000).toFixed(a >= 0.01 ? 0 : 1) + "m";
  return v.toExponential(0);
}

// The time range drawn: the last WINDOW_S seconds, or less while the history is shorter.
function timeRange() {
  const now = history.length ? history[history.length - 1].t : 0;
  const first = history.length ? history[0].t : 0;
  const span = Math.min(WINDOW_S, Math.max(10, now - first));
  return {now, t0: now - span, span};
}

function setupCanvas(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 440, h = Number(canvas.getAttribute("height"));
  if (canvas.width !== Math.round(w * ratio)) canvas.width = Math.round(w * ratio);
  canvas.style.height = h + "px";
  canvas.height = Math.round(h * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.font = "11px system-ui,sans-serif";
  return {ctx, w, h};
}

// Line chart of series [{label, color, points: [[t, v]]}] over the last WINDOW_S seconds; returns
// the number of points drawn.
function lineChart(id, series, opts) {
  opts = opts || {};
  const canvas = document.getElementById(id);
  const {ctx, w, h} = setupCanvas(canvas);
  const left = 46, right = 8, top = 8, bottom = 20;
  const {now, t0, span} = timeRange();
  let ymax = opts.ymax || 0;
  for (const s of series) for (const [t, v] of s.points) if (t >= t0 && v > ymax) ymax = v;
  if (!opts.ymax) ymax = ymax > 0 ? ymax * 1.1 : 1;
  const x = t => left + (w - left - right) * (t - t0) / span;
  const y = v => h - bottom - (h - top - bottom) * v / ymax;
  ctx.strokeStyle = "#e3e6ec"; ctx.fillStyle = "#5b6475"; ctx.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4, yy = Math.round(y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(w - right, yy); ctx.stroke();
    ctx.fillText(fmt(v) + (opts.unit || ""), 2, yy + 4);
  }
  for (let i = 0; i <= 5; i++) {
    const t = t0 + span * i / 5;
    ctx.fillText("-" + Math.round(now - t) + "s", x(t) - (i === 5 ? 14 : 8), h - 5);
  }
  let drawn = 0, vmax = 0;
  series.forEach((s, i) => {
    const pts = s.points.filter(p => p[0] >= t0);
    for (const p of pts) vmax = Math.max(vmax, p[1]);
    ctx.strokeStyle = s.color || COLORS[i]; ctx.lineWidth = 1.6;
    ctx.beginPath();
    pts.forEach((p, k) => { if (k === 0) ctx.moveTo(x(p[0]), y(p[1])); else ctx.lineTo(x(p[0]), y(p[1])); });
    ctx.stroke();
    if (pts.length === 1) { ctx.fillStyle = ctx.strokeStyle; ctx.fillRect(x(pts[0][0]) - 2, y(pts[0][1]) - 2, 4, 4); }
    drawn += pts.length;
  });
  canvas.dataset.points = String(drawn);
  canvas.dataset.max = String(vmax);
  return drawn;
}

// Stacked areas of used/cached/free blocks, with the usage fraction as a line.
function kvChart() {
  const states = [["used", "#c8413b"], ["cached", "#e5a23a"], ["free", "#9fd3b0"]];
  const canvas = document.getElementById("c-kv");
  const {ctx, w, h} = setupCanvas(canvas);
  const left = 46, right = 8, top = 8, bottom = 20;
  const {t0, span} = timeRange();
  const pts = history.filter(p => p.t >= t0 && p.s["tinyserve_kv_cache_blocks{used}"] !== undefined);
  let total = 1;
  for (const p of pts) total = Math.max(total, states.reduce((a, [st]) => a + p.s["tinyserve_kv_cache_blocks{" + st + "}"], 0));
  const x = t => left + (w - left - right) * (t - t0) / span;
  const y = v => h - bottom - (h - top - bottom) * v / total;
  ctx.fillStyle = "#5b6475";
  for (let i = 0; i <= 4; i++) ctx.fillText(fmt(total * i / 4), 2, y(total * i / 4) + 4);
  let drawn = 0;
  for (let k = 0; k < states.length; k++) {
    const below = p => states.slice(0, k).reduce((a, [st]) => a + p.s["tinyserve_kv_cache_blocks{" + st + "}"], 0);
    const above = p => below(p) + p.s["tinyserve_kv_cache_blocks{" + states[k][0] + "}"];
    if (!pts.length) break;
    ctx.fillStyle = states[k][1];
    ctx.beginPath();
    ctx.moveTo(x(pts[0].t), y(below(pts[0])));
    for (const p of pts) ctx.lineTo(x(p.t), y(above(p)));
    for (let i = pts.length - 1; i >= 0; i--) ctx.lineTo(x(pts[i].t), y(below(pts[i])));
    ctx.closePath(); ctx.fill();
    drawn += pts.length;
  }
  ctx.strokeStyle = "#1d2330"; ctx.lineWidth = 1.6; ctx.beginPath();
  pts.forEach((p, k) => {
    const yy = y(total * p.s["vllm:kv_cache_usage_perc"]);
    if (k === 0) ctx.moveTo(x(p.t), yy); else ctx.lineTo(x(p.t), yy);
  });
  ctx.stroke();
  canvas.dataset.points = String(drawn);
  const last = pts[pts.length - 1];
  legend("l-kv", states.map(([st, c]) => ({label: st + (last ? " " + last.s["tinyserve_kv_cache_blocks{" + st + "}"] : ""), color: c}))
      .concat([{label: "usage " + (last ? (100 * last.s["vllm:kv_cache_usage_perc"]).toFixed(0) + "%" : ""), color: "#1d2330"}]));
}

const PHASE_COLORS = {queued: "#b7bdc9", prefill: "#e5842a", decode: "#2aa36b", preempted: "#c8413b"};

function timelineChart(data) {
  const canvas = document.getElementById("c-timeline");
  const {ctx, w, h} = setupCanvas(canvas);
  const left = 110, right = 8, top = 4, bottom = 20;
  const reqs = (data.requests || []).slice(-40);
  let t0 = data.now;
  for (const r of reqs) for (const s of r.spans) t0 = Math.min(t0, s.start);
  const span = Math.max(data.now - t0, 0.001);
  const x = t => left + (w - left - right) * (t - t0) / span;
  const row = Math.max(4, Math.min(18, (h - top - bottom) / Math.max(reqs.length, 1)));
  let drawn = 0;
  reqs.forEach((r, i) => {
    const yy = top + i * row;
    ctx.fillStyle = "#5b6475";
    if (row >= 8) ctx.fillText(r.id.slice(0, 16) + (r.state === "finished" ? "" : " *"), 2, yy + row - 3);
    for (const s of r.spans) {
      const inset = s.phase === "preempted" ? row * 0.3 : row * 0.1;
      ctx.fillStyle = PHASE_COLORS[s.phase] || "#999";
      ctx.fillRect(x(s.start), yy + inset, Math.max(1, x(s.end) - x(s.start)), row - 2 * inset);
      drawn++;
    }
  });
  ctx.fillStyle = "#5b6475";
  for (let i = 0; i <= 5; i++) {
    const t = t0 + span * i / 5;
    ctx.fillText("-" + (data.now - t).toFixed(1) + "s", x(t) - (i === 5 ? 24 : 8), h - 5);
  }
  canvas.dataset.points = String(drawn);
  canvas.dataset.requests = String(reqs.length);
  legend("l-timeline", Object.keys(PHASE_COLORS).map(k => ({label: k, color: PHASE_COLORS[k]}))
      .concat([{label: "* live", color: "#fff"}]));
}

function redraw() {
  const series = (defs) => defs.map((d, i) => Object.assign({color: COLORS[i]}, d));
  const tput = series([{label: "output", points: rateSeries("vllm:generation_tokens_total")},
                       {label: "prompt", points: rateSeries("vllm:prompt_tokens_total")}]);
  legend("l-throughput", tput); lineChart("c-throughput", tput);
  const reqs = series([{label: "running", points: gaugeSeries("vllm:num_requests_running")},
                       {label: "waiting", points: gaugeSeries("vllm:num_requests_waiting")},
                       {label: "preempted (waiting)", points: gaugeSeries("tinyserve_num_requests_preempted")}]);
  legend("l-requests", reqs); lineChart("c-requests", reqs);
  kvChart();
  const pre = series([{label: "preemptions", points: rateSeries("vllm:num_preemptions_total")},
                      {label: "recomputed tokens", points: rateSeries("tinyserve_recomputed_tokens_total")}]);
  legend("l-preempt", pre); lineChart("c-preempt", pre);
  for (const [id, name] of [["ttft", "vllm:time_to_first_token_seconds"], ["itl", "vllm:inter_token_latency_seconds"]]) {
    const qs = series([0.5, 0.9, 0.99].map(q => ({label: "p" + Math.round(q * 100), points: quantileSeries(name, q)})));
    legend("l-" + id, qs); lineChart("c-" + id, qs, {unit: "s"});
  }
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const res = await fetch("metrics", {cache: "no-store"});
    if (!res.ok) throw new Error("/metrics: HTTP " + res.status);
    const parsed = parseMetrics(await res.text());
    const t = performance.now() / 1000;
    history.push({t, s: parsed.s, h: parsed.h});
    while (history.length > 2 && history[0].t < t - WINDOW_S - QUANTILE_WINDOW_S) history.shift();
    document.getElementById("model").textContent = parsed.model;
    redraw();
    const tl = await fetch("debug/request_timelines", {cache: "no-store"});
    if (tl.ok) timelineChart(await tl.json());
    polls++;
    status.dataset.polls = String(polls);
    status.textContent = "polled " + polls + " times, every " + POLL_MS + " ms";
    status.dataset.error = "";
  } catch (e) {
    status.dataset.error = String(e);
    status.textContent = "error: " + e;
  }
  setTimeout(poll, POLL_MS);
}
poll();
</script>
</body>
</html>
)HTML";

}  // namespace

const std::string& DashboardHtml() {
  static const std::string* const html = new std::string(kHtml);
  return *html;
}

}  // namespace tinyserve
