// The numbers of `vllm bench serve`, computed the same way from the client's records
// (stream_record.h), all from one clock:
//   TTFT  = first content chunk - request sent
//   TPOT  = (last content chunk - first content chunk) / (output tokens - 1), per request, only for
//           requests with more than one output token (vLLM: (latency - TTFT) / (output_len - 1))
//   ITL   = every gap between consecutive content chunks, pooled over all requests (a chunk that
//           carries several tokens is one gap, as in vLLM)
//   E2EL  = end of the stream (data: [DONE]) - request sent (vLLM stamps the last chunk with
//           choices, which on vLLM and tinyserve is the finish chunk right before [DONE]; the end
//           of the stream is what the server's e2e histogram measures)
// Statistics over successful requests only: mean, median, standard deviation (ddof 0) and
// percentiles with numpy's default linear interpolation; an empty set gives 0 (as vLLM's
// `np.mean(x or 0)`). Throughputs divide by the benchmark's duration (first send to last end).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "bench/serve/stream_record.h"

namespace tinyserve::bench {

// numpy.percentile(values, p) with the default linear method; 0 for no values. p in [0, 100].
double Percentile(std::vector<double> values, double p);

struct LatencyStats {  // milliseconds
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value), for each requested p
  double PercentileMs(double p) const;                    // the value for p, or 0 if not computed
};

struct RequestMetrics {  // seconds; tpot_s < 0 when the request has fewer than two output tokens
  double ttft_s = 0, tpot_s = -1, e2el_s = 0;
  std::vector<double> itl_s;
};

// REQUIRES record.success (at least one content chunk).
RequestMetrics ComputeRequestMetrics(const RequestRecord& record);

struct BenchSummary {
  int completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> request_goodput;  // requests/s meeting every SLO; only with SLOs
  int good_completed = 0;
  double peak_output_throughput = 0;  // the best 1-second bucket (from the first send) of tokens/s
  int peak_concurrent_requests = 0;   // most requests in flight at once
  LatencyStats ttft, tpot, itl, e2el;
};

// vLLM's --goodput service level objectives, in seconds (given in milliseconds as KEY:VALUE).
struct GoodputSlos {
  std::optional<double> ttft_s, tpot_s, e2el_s;
  bool any() const { return ttft_s || tpot_s || e2el_s; }
};

// Parses --goodput's KEY:VALUE pairs (keys ttft, tpot, e2el; values non-negative milliseconds),
// as vLLM's parse_goodput / check_goodput_args; InvalidArgument naming the bad pair.
StatusOr<GoodputSlos> ParseGoodput(const std::vector<std::string>& pairs);

// The metrics --percentile-metrics may name (vLLM's generation metrics; default "ttft,tpot,itl").
inline constexpr const char* kPercentileMetrics[] = {"ttft", "tpot", "itl", "e2el"};
// Parses --percentile-metrics (comma-separated names of kPercentileMetrics); InvalidArgument
// naming an unknown or unsupported one.
StatusOr<std::vector<std::string>> ParsePercentileMetrics(const std::string& list);

// `percentiles`: which percentiles to report (vLLM's --metric-percentiles, default 99). `goodput`:
// a successful request is good when it meets every SLO given (TTFT, TPOT (0 for a request with
// fewer than two output tokens, as vLLM), E2EL), as vLLM's calculate_metrics; the summary's
// request_goodput is then good requests / duration.
BenchSummary Summarize(const std::vector<RequestRecord>& records, double duration_s,
                       const std::vector<double>& percentiles, const GoodputSlos& goodput = {});

// Output tokens per `bucket_s` seconds since `t0`, from each successful request's content chunks
// (a request's output tokens spread evenly over its chunks). Returns tokens/s per bucket; the
// last bucket divides by its part of the run (duration_s - its start), so a run shorter than a
// bucket gets its average rate.
std::vector<double> OutputThroughputOverTime(const std::vector<RequestRecord>& records, double t0,
                                             double duration_s, double bucket_s);

}  // namespace tinyserve::bench
