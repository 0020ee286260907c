// model_load_bench: how long loading a model takes (weights converted to fp32 + tokenizer) and the
// peak resident memory it needs, against the bytes on disk. Loads through ResolveAndLoadModel, as
// serve and generate do; no runner is built.
//
//   build/bin/model_load_bench --model DIR_OR_FILE [--repeat N]
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "models/model_loader.h"

int main(int argc, char** argv) {
  CLI::App app{"Model load time and peak RSS"};
  std::string model;
  int repeat = 1;
  app.add_option("--model", model, "HF directory, .gguf or llama2.c .bin")->required();
  app.add_option("--repeat", repeat, "loads in a row (each frees the last)");
  CLI11_PARSE(app, argc, argv);
  namespace fs = std::filesystem;
  uint64_t disk = 0;
  std::error_code ec;
  if (fs::is_directory(model, ec)) {
    for (const auto& e : fs::directory_iterator(model)) {
      if (e.is_regular_file()) disk += e.file_size();
    }
  } else {
    disk = fs::file_size(model, ec);
  }
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto m = tinyserve::ResolveAndLoadModel({model, ""}, "");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!m.ok()) {
      std::fprintf(stderr, "model_load_bench: %s\n", m.status().message().c_str());
      return 1;
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const double fp32_gb = 4.0 * m->weights->config.num_parameters() / 1e9;
    std::printf(
        "load %d: %.2f s, %.2f GB on disk (%.2f GB/s), fp32 weights %.2f GB, peak RSS %.2f GB "
        "(%s)\n",
        i + 1, s, disk / 1e9, disk / 1e9 / s, fp32_gb, ru.ru_maxrss / 1e6,
        m->weights->config.Describe().c_str());
  }
  return 0;
}
