// `tinyserve bench serve`: a load generator for any OpenAI-compatible server (tinyserve, vLLM,
// llama.cpp), with `vllm bench serve`'s flags, result block and --save-result keys
// (bench/serve/*.h hold the logic; bench/README.md the definitions), optional /metrics scraping
// and an HTML report. `tinyserve bench report`: the HTML report from a saved result (and the
// server's trace file) after the fact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tinyserve {

struct BenchServeFlags {
  std::string base_url;  // default http://{host}:{port}
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint = "/v1/completions";
  std::string model;  // default: the first model of GET /v1/models
  std::string api_key;
  std::string dataset = "random";  // random | jsonl
  std::string dataset_path;
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int random_prefix_len = 0;
  std::string random_prompt_format = "text";  // text | tokens
  int32_t vocab_size = 0;
  int jsonl_output_len = 0;
  int num_prompts = 1000;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  bool ignore_eos = false;
  uint64_t seed = 0;
  int num_warmups = 0;
  bool disable_progress = false;
  std::string percentiles = "99";
  std::string percentile_metrics = "ttft,tpot,itl";  // vLLM's default for generation
  std::vector<std::string> goodput;                  // KEY:VALUE SLOs in ms (ttft, tpot, e2el)
  std::string label;
  // vLLM's sampling flags; unset ones are not sent (the server's defaults apply).
  std::optional<double> temperature, top_p, min_p, frequency_penalty, presence_penalty,
      repetition_penalty;
  std::optional<int> top_k;
  double timeout_s = 600.0;
  std::string save_result;
  bool scrape_metrics = false;
  double metrics_interval_s = 0.25;
  std::string report;
  std::string trace;  // the server's --trace-file, for the report's timeline
};

struct BenchReportFlags {
  std::string result;
  std::string trace;
  std::string out;
};

CLI::App* AddBenchServeCommand(CLI::App& bench, BenchServeFlags& flags);
int RunBenchServe(const BenchServeFlags& flags);
CLI::App* AddBenchReportCommand(CLI::App& bench, BenchReportFlags& flags);
int RunBenchReport(const BenchReportFlags& flags);

}  // namespace tinyserve
