#include "app/bench_serve.h"

#include <httplib.h>

#include <unistd.h>
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/clock.h"
#include "bench/serve/dataset.h"
#include "bench/serve/report_html.h"
#include "bench/serve/result_json.h"
#include "bench/serve/runner.h"
#include "bench/serve/server_metrics.h"

namespace tinyserve {
namespace {

int Fail(const char* cmd, const std::string& message) {
  std::fprintf(stderr, "tinyserve bench %s: %s\n", cmd, message.c_str());
  return 1;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status WriteWholeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Unavailable("cannot write " + path);
  return Status::Ok();
}

StatusOr<double> ParseRate(const std::string& s) {
  if (s == "inf" || s == "Inf" || s == "INF") return INFINITY;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !(v > 0)) {
    return InvalidArgument("--request-rate must be a positive number or inf, not " + s);
  }
  return v;
}

StatusOr<std::vector<double>> ParsePercentiles(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const double p = std::strtod(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0' || p < 0 || p > 100) {
      return InvalidArgument("--metric-percentiles: bad percentile '" + item + "'");
    }
    out.push_back(p);
  }
  if (out.empty()) return InvalidArgument("--metric-percentiles is empty");
  return out;
}

// The first model id of GET /v1/models.
StatusOr<std::string> FirstModel(const bench::Target& target) {
  httplib::Client client(target.host, target.port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!target.api_key.empty()) headers.emplace("Authorization", "Bearer " + target.api_key);
  const std::string prefix = target.path.substr(0, target.path.rfind("/v1/"));
  auto res = client.Get(prefix + "/v1/models", headers);
  if (!res || res->status != 200) {
    return Unavailable("no --model given and GET /v1/models failed (is the server up?)");
  }
  const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
  if (body.is_discarded() || !body.contains("data") || !body["data"].is_array() ||
      body["data"].empty() || !body["data"][0].contains("id")) {
    return Unavailable("no --model given and GET /v1/models lists no model");
  }
  return body["data"][0]["id"].get<std::string>();
}

Status WriteReport(const nlohmann::json& result, const std::string& trace_path,
                   const std::string& out) {
  bench::ParsedTrace trace;
  if (!trace_path.empty()) {
    StatusOr<std::string> text = ReadWholeFile(trace_path);
    if (!text.ok()) return text.status();
    StatusOr<bench::ParsedTrace> parsed = bench::ParseTrace(*text);
    if (!parsed.ok()) return InvalidArgument(trace_path + ": " + parsed.status().message());
    trace = std::move(*parsed);
  }
  return WriteWholeFile(out,
                        bench::RenderReportHtml(result, trace_path.empty() ? nullptr : &trace));
}

}  // namespace

CLI::App* AddBenchServeCommand(CLI::App& bench, BenchServeFlags& f) {
  CLI::App* cmd = bench.add_subcommand(
      "serve", "Load-test an OpenAI-compatible server (as `vllm bench serve`)");
  cmd->add_option("--base-url", f.base_url, "server URL, e.g. http://127.0.0.1:8000");
  cmd->add_option("--host", f.host, "server host (without --base-url)");
  cmd->add_option("--port", f.port, "server port (without --base-url)");
  cmd->add_option("--endpoint", f.endpoint, "/v1/completions or /v1/chat/completions");
  cmd->add_option("--model", f.model, "model name to send (default: the server's first model)");
  cmd->add_option("--api-key", f.api_key, "bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option("--dataset,--dataset-name", f.dataset, "random or jsonl")
      ->check(CLI::IsMember({"random", "jsonl"}));
  cmd->add_option("--dataset-path", f.dataset_path, "the JSONL file for --dataset jsonl");
  cmd->add_option("--random-input-len", f.random_input_len, "prompt tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--random-output-len", f.random_output_len, "max_tokens per request")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--random-range-ratio", f.random_range_ratio,
                  "lengths uniform in [len*(1-r), len*(1+r)]")
      ->check(CLI::Range(0.0, 0.999999));
  cmd->add_option("--random-prefix-len", f.random_prefix_len, "shared prefix tokens")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--random-prompt-format", f.random_prompt_format,
                  "text (a word per token) or tokens (token ids, needs --vocab-size)")
      ->check(CLI::IsMember({"text", "tokens"}));
  cmd->add_option("--vocab-size", f.vocab_size, "vocabulary size for token-id prompts");
  cmd->add_option("--jsonl-output-len", f.jsonl_output_len,
                  "max_tokens for every jsonl prompt (default: the reply's estimated length)");
  cmd->add_option("--num-prompts", f.num_prompts, "number of requests")->check(CLI::PositiveNumber);
  cmd->add_option("--request-rate", f.request_rate, "requests/s (Poisson or gamma), or inf");
  cmd->add_option("--burstiness", f.burstiness, "gamma shape: 1 = Poisson, < 1 burstier");
  cmd->add_option("--max-concurrency", f.max_concurrency, "most requests in flight (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--ignore-eos", f.ignore_eos, "ask the server to ignore EOS (vLLM extension)");
  cmd->add_option("--seed", f.seed, "seed for the dataset and the arrival schedule");
  cmd->add_option("--warmup,--num-warmups", f.num_warmups, "warm-up requests (not measured)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--disable-tqdm,--no-progress", f.disable_progress, "no progress bar");
  cmd->add_option("--metric-percentiles", f.percentiles, "comma-separated, e.g. 50,90,99");
  cmd->add_option("--percentile-metrics", f.percentile_metrics,
                  "comma-separated metrics to report: ttft, tpot, itl, e2el")
      ->capture_default_str();
  cmd->add_option("--goodput", f.goodput,
                  "service level objectives as KEY:VALUE pairs in ms (ttft, tpot, e2el): "
                  "reports the requests/s that meet all of them")
      ->expected(1, -1);
  cmd->add_option("--label", f.label, "label of the result (the JSON's \"label\")");
  cmd->add_option("--temperature", f.temperature,
                  "temperature to send (default: none, the server's default applies)");
  cmd->add_option("--top-p", f.top_p, "top_p to send");
  cmd->add_option("--top-k", f.top_k, "top_k to send");
  cmd->add_option("--min-p", f.min_p, "min_p to send");
  cmd->add_option("--frequency-penalty", f.frequency_penalty, "frequency_penalty to send");
  cmd->add_option("--presence-penalty", f.presence_penalty, "presence_penalty to send");
  cmd->add_option("--repetition-penalty", f.repetition_penalty, "repetition_penalty to send");
  cmd->add_option("--timeout", f.timeout_s, "per-request read timeout (s)");
  cmd->add_option("--save-result", f.save_result, "write the result JSON to this file");
  cmd->add_flag("--scrape-metrics", f.scrape_metrics,
                "snapshot /metrics before and after (and sample it during) the run");
  cmd->add_option("--metrics-interval", f.metrics_interval_s, "/metrics sampling period (s)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--report", f.report, "write an HTML report to this file");
  cmd->add_option("--trace", f.trace, "the server's --trace-file, for the report's timeline");
  return cmd;
}

int RunBenchServe(const BenchServeFlags& f) {
  const char* kCmd = "serve";
  const std::string base =
      f.base_url.empty() ? "http://" + f.host + ":" + std::to_string(f.port) : f.base_url;
  StatusOr<bench::Target> target = bench::ParseTarget(base, f.endpoint);
  if (!target.ok()) return Fail(kCmd, target.status().message());
  target->timeout_s = f.timeout_s;
  target->api_key = f.api_key;
  if (target->api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) target->api_key = key;
  }
  StatusOr<double> rate = ParseRate(f.request_rate);
  if (!rate.ok()) return Fail(kCmd, rate.status().message());
  StatusOr<std::vector<double>> percentiles = ParsePercentiles(f.percentiles);
  if (!percentiles.ok()) return Fail(kCmd, percentiles.status().message());
  StatusOr<std::vector<std::string>> percentile_metrics =
      bench::ParsePercentileMetrics(f.percentile_metrics);
  if (!percentile_metrics.ok()) return Fail(kCmd, percentile_metrics.status().message());
  StatusOr<bench::GoodputSlos> goodput = bench::ParseGoodput(f.goodput);
  if (!goodput.ok()) return Fail(kCmd, goodput.status().message());
  if (!f.temperature) {
    std::fprintf(stderr,
                 "tinyserve bench serve: no --temperature: the requests carry none, so the "
                 "server's default applies (as `vllm bench serve` now does); --temperature 0 "
                 "for greedy decoding\n");
  }

  StatusOr<std::vector<bench::BenchPrompt>> prompts = std::vector<bench::BenchPrompt>{};
  if (f.dataset == "jsonl") {
    if (f.dataset_path.empty()) return Fail(kCmd, "--dataset jsonl needs --dataset-path");
    prompts = bench::LoadJsonlDataset(f.dataset_path, f.num_prompts, f.jsonl_output_len);
  } else {
    bench::RandomDatasetOptions o;
    o.num_prompts = f.num_prompts;
    o.input_len = f.random_input_len;
    o.output_len = f.random_output_len;
    o.range_ratio = f.random_range_ratio;
    o.prefix_len = f.random_prefix_len;
    o.as_token_ids = f.random_prompt_format == "tokens";
    o.vocab_size = f.vocab_size;
    o.seed = f.seed;
    prompts = bench::MakeRandomDataset(o);
  }
  if (!prompts.ok()) return Fail(kCmd, prompts.status().message());

  std::string model = f.model;
  if (model.empty()) {
    StatusOr<std::string> first = FirstModel(*target);
    if (!first.ok()) return Fail(kCmd, first.status().message());
    model = *first;
  }
  bench::RunOptions run;
  run.target = *target;
  run.model = model;
  run.ignore_eos = f.ignore_eos;
  run.sampling.temperature = f.temperature;
  run.sampling.top_p = f.top_p;
  run.sampling.top_k = f.top_k;
  run.sampling.min_p = f.min_p;
  run.sampling.frequency_penalty = f.frequency_penalty;
  run.sampling.presence_penalty = f.presence_penalty;
  run.sampling.repetition_penalty = f.repetition_penalty;
  run.request_rate = *rate;
  run.burstiness = f.burstiness;
  run.seed = f.seed;
  run.max_concurrency = f.max_concurrency;
  run.progress = !f.disable_progress && isatty(STDERR_FILENO);

  SteadyClock clock;
  if (Status s = bench::RunWarmup(run, *prompts, f.num_warmups, clock); !s.ok()) {
    return Fail(kCmd, s.message());
  }
  std::optional<bench::MetricTotals> before;
  std::optional<bench::MetricsSampler> sampler;
  if (f.scrape_metrics) {
    StatusOr<bench::MetricTotals> m = bench::ScrapeMetrics(*target);
    if (!m.ok()) return Fail(kCmd, "--scrape-metrics: " + m.status().message());
    before = std::move(*m);
  }
  std::fprintf(stderr,
               "tinyserve bench serve: %d requests to %s%s (model %s), rate %s, "
               "max concurrency %d\n",
               f.num_prompts, base.c_str(), f.endpoint.c_str(), model.c_str(),
               f.request_rate.c_str(), f.max_concurrency);
  if (f.scrape_metrics) sampler.emplace(*target, f.metrics_interval_s);
  StatusOr<bench::RunResult> result = bench::RunBenchmark(run, *prompts, clock);
  std::optional<bench::ServerView> server;
  if (f.scrape_metrics) {
    StatusOr<bench::MetricTotals> after = bench::ScrapeMetrics(*target);
    if (!after.ok()) return Fail(kCmd, "--scrape-metrics: " + after.status().message());
    server = bench::DiffMetrics(*before, *after);
    sampler->Stop(&*server);
  }
  if (!result.ok()) return Fail(kCmd, result.status().message());

  const bench::BenchSummary summary =
      bench::Summarize(result->records, result->end_s - result->start_s, *percentiles, *goodput);
  bench::RunDescription desc;
  desc.backend = target->is_chat ? "openai-chat" : "openai";
  desc.model_id = model;
  desc.base_url = base;
  desc.endpoint = f.endpoint;
  desc.dataset =
      f.dataset == "jsonl" ? "jsonl:" + f.dataset_path : "random (" + f.random_prompt_format + ")";
  desc.num_prompts = f.num_prompts;
  desc.request_rate = *rate;
  desc.burstiness = f.burstiness;
  desc.max_concurrency = f.max_concurrency;
  desc.percentiles = *percentiles;
  desc.percentile_metrics = *percentile_metrics;
  desc.label = f.label;
  bench::PrintResultBlock(stdout, summary, desc, server);
  for (const bench::RequestRecord& r : result->records) {
    if (!r.success) {
      std::fprintf(stderr, "first failure (request %d): %s\n", r.index, r.error.c_str());
      break;
    }
  }
  const nlohmann::ordered_json json = bench::ResultJson(desc, *result, summary, server);
  if (!f.save_result.empty()) {
    if (Status s = WriteWholeFile(f.save_result, json.dump(2) + "\n"); !s.ok()) {
      return Fail(kCmd, s.message());
    }
  }
  if (!f.report.empty()) {
    if (Status s = WriteReport(nlohmann::json::parse(json.dump()), f.trace, f.report); !s.ok()) {
      return Fail(kCmd, s.message());
    }
  }
  return summary.failed == 0 ? 0 : 2;
}

CLI::App* AddBenchReportCommand(CLI::App& bench, BenchReportFlags& f) {
  CLI::App* cmd = bench.add_subcommand(
      "report", "HTML report from a `bench serve --save-result` file and a server trace");
  cmd->add_option("--result", f.result, "the --save-result JSON")->required();
  cmd->add_option("--trace", f.trace, "the server's --trace-file (Chrome trace JSON)");
  cmd->add_option("--out,-o", f.out, "the HTML file to write")->required();
  return cmd;
}

int RunBenchReport(const BenchReportFlags& f) {
  StatusOr<std::string> text = ReadWholeFile(f.result);
  if (!text.ok()) return Fail("report", text.status().message());
  const nlohmann::json result = nlohmann::json::parse(*text, nullptr, false);
  if (result.is_discarded() || !result.is_object() || !result.contains("requests")) {
    return Fail("report", f.result + ": not a `bench serve --save-result` JSON");
  }
  try {
    if (Status s = WriteReport(result, f.trace, f.out); !s.ok()) return Fail("report", s.message());
  } catch (const nlohmann::json::exception& e) {
    return Fail("report", f.result + ": unexpected content: " + e.what());
  }
  return 0;
}

}  // namespace tinyserve
