#include "metrics/openmetrics_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace tinyserve {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Escapes backslash, double quote and line feed (OpenMetrics: label values and HELP text).
void AppendEscaped(std::string& out, const std::string& text) {
  for (char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
}

void AppendLabels(std::string& out, const std::vector<prometheus::ClientMetric::Label>& labels,
                  const char* extra_name = nullptr, const std::string& extra_value = "") {
  if (labels.empty() && extra_name == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& label : labels) {
    if (!first) out += ',';
    first = false;
    out += label.name;
    out += "=\"";
    AppendEscaped(out, label.value);
    out += '"';
  }
  if (extra_name != nullptr) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    AppendEscaped(out, extra_value);
    out += '"';
  }
  out += '}';
}

void AppendSample(std::string& out, const std::string& name,
                  const std::vector<prometheus::ClientMetric::Label>& labels,
                  const std::string& value, const char* extra_name = nullptr,
                  const std::string& extra_value = "") {
  out += name;
  AppendLabels(out, labels, extra_name, extra_value);
  out += ' ';
  out += value;
  out += '\n';
}

const char* TypeName(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter:
      return "counter";
    case prometheus::MetricType::Gauge:
      return "gauge";
    case prometheus::MetricType::Histogram:
      return "histogram";
    case prometheus::MetricType::Summary:
      return "summary";
    default:
      return "unknown";
  }
}

}  // namespace

ExpositionFormat NegotiateExposition(const std::string& accept) {
  // The best (q, earliest position) of each kind; q < 0: not listed.
  double best_open = -1, best_text = -1;
  int open_pos = 0, text_pos = 0, pos = 0;
  std::string_view rest(accept);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view range = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    ++pos;
    std::string_view params = range;
    const size_t semi = params.find(';');
    const std::string type = Lower(Trim(params.substr(0, semi)));
    params = semi == std::string_view::npos ? std::string_view() : params.substr(semi + 1);
    double q = 1.0;
    std::string version;
    while (!params.empty()) {
      const size_t next = params.find(';');
      const std::string_view param = Trim(params.substr(0, next));
      params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string key = Lower(Trim(param.substr(0, eq)));
      std::string_view value = Trim(param.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      if (key == "q") {
        double parsed = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
        q = ec == std::errc() && end == value.data() + value.size() ? parsed : 0.0;
      } else if (key == "version") {
        version = std::string(value);
      }
    }
    if (type == "application/openmetrics-text") {
      if ((version.empty() || version == "1.0.0" || version == "0.0.1") && q > best_open) {
        best_open = q;
        open_pos = pos;
      }
    } else if (type == "text/plain") {
      if (q > best_text) {
        best_text = q;
        text_pos = pos;
      }
    }
  }
  if (best_open <= 0) return ExpositionFormat::kPrometheusText004;
  if (best_open > best_text || (best_open == best_text && open_pos < text_pos)) {
    return ExpositionFormat::kOpenMetrics100;
  }
  return ExpositionFormat::kPrometheusText004;
}

std::string OpenMetricsFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  std::string out(buf, ec == std::errc() ? end : buf);
  if (out.find_first_of(".eE") == std::string::npos) out += ".0";
  return out;
}

std::string SerializeOpenMetrics(const std::vector<prometheus::MetricFamily>& families,
                                 double created_unix_s) {
  std::string out;
  const std::string created = OpenMetricsFloat(created_unix_s);
  for (const prometheus::MetricFamily& family : families) {
    std::string name = family.name;
    if (family.type == prometheus::MetricType::Counter && EndsWith(name, "_total")) {
      name.resize(name.size() - 6);
    }
    out += "# TYPE " + name + " " + TypeName(family.type) + "\n";
    if (EndsWith(name, "_seconds")) out += "# UNIT " + name + " seconds\n";
    if (!family.help.empty()) {
      out += "# HELP " + name + " ";
      AppendEscaped(out, family.help);
      out += '\n';
    }
    for (const prometheus::ClientMetric& m : family.metric) {
      switch (family.type) {
        case prometheus::MetricType::Counter:
          AppendSample(out, name + "_total", m.label, OpenMetricsFloat(m.counter.value));
          AppendSample(out, name + "_created", m.label, created);
          break;
        case prometheus::MetricType::Gauge:
          AppendSample(out, name, m.label, OpenMetricsFloat(m.gauge.value));
          break;
        case prometheus::MetricType::Histogram: {
          bool has_inf = false;
          for (const auto& bucket : m.histogram.bucket) {
            has_inf = has_inf || std::isinf(bucket.upper_bound);
            AppendSample(out, name + "_bucket", m.label, std::to_string(bucket.cumulative_count),
                         "le", OpenMetricsFloat(bucket.upper_bound));
          }
          if (!has_inf) {
            AppendSample(out, name + "_bucket", m.label, std::to_string(m.histogram.sample_count),
                         "le", "+Inf");
          }
          AppendSample(out, name + "_count", m.label, std::to_string(m.histogram.sample_count));
          AppendSample(out, name + "_sum", m.label, OpenMetricsFloat(m.histogram.sample_sum));
          AppendSample(out, name + "_created", m.label, created);
          break;
        }
        case prometheus::MetricType::Summary:
          for (const auto& q : m.summary.quantile) {
            AppendSample(out, name, m.label, OpenMetricsFloat(q.value), "quantile",
                         OpenMetricsFloat(q.quantile));
          }
          AppendSample(out, name + "_count", m.label, std::to_string(m.summary.sample_count));
          AppendSample(out, name + "_sum", m.label, OpenMetricsFloat(m.summary.sample_sum));
          AppendSample(out, name + "_created", m.label, created);
          break;
        default:
          AppendSample(out, name, m.label, OpenMetricsFloat(m.untyped.value));
          break;
      }
    }
  }
  out += "# EOF\n";
  return out;
}

}  // namespace tinyserve
