// The include arrows of DESIGN §1, as a checker: which part of the source tree may `#include`
// which. The build already refuses most crossings (each CMake target exposes only its own headers,
// so a part can include only what it links); this checker adds the finer rules the build cannot
// see (models and metrics may use only named interface headers of engine/) and catches relative
// paths that climb out of a folder. Pure functions over file text, plus one tree walk.
//
// The parts and their arrows (a part may always include its own headers):
//   base     -> nothing of ours (the leaf)
//   kernels  -> base
//   structured -> base                                (constrained decoding: grammars, matchers)
//   engine   -> base, structured
//   models   -> kernels, base, engine's executor interface (kExecutorInterface)
//   metrics  -> base, engine's observer interface (kObserverInterface)
//   server   -> engine, metrics, models, structured, base   (server/protocol is part of server)
//   bench/serve -> base                               (the load generator's library)
//   app, bench, tests, fuzz -> everything (they wire the parts)
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tinyserve::arrows {

// The engine headers that form the executor interface (what models/ may include of engine/).
inline constexpr std::string_view kExecutorInterface[] = {
    "engine/model_executor.h", "engine/scheduled_batch.h", "engine/sampling_params.h"};
// The engine headers that form the observer interface (what metrics/ may include of engine/).
inline constexpr std::string_view kObserverInterface[] = {
    "engine/engine_observer.h", "engine/events.h", "engine/scheduler_stats.h"};

struct Include {
  int line = 0;        // 1-based
  std::string target;  // as written between the quotes (or angle brackets)
};

// Every #include of `text` (quoted or angled), in order.
std::vector<Include> ParseIncludes(std::string_view text);

// The part a repository-relative path belongs to: "base", "kernels", "structured", "engine",
// "models", "metrics", "server", "bench/serve", "app", "bench", "tests", "fuzz"; empty for anything
// else.
std::string PartOf(std::string_view path);

// Returns "" if `from` (a repository-relative source path) may include `target` (a
// repository-relative header path), else the reason, naming the rule.
std::string CheckArrow(std::string_view from, std::string_view target);

struct Violation {
  std::string file;  // repository-relative
  int line = 0;
  std::string target;  // as written
  std::string reason;

  std::string ToString() const;  // "kernels/x.cc:3: includes "engine/y.h": ..."
};

// Checks one file's text. `path` is repository-relative (it decides the part). A quoted include
// is resolved as the compiler would: first against the file's own folder (if that file exists
// under `root`), else as a repository-relative path. Includes that name none of our parts
// (system and third-party headers) are not checked.
std::vector<Violation> CheckFile(std::string_view path, std::string_view text,
                                 const std::filesystem::path& root);

// Every .h/.cc/.cu/.cuh file under root's parts, sorted by path; third_party/ and build folders
// are not walked.
std::vector<Violation> CheckTree(const std::filesystem::path& root, int* num_files_checked);

}  // namespace tinyserve::arrows
