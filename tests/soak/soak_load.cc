// soak_load: mixed HTTP load against a running tinyserve server, for scripts/soak.sh.
//
//   soak_load --port PORT --duration SECONDS [--concurrency N] [--seed S]
//
// N client threads loop until the duration is over, each request one of (by weight):
//   30 streaming completion, read to `data: [DONE]`         -> ok iff 200, [DONE], no error event
//   20 non-streaming completion                              -> ok iff 200 and one choice
//   10 streaming chat completion                             -> ok iff 200 and [DONE]
//   15 streaming completion whose client leaves after a random number of chunks (0 = at once)
//    5 non-streaming completion whose client leaves after 0-50 ms
//   20 bad request (malformed JSON, bad field, unknown model, unknown route) -> ok iff its 4xx
// Prompts and lengths vary (some long enough to preempt on a small KV cache). At the end it
// prints one summary line per kind and "unexpected N"; the exit status is 1 iff any answer was
// unexpected (a wrong status, a broken stream, a transport error), else 0.
//
//   soak_load --port PORT --check-idle
//
// checks the server after the load: /health answers 200, and within 5 s /metrics shows 0 used KV
// blocks and 0 running and 0 waiting requests. Prints what it saw; exit status 0 iff all hold.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;
using SteadyTime = std::chrono::steady_clock;

enum Kind { kStream, kPlain, kChat, kStreamLeave, kPlainLeave, kBad, kNumKinds };
constexpr std::array<int, kNumKinds> kWeights = {30, 20, 10, 15, 5, 20};
constexpr std::array<const char*, kNumKinds> kNames = {
    "stream", "non-stream", "chat-stream", "stream-disconnect", "non-stream-disconnect", "bad"};

struct Counts {
  std::array<std::atomic<int64_t>, kNumKinds> sent{};
  std::array<std::atomic<int64_t>, kNumKinds> unexpected{};
};

std::mutex g_log_mu;
void LogUnexpected(Kind kind, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  std::fprintf(stderr, "soak_load: unexpected %s: %s\n", kNames[kind], what.substr(0, 300).c_str());
}

json CompletionBody(std::mt19937_64& rng, bool stream) {
  static const char* const kPrompts[] = {"Once upon a time", "Lily had a big red ball", "The cat",
                                         "One day, Tom went to the park with his dog and",
                                         "Sara and Ben"};
  json body = {{"prompt", kPrompts[rng() % 5]},
               {"max_tokens", 4 + static_cast<int>(rng() % 120)},
               {"temperature", (rng() % 2) ? 0.0 : 0.8},
               {"stream", stream}};
  if (rng() % 4 == 0) body["ignore_eos"] = true;
  if (rng() % 8 == 0) body["n"] = 2;
  if (rng() % 8 == 0) body["stop"] = json::array({" the"});
  return body;
}

// Sends a raw HTTP POST and closes the connection after `chunks` SSE chunks (or at once with 0),
// or after `delay_ms` when `chunks` < 0. Returns false iff the connection could not be made.
bool PostAndLeave(int port, const std::string& path, const std::string& body, int chunks,
                  int delay_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return false;
  }
  const std::string req = "POST " + path +
                          " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  bool ok = write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size());
  if (ok && chunks < 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  std::string got;
  char buf[4096];
  int seen = 0;
  while (ok && seen < chunks) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;  // the stream ended first
    got.append(buf, static_cast<size_t>(n));
    seen = 0;
    for (size_t p = got.find("data: "); p != std::string::npos; p = got.find("data: ", p + 1)) {
      ++seen;
    }
  }
  close(fd);
  return ok;
}

// Returns "" iff `body` is a complete SSE stream ending in [DONE] without an error event.
std::string CheckStream(const std::string& body) {
  if (body.find("\"error\"") != std::string::npos) return "error event: " + body;
  const std::string done = "data: [DONE]\n\n";
  if (body.size() < done.size() || body.compare(body.size() - done.size(), done.size(), done)) {
    return "no [DONE]: " + body;
  }
  return "";
}

void RunOne(int port, Kind kind, std::mt19937_64& rng, Counts& counts) {
  counts.sent[kind].fetch_add(1);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(60, 0);
  auto fail = [&](const std::string& what) {
    counts.unexpected[kind].fetch_add(1);
    LogUnexpected(kind, what);
  };
  auto post = [&](const std::string& path, const std::string& body) {
    return client.Post(path, body, "application/json");
  };
  switch (kind) {
    case kStream: {
      auto res = post("/v1/completions", CompletionBody(rng, true).dump());
      if (!res) return fail("transport " + httplib::to_string(res.error()));
      if (res->status != 200) return fail(std::to_string(res->status) + " " + res->body);
      if (std::string e = CheckStream(res->body); !e.empty()) return fail(e);
      return;
    }
    case kPlain: {
      auto res = post("/v1/completions", CompletionBody(rng, false).dump());
      if (!res) return fail("transport " + httplib::to_string(res.error()));
      if (res->status != 200) return fail(std::to_string(res->status) + " " + res->body);
      const json j = json::parse(res->body, nullptr, false);
      if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) {
        return fail("bad body " + res->body);
      }
      return;
    }
    case kChat: {
      const json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                         {"max_tokens", 8 + static_cast<int>(rng() % 60)},
                         {"stream", true}};
      auto res = post("/v1/chat/completions", body.dump());
      if (!res) return fail("transport " + httplib::to_string(res.error()));
      if (res->status != 200) return fail(std::to_string(res->status) + " " + res->body);
      if (std::string e = CheckStream(res->body); !e.empty()) return fail(e);
      return;
    }
    case kStreamLeave: {
      json body = CompletionBody(rng, true);
      body["max_tokens"] = 100;
      body["ignore_eos"] = true;
      if (!PostAndLeave(port, "/v1/completions", body.dump(), static_cast<int>(rng() % 40), 0)) {
        fail("cannot connect");
      }
      return;
    }
    case kPlainLeave: {
      json body = CompletionBody(rng, false);
      body["max_tokens"] = 200;
      body["ignore_eos"] = true;
      if (!PostAndLeave(port, "/v1/completions", body.dump(), -1, static_cast<int>(rng() % 50))) {
        fail("cannot connect");
      }
      return;
    }
    case kBad: {
      struct Bad {
        const char* path;
        const char* body;
        int status;
      };
      static const Bad kBads[] = {
          {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": ", 400},
          {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": -3}", 400},
          {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": \"hot\"}", 400},
          {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 100000000}", 400},
          {"/v1/completions", "{\"prompt\": [99999999]}", 400},
          {"/v1/completions", "{\"model\": \"nope\", \"prompt\": \"x\"}", 404},
          {"/v1/chat/completions", "{\"messages\": [{\"role\": \"pirate\"}]}", 400},
          {"/v1/chat/completions", "[1, 2, 3]", 400},
          {"/v1/nothing", "{}", 404},
      };
      const Bad& bad = kBads[rng() % (sizeof(kBads) / sizeof(kBads[0]))];
      auto res = post(bad.path, bad.body);
      if (!res) return fail("transport " + httplib::to_string(res.error()));
      if (res->status != bad.status) {
        return fail(std::string(bad.body) + " -> " + std::to_string(res->status) + " " + res->body);
      }
      const json j = json::parse(res->body, nullptr, false);
      if (j.is_discarded() || !j.contains("error")) return fail("no error JSON: " + res->body);
      return;
    }
    case kNumKinds:
      break;
  }
}

// The value of the first series of `name` (with `{`) whose line contains `label`; -1 if none.
double MetricValue(const std::string& text, const std::string& name, const std::string& label) {
  size_t pos = 0;
  while ((pos = text.find(name + "{", pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos);
    const std::string line = text.substr(pos, eol - pos);
    if ((pos == 0 || text[pos - 1] == '\n') && line.find(label) != std::string::npos) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos = eol;
  }
  return -1;
}

int CheckIdle(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  auto health = client.Get("/health");
  if (!health || health->status != 200) {
    std::printf("soak_load: /health is %s\n",
                health ? std::to_string(health->status).c_str() : "unreachable");
    return 1;
  }
  double used = -1, running = -1, waiting = -1;
  for (int i = 0; i < 50; ++i) {
    auto metrics = client.Get("/metrics");
    if (metrics && metrics->status == 200) {
      used = MetricValue(metrics->body, "tinyserve_kv_cache_blocks", "state=\"used\"");
      running = MetricValue(metrics->body, "vllm:num_requests_running", "");
      waiting = MetricValue(metrics->body, "vllm:num_requests_waiting", "");
      if (used == 0 && running == 0 && waiting == 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf(
      "soak_load: /health 200; idle state: used KV blocks %.0f, running %.0f, waiting %.0f\n", used,
      running, waiting);
  return used == 0 && running == 0 && waiting == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Mixed HTTP load against a tinyserve server (scripts/soak.sh)");
  int port = 8000;
  double duration_s = 60;
  int concurrency = 16;
  uint64_t seed = 1;
  bool check_idle = false;
  app.add_option("--port", port, "the server's port")->required();
  app.add_flag("--check-idle", check_idle, "check /health and that the engine is idle, then exit");
  app.add_option("--duration", duration_s, "seconds of load");
  app.add_option("--concurrency", concurrency, "client threads")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "random seed");
  CLI11_PARSE(app, argc, argv);
  if (check_idle) return CheckIdle(port);

  Counts counts;
  const auto deadline = SteadyTime::now() + std::chrono::duration<double>(duration_s);
  int total_weight = 0;
  for (int w : kWeights) total_weight += w;
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(t));
      while (SteadyTime::now() < deadline) {
        int pick = static_cast<int>(rng() % static_cast<uint64_t>(total_weight));
        int kind = 0;
        while (pick >= kWeights[static_cast<size_t>(kind)]) pick -= kWeights[kind++];
        RunOne(port, static_cast<Kind>(kind), rng, counts);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int64_t sent = 0;
  int64_t unexpected = 0;
  for (int k = 0; k < kNumKinds; ++k) {
    std::printf("soak_load: %-22s sent %8lld unexpected %lld\n", kNames[k],
                static_cast<long long>(counts.sent[k].load()),
                static_cast<long long>(counts.unexpected[k].load()));
    sent += counts.sent[k].load();
    unexpected += counts.unexpected[k].load();
  }
  std::printf("soak_load: total %lld requests in %.0f s, unexpected %lld\n",
              static_cast<long long>(sent), duration_s, static_cast<long long>(unexpected));
  return unexpected == 0 ? 0 : 1;
}
