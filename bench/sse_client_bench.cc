// sse_client_bench: the cost of the load generator's client (bench/serve) against a fake OpenAI
// server in a child process, so the client's CPU time (getrusage of this process) is its own.
//   1. Parsing throughput: the server streams completion chunks (one token each) as fast as it
//      can to --streams concurrent requests; reports streamed tokens per client CPU-second.
//   2. Added latency: the server paces each stream (--gap-ms between chunks) and writes its
//      steady-clock send time into each chunk's text; the client's stamp minus that time is the
//      per-chunk delay (loopback, kernel, HTTP and SSE parsing: an upper bound on what the client
//      adds). Reports p50/p99/max.
// Usage: sse_client_bench [--streams N] [--tokens N] [--gap-ms X]
#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench/serve/runner.h"
#include "bench/serve/serve_metrics.h"

namespace {

using tinyserve::SteadyClock;
namespace b = tinyserve::bench;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// The fake server (child process): POST /v1/completions streams body.max_tokens chunks, each
// "<steady seconds>;", `gap_ms` apart (0: back to back), then usage and [DONE].
// Writes the port it listens on to `port_fd`.
[[noreturn]] void ServeFake(int port_fd, double gap_ms) {
  httplib::Server server;
  server.new_task_queue = [] { return new httplib::ThreadPool(600); };
  server.set_tcp_nodelay(true);
  // The system httplib listens with a backlog of 5; hundreds of streams connect at once.
  int listen_fd = -1;
  server.set_socket_options([&listen_fd](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = sock;
  });
  server.Post("/v1/completions", [gap_ms](const httplib::Request& req, httplib::Response& res) {
    const int n = nlohmann::json::parse(req.body).value("max_tokens", 16);
    res.set_chunked_content_provider(
        "text/event-stream", [n, gap_ms](size_t, httplib::DataSink& sink) {
          SteadyClock clock;
          const double t0 = clock.Now();
          std::string out;
          for (int i = 0; i < n; ++i) {
            if (gap_ms > 0) {
              const double due = t0 + i * gap_ms * 1e-3;
              const double now = clock.Now();
              if (due > now) std::this_thread::sleep_for(std::chrono::duration<double>(due - now));
            }
            char text[64];
            std::snprintf(text, sizeof(text), "%.9f;", clock.Now());
            out = R"(data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"fake",)"
                  R"("choices":[{"index":0,"text":")" +
                  std::string(text) +
                  R"(","logprobs":null,"finish_reason":null}]})"
                  "\n\n";
            if (!sink.write(out.data(), out.size())) return false;
          }
          out = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":" +
                std::to_string(n) + "}}\n\ndata: [DONE]\n\n";
          sink.write(out.data(), out.size());
          sink.done();
          return true;
        });
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  if (listen_fd >= 0) listen(listen_fd, SOMAXCONN);
  if (write(port_fd, &port, sizeof(port)) != sizeof(port)) _exit(1);
  server.listen_after_bind();
  _exit(0);
}

struct Outcome {
  double wall_s, cpu_s;
  int64_t tokens;
  std::vector<double> delays_ms;
  int failed;
  std::string first_error;
};

Outcome Run(int port, int streams, int tokens) {
  b::RunOptions o;
  o.target = *b::ParseTarget("http://127.0.0.1:" + std::to_string(port), "/v1/completions");
  o.model = "fake";
  o.request_rate = INFINITY;
  std::vector<b::BenchPrompt> prompts(static_cast<size_t>(streams));
  for (auto& p : prompts) {
    p.text = "x";
    p.output_len = tokens;
  }
  SteadyClock clock;
  const double cpu0 = CpuSeconds();
  auto run = b::RunBenchmark(o, prompts, clock);
  Outcome out{};
  out.cpu_s = CpuSeconds() - cpu0;
  out.wall_s = run->end_s - run->start_s;
  for (const b::RequestRecord& r : run->records) {
    if (!r.success) {
      if (out.failed++ == 0) out.first_error = r.error;
      continue;
    }
    out.tokens += r.output_len;
    std::stringstream sent(r.generated_text);
    size_t i = 0;
    for (std::string t; std::getline(sent, t, ';') && i < r.chunk_s.size(); ++i) {
      out.delays_ms.push_back((r.chunk_s[i] - std::stod(t)) * 1e3);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sse_client_bench: the load generator's client cost"};
  int streams = 256, tokens = 200;
  double gap_ms = 20;
  app.add_option("--streams", streams, "concurrent streams");
  app.add_option("--tokens", tokens, "tokens per stream");
  app.add_option("--gap-ms", gap_ms, "chunk spacing per stream in the latency run");
  CLI11_PARSE(app, argc, argv);

  for (double gap : {0.0, gap_ms}) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t child = fork();
    if (child == 0) ServeFake(fds[1], gap);
    int port = 0;
    if (read(fds[0], &port, sizeof(port)) != sizeof(port) || port <= 0) return 1;
    close(fds[0]);
    close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // listen() after bind
    const Outcome o = Run(port, streams, tokens);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    const double p50 = b::Percentile(o.delays_ms, 50), p99 = b::Percentile(o.delays_ms, 99);
    const double mx =
        o.delays_ms.empty() ? 0 : *std::max_element(o.delays_ms.begin(), o.delays_ms.end());
    std::printf(
        "%s: %d streams x %d tokens, %d failed: %lld tokens in %.3f s wall (%.0f tok/s), client "
        "CPU %.3f s = %.0f tokens per CPU-second; chunk delay p50 %.3f ms, p99 %.3f ms, max %.3f "
        "ms\n",
        gap == 0 ? "back-to-back" : "paced", streams, tokens, o.failed,
        static_cast<long long>(o.tokens), o.wall_s, o.tokens / o.wall_s, o.cpu_s,
        o.cpu_s > 0 ? o.tokens / o.cpu_s : 0.0, p50, p99, mx);
    if (o.failed > 0) std::printf("  first failure: %s\n", o.first_error.c_str());
  }
  return 0;
}
