// A small parser of the Prometheus text exposition format (0.0.4), for tests: HELP and TYPE per
// family and every sample with its labels.
#pragma once

#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace tinyserve::testing {

struct TextSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

struct TextFamily {
  std::string help;
  std::string type;
};

struct ParsedText {
  std::map<std::string, TextFamily> families;
  std::vector<TextSample> samples;
  std::vector<std::string> errors;  // lines that did not parse

  // The value of the sample with this name whose labels include `labels`; NaN if none.
  double Value(const std::string& name,
               const std::map<std::string, std::string>& labels = {}) const {
    for (const TextSample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) match = false;
      }
      if (match) return s.value;
    }
    return std::numeric_limits<double>::quiet_NaN();
  }
};

inline ParsedText ParsePrometheusText(const std::string& text) {
  ParsedText out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const size_t sp = rest.find(' ');
      const std::string name = rest.substr(0, sp);
      const std::string value = sp == std::string::npos ? "" : rest.substr(sp + 1);
      (line[2] == 'H' ? out.families[name].help : out.families[name].type) = value;
      continue;
    }
    if (line[0] == '#') continue;
    TextSample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i != std::string::npos && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') break;
        const std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) ++j;
          value += line[j];
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) {
        out.errors.push_back(line);
        continue;
      }
      ++i;  // '}'
    }
    try {
      s.value = std::stod(line.substr(i));
    } catch (...) {
      out.errors.push_back(line);
      continue;
    }
    out.samples.push_back(std::move(s));
  }
  return out;
}

}  // namespace tinyserve::testing
