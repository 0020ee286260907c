// tinyserve: the one binary. Wires engine, models and frontends; each subcommand lives in its file.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "app/bench_serve.h"
#include "app/bench_throughput.h"
#include "app/convert.h"
#include "app/gen_model.h"
#include "app/generate.h"
#include "app/serve.h"

#ifndef TINYSERVE_DEFAULT_SHARED_DIR
#define TINYSERVE_DEFAULT_SHARED_DIR "../shared"
#endif

int main(int argc, char** argv) {
  CLI::App app{"tinyserve: a small, fast LLM serving engine"};
  app.require_subcommand(1);
  tinyserve::GenerateFlags generate;
  CLI::App* generate_cmd = tinyserve::AddGenerateCommand(app, generate);
  tinyserve::GenModelFlags gen_model;
  CLI::App* gen_model_cmd = tinyserve::AddGenModelCommand(app, gen_model);
  tinyserve::ConvertFlags convert;
  CLI::App* convert_cmd = tinyserve::AddConvertCommand(app, convert);
  tinyserve::ServeFlags serve;
  CLI::App* serve_cmd = tinyserve::AddServeCommand(app, serve);
  CLI::App* bench_cmd = app.add_subcommand("bench", "Benchmarks");
  bench_cmd->require_subcommand(1);
  tinyserve::BenchThroughputFlags bench_throughput;
  CLI::App* bench_throughput_cmd =
      tinyserve::AddBenchThroughputCommand(*bench_cmd, bench_throughput);
  tinyserve::BenchServeFlags bench_serve;
  CLI::App* bench_serve_cmd = tinyserve::AddBenchServeCommand(*bench_cmd, bench_serve);
  tinyserve::BenchReportFlags bench_report;
  CLI::App* bench_report_cmd = tinyserve::AddBenchReportCommand(*bench_cmd, bench_report);
  CLI11_PARSE(app, argc, argv);
  if (generate_cmd->parsed()) {
    return tinyserve::RunGenerate(generate, TINYSERVE_DEFAULT_SHARED_DIR);
  }
  if (gen_model_cmd->parsed()) return tinyserve::RunGenModel(gen_model);
  if (convert_cmd->parsed()) return tinyserve::RunConvert(convert, TINYSERVE_DEFAULT_SHARED_DIR);
  if (serve_cmd->parsed()) return tinyserve::RunServe(serve, TINYSERVE_DEFAULT_SHARED_DIR);
  if (bench_throughput_cmd->parsed()) return tinyserve::RunBenchThroughput(bench_throughput);
  if (bench_serve_cmd->parsed()) return tinyserve::RunBenchServe(bench_serve);
  if (bench_report_cmd->parsed()) return tinyserve::RunBenchReport(bench_report);
  return 1;
}
