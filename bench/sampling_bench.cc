// sampling_bench: the CPU backend's sampler (Backend::SampleRows) per row, and what a decode step
// ships from the backend to the host before and after the executor seam (issue 17).
//
//   sampling_bench [--vocab 32000,128256] [--rows 64] [--reps 20]
//
// Random logits rows (normal, sd 3); one SamplingSpec per mode: greedy; temperature 0.8; top_p 0.9
// (with temperature 0.8); penalties (repetition 1.2, frequency 0.5, presence 0.5 over a history
// of 64 prompt and 64 output tokens; temperature 0.8). Reports microseconds per row (best of
// --reps). The bytes per step are computed: before, the [rows, vocab] fp32 logits came to the
// host; now each row returns a TokenLogprobs (token, logprob, rank: 12 bytes, plus 8 bytes per
// top-n entry when logprobs are asked).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace tinyserve {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> ParseList(const std::string& s) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (start < s.size()) {
    const size_t end = s.find(',', start);
    out.push_back(std::stoi(s.substr(start, end - start)));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

int Main(int argc, char** argv) {
  CLI::App app{"sampling_bench: CPU sampling cost per row and bytes per decode step"};
  std::string vocabs = "32000,128256";
  int32_t rows = 64, reps = 20;
  app.add_option("--vocab", vocabs, "comma-separated vocabulary sizes");
  app.add_option("--rows", rows, "rows per SampleRows call (the batch)");
  app.add_option("--reps", reps, "repetitions (best is reported)");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<Backend> backend = CreateCpuBackend(1);
  std::printf("| vocab | mode | us per row | logits bytes/step before | bytes/step now |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int32_t vocab : ParseList(vocabs)) {
    std::mt19937 rng(17);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    for (float& x : logits) x = normal(rng);
    std::vector<int32_t> history;
    std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
    for (int i = 0; i < 128; ++i) history.push_back(tok(rng));
    PenaltyState penalties;
    penalties.Reset(history, 64);

    struct Mode {
      const char* name;
      SamplingSpec spec;
    };
    std::vector<Mode> modes(4);
    modes[0].name = "greedy";
    modes[0].spec.temperature = 0.0f;
    modes[1].name = "temperature 0.8";
    modes[1].spec.temperature = 0.8f;
    modes[2].name = "top_p 0.9";
    modes[2].spec.temperature = 0.8f;
    modes[2].spec.top_p = 0.9f;
    modes[3].name = "penalties";
    modes[3].spec.temperature = 0.8f;
    modes[3].spec.repetition_penalty = 1.2f;
    modes[3].spec.frequency_penalty = 0.5f;
    modes[3].spec.presence_penalty = 0.5f;
    for (Mode& m : modes) {
      m.spec.seed = 1;
      std::vector<SampleRow> sample(rows);
      for (int32_t r = 0; r < rows; ++r) sample[r] = {&m.spec, &penalties, 64u + r};
      std::vector<TokenLogprobs> out(rows);
      double best = 1e30;
      for (int32_t rep = 0; rep < reps; ++rep) {
        const auto t0 = Clock::now();
        const Status s = backend->SampleRows(logits.data(), vocab, sample.data(), rows, out.data());
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
        best = std::min(best, us / rows);
      }
      std::printf("| %d | %s | %.1f | %zu | %d |\n", vocab, m.name, best,
                  static_cast<size_t>(rows) * vocab * sizeof(float), rows * 12);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tinyserve

int main(int argc, char** argv) { return tinyserve::Main(argc, argv); }
