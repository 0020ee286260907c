#include "tests/arrows/include_arrows.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace tinyserve::arrows {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kParts[] = {"bench/serve", "base",   "kernels", "structured",
                                       "engine",      "models", "metrics", "server",
                                       "app",         "bench",  "tests",   "fuzz"};

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool InPart(std::string_view path, std::string_view part) {
  return StartsWith(path, part) && path.size() > part.size() && path[part.size()] == '/';
}

template <size_t N>
bool IsOneOf(std::string_view path, const std::string_view (&list)[N]) {
  return std::find(std::begin(list), std::end(list), path) != std::end(list);
}

template <size_t N>
std::string Join(const std::string_view (&list)[N]) {
  std::string out;
  for (std::string_view s : list) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

// The parts `from` may include besides itself.
std::vector<std::string_view> AllowedParts(std::string_view from) {
  if (from == "kernels" || from == "structured" || from == "bench/serve") return {"base"};
  if (from == "engine") return {"base", "structured"};
  if (from == "models") return {"kernels", "base"};
  if (from == "metrics") return {"base"};
  if (from == "server") return {"engine", "metrics", "models", "structured", "base"};
  return {};
}

// `path` with "." and ".." segments folded; "" if it climbs above the root.
std::string Normalize(std::string_view path) {
  std::vector<std::string> parts;
  std::stringstream in{std::string(path)};
  std::string segment;
  while (std::getline(in, segment, '/')) {
    if (segment.empty() || segment == ".") continue;
    if (segment == "..") {
      if (parts.empty()) return "";
      parts.pop_back();
      continue;
    }
    parts.push_back(segment);
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "/") + p;
  return out;
}

}  // namespace

std::vector<Include> ParseIncludes(std::string_view text) {
  std::vector<Include> out;
  int line_number = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    ++line_number;
    pos = end + 1;
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string_view::npos || line.substr(i, 7) != "include") continue;
    i = line.find_first_not_of(" \t", i + 7);
    if (i == std::string_view::npos || (line[i] != '"' && line[i] != '<')) continue;
    const char close = line[i] == '"' ? '"' : '>';
    const size_t stop = line.find(close, i + 1);
    if (stop == std::string_view::npos) continue;
    out.push_back({line_number, std::string(line.substr(i + 1, stop - i - 1))});
  }
  return out;
}

std::string PartOf(std::string_view path) {
  for (std::string_view part : kParts) {
    if (InPart(path, part)) return std::string(part);
  }
  return "";
}

std::string CheckArrow(std::string_view from, std::string_view target) {
  const std::string from_part = PartOf(from);
  const std::string to_part = PartOf(target);
  if (from_part.empty() || to_part.empty() || from_part == to_part) return "";
  if (from_part == "app" || from_part == "bench" || from_part == "tests" || from_part == "fuzz") {
    return "";
  }
  if (from_part == "models" && to_part == "engine") {
    if (IsOneOf(target, kExecutorInterface)) return "";
    return "models may include of engine/ only its executor interface (" +
           Join(kExecutorInterface) + ")";
  }
  if (from_part == "metrics" && to_part == "engine") {
    if (IsOneOf(target, kObserverInterface)) return "";
    return "metrics may include of engine/ only its observer interface (" +
           Join(kObserverInterface) + ")";
  }
  const std::vector<std::string_view> allowed = AllowedParts(from_part);
  if (std::find(allowed.begin(), allowed.end(), to_part) != allowed.end()) return "";
  std::string list;
  for (std::string_view a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
  return from_part + " may include only " +
         (list.empty() ? "its own headers" : list + " and itself") + " (DESIGN §1), not " + to_part;
}

std::string Violation::ToString() const {
  return file + ":" + std::to_string(line) + ": includes \"" + target + "\": " + reason;
}

std::vector<Violation> CheckFile(std::string_view path, std::string_view text,
                                 const fs::path& root) {
  std::vector<Violation> out;
  const std::string folder = fs::path(std::string(path)).parent_path().generic_string();
  for (const Include& inc : ParseIncludes(text)) {
    // As the compiler looks: the includer's folder first, then the include roots (the repository).
    std::string resolved = inc.target;
    const std::string local = Normalize(folder + "/" + inc.target);
    if (!local.empty() && local != inc.target && fs::exists(root / local)) resolved = local;
    if (StartsWith(inc.target, "../") || inc.target.find("/../") != std::string::npos) {
      out.push_back({std::string(path), inc.line, inc.target,
                     "climbs out of its folder; include by the path from the repository root"});
      continue;
    }
    std::string reason = CheckArrow(path, resolved);
    if (!reason.empty()) out.push_back({std::string(path), inc.line, inc.target, reason});
  }
  return out;
}

std::vector<Violation> CheckTree(const fs::path& root, int* num_files_checked) {
  std::vector<std::string> files;
  for (std::string_view part : kParts) {
    if (part == "bench/serve") continue;  // walked as part of bench/
    const fs::path dir = root / part;
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu" && ext != ".cuh") continue;
      files.push_back(fs::relative(entry.path(), root).generic_string());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<Violation> out;
  for (const std::string& file : files) {
    std::ifstream in(root / file, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    for (Violation& v : CheckFile(file, text.str(), root)) out.push_back(std::move(v));
  }
  if (num_files_checked != nullptr) *num_files_checked = static_cast<int>(files.size());
  return out;
}

}  // namespace tinyserve::arrows
