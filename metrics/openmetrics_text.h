// The OpenMetrics text exposition (1.0.0) of collected prometheus-cpp metric families, and the
// choice between it and Prometheus text 0.0.4 from a scraper's Accept header.
//
// prometheus-cpp 1.0.1 has only the 0.0.4 serializer; this one writes the same families in
// OpenMetrics 1.0.0 text: `# TYPE`/`# HELP` (and `# UNIT` for families named `_seconds`) per
// family, counters' family names without `_total` and their samples with it, `_created` (the Unix
// time the series were created) on counters and histograms, histogram `le` values as canonical
// floats ("1.0", "+Inf"), OpenMetrics escaping, and the closing `# EOF`. Plain functions;
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include <prometheus/metric_family.h>

namespace tinyserve {

// The Content-Type of SerializeOpenMetrics' text.
inline constexpr const char* kOpenMetricsContentType =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

enum class ExpositionFormat { kPrometheusText004, kOpenMetrics100 };

// The format to answer a scrape whose Accept header is `accept` ("" when absent): OpenMetrics
// only when the header asks for `application/openmetrics-text` (version 1.0.0, 0.0.1 or none) with
// a q-value above 0 and at least that of every `text/plain` range (on a tie, the one listed
// first); else Prometheus text 0.0.4, the default.
ExpositionFormat NegotiateExposition(const std::string& accept);

// The OpenMetrics text of `families`, whose counters and histograms were created at Unix time
// `created_unix_s` (their `_created` samples).
std::string SerializeOpenMetrics(const std::vector<prometheus::MetricFamily>& families,
                                 double created_unix_s);

// `value` as OpenMetrics writes a float: the shortest text that reads back exactly, with ".0" on
// integral values; "+Inf", "-Inf", "NaN".
std::string OpenMetricsFloat(double value);

}  // namespace tinyserve
