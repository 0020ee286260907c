// The real `tinyserve serve` binary on a random loopback port with the stories260K model: /health
// and /metrics answer, SIGTERM and SIGINT stop it with exit code 0, and the trace file it wrote
// is valid JSON; a client trickling a request head does not hold the shutdown (issue 16); flags
// it must refuse are clear errors. (Load through the OpenAI API, and the real-Prometheus scrape,
// come with it.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/server/raw_http_client.h"

namespace tinyserve {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `tinyserve serve` with the stories260K model on a random loopback port, its output in a
// log file under the test temp folder.
class ServeProcessTest : public ::testing::Test {
 protected:
  // Starts the server with the common flags and `extra` and waits until it listens (`listen`:
  // else only starts it, e.g. for a flag it must refuse). `tag` names the log file.
  void Start(const std::vector<std::string>& extra, const std::string& tag, bool listen = true) {
#ifndef TINYSERVE_BINARY
    GTEST_SKIP() << "built without the tinyserve binary";
#else
    binary_ = TINYSERVE_BINARY;
    if (!log_path_.empty()) {  // a server started before in the same test
      std::filesystem::remove(log_path_);
      std::filesystem::remove(trace_path_);
    }
    port_ = 0;
    const std::string model = std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin";
    if (!std::filesystem::exists(binary_) || !std::filesystem::exists(model)) {
      GTEST_SKIP() << "needs " << binary_ << " and " << model;
    }
    const std::string dir = ::testing::TempDir();
    const std::string stem = dir + "/tinyserve_serve_" + std::to_string(getpid()) + "_" + tag;
    log_path_ = stem + ".log";
    trace_path_ = stem + ".trace.json";
    std::filesystem::remove(log_path_);
    std::filesystem::remove(trace_path_);
    std::vector<std::string> args = {binary_,
                                     "serve",
                                     "--model",
                                     model,
                                     "--host",
                                     "127.0.0.1",
                                     "--port",
                                     "0",
                                     "--served-model-name",
                                     "tiny",
                                     "--trace-file",
                                     trace_path_,
                                     "--threads",
                                     "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      dup2(fd, 1);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    if (!listen) return;
    // The server logs "on http://127.0.0.1:PORT" once it listens.
    const std::regex listening("on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      std::smatch m;
      const std::string log = ReadFile(log_path_);
      if (std::regex_search(log, m, listening)) port_ = std::stoi(m[1]);
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_NE(port_, 0) << "the server did not start:\n" << ReadFile(log_path_);
#endif
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    // Nothing is left in the temp folder, except the server's log and trace of a failed test.
    if (HasFailure()) {
      std::printf("server log: %s, trace: %s\n", log_path_.c_str(), trace_path_.c_str());
    } else if (!log_path_.empty()) {
      std::filesystem::remove(log_path_);
      std::filesystem::remove(trace_path_);
    }
  }
  // Waits up to `timeout_ms` for the server to exit. Returns its exit status (-1 if it did not
  // exit normally in time).
  int WaitForExit(int timeout_ms) {
    for (int i = 0; i < timeout_ms / 10; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  // Sends `sig` and returns the exit status (-1 if it did not exit normally within 10 s).
  int StopWith(int sig) {
    kill(pid_, sig);
    return WaitForExit(10'000);
  }

  std::string binary_, log_path_, trace_path_;
  pid_t pid_ = -1;
  int port_ = 0;
};

class ServeBinaryTest : public ServeProcessTest, public ::testing::WithParamInterface<int> {
 protected:
  // A grace longer than the default 10 s: under ThreadSanitizer, beside other tests, the 8 streams
  // of StreamsInFlightEndCleanlyOnSignal took 8.1-9.5 s (release: under 1 s), and a stream still
  // running when the grace is over is aborted, which is the behaviour the test rules out.
  void SetUp() override { Start({"--shutdown-timeout", "60"}, std::to_string(GetParam())); }
};

TEST_P(ServeBinaryTest, ServesHealthAndMetricsAndStopsCleanly) {
  httplib::Client client("127.0.0.1", port_);
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(metrics->body.find("vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"} 0"),
            std::string::npos);
  EXPECT_NE(metrics->body.find("num_gpu_blocks="), std::string::npos);
  // The admission and request limits it runs with: the defaults (issue 16).
  EXPECT_NE(ReadFile(log_path_).find(
                "tinyserve: limits: --max-num-queued-reqs 4096, --max-num-queued-tokens "
                "unlimited, --max-connections 2048, --max-choices-per-request 128, "
                "--max-logprobs-per-request 250000\n"),
            std::string::npos)
      << ReadFile(log_path_);

  EXPECT_EQ(StopWith(GetParam()), 0) << ReadFile(log_path_);
  const nlohmann::json trace = nlohmann::json::parse(ReadFile(trace_path_));
  EXPECT_TRUE(trace.is_array());
}

TEST_P(ServeBinaryTest, AnswersTheOpenAiApi) {
  httplib::Client client("127.0.0.1", port_);
  auto models = client.Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  EXPECT_EQ(nlohmann::json::parse(models->body)["data"][0]["id"], "tiny");
  auto done =
      client.Post("/v1/completions", R"({"model": "tiny", "prompt": "Once", "max_tokens": 3})",
                  "application/json");
  ASSERT_TRUE(done);
  ASSERT_EQ(done->status, 200) << done->body;
  EXPECT_EQ(nlohmann::json::parse(done->body)["usage"]["completion_tokens"], 3);
  EXPECT_EQ(StopWith(GetParam()), 0) << ReadFile(log_path_);
}

// Streams in flight when the signal comes finish (the grace period); ones that came after it were
// refused (503, or the connection was not accepted); none is cut off, and the exit code is 0.
TEST_P(ServeBinaryTest, StreamsInFlightEndCleanlyOnSignal) {
  const std::string body =
      R"({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true, "stream": true})";
  {
    httplib::Client client("127.0.0.1", port_);  // the listen loop is up
    auto health = client.Get("/health");
    ASSERT_TRUE(health);
  }
  std::vector<std::thread> clients;
  std::vector<std::string> bodies(8);
  std::vector<int> statuses(8, 0);
  for (size_t i = 0; i < bodies.size(); ++i) {
    clients.emplace_back([&, i] {
      httplib::Client client("127.0.0.1", port_);
      client.set_read_timeout(30, 0);
      auto res = client.Post("/v1/completions", body, "application/json");
      if (!res) {
        statuses[i] = res.error() == httplib::Error::Connection ? -1 : -2;  // -1: not accepted
        bodies[i] = httplib::to_string(res.error());
        return;
      }
      statuses[i] = res->status;
      bodies[i] = res->body;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid_, GetParam());
  for (std::thread& t : clients) t.join();
  EXPECT_GT(std::count(statuses.begin(), statuses.end(), 200), 0);
  for (size_t i = 0; i < bodies.size(); ++i) {
    if (statuses[i] == 503 || statuses[i] == -1) continue;
    ASSERT_EQ(statuses[i], 200) << i << ": " << bodies[i] << "\n" << ReadFile(log_path_);
    ASSERT_GE(bodies[i].size(), 14u);
    EXPECT_EQ(bodies[i].substr(bodies[i].size() - 14), "data: [DONE]\n\n") << i;
    EXPECT_NE(bodies[i].find("\"finish_reason\":\"length\""), std::string::npos) << i;
  }
  EXPECT_EQ(StopWith(GetParam()), 0) << ReadFile(log_path_);
}

// Issue 16: a SIGTERM never completed while a client trickled the bytes of a request head (the
// worker sat reading it, and the listen loop waited for the worker). Now the shutdown shuts the
// connections' reading sides: a clean exit (0, not the watchdog's 3) within --shutdown-timeout
// and the 2 s grace, with slack for a loaded machine.
TEST_F(ServeProcessTest, SigtermCompletesWhileAClientTricklesARequestHead) {
  Start({"--shutdown-timeout", "1"}, "trickle");
  if (HasFatalFailure() || IsSkipped()) return;
  httplib::Client client("127.0.0.1", port_);
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  testing::RawClient trickler(port_);
  std::atomic<bool> stop{false};
  std::atomic<int> num_sent{0};
  std::thread trickle([&] {
    // 240 bytes at 5 a second: about 48 s, longer than anything the test waits for.
    const std::string head =
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + std::string(200, 'a') + "\r\n\r\n";
    for (char c : head) {
      if (stop.load() || !trickler.Send(std::string(1, c))) return;
      num_sent.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));  // a worker is reading the head
  kill(pid_, SIGTERM);
  const int status = WaitForExit(1000 * (1 + 2 + 10));
  const int sent_by_exit = num_sent.load();
  stop.store(true);
  trickle.join();
  EXPECT_EQ(status, 0) << ReadFile(log_path_);
  EXPECT_GE(sent_by_exit, 5);  // it was trickling when the signal came
  EXPECT_LT(sent_by_exit, 200);
  EXPECT_EQ(ReadFile(log_path_).find("the shutdown did not finish"), std::string::npos);
}

// A stream still running when --shutdown-timeout (0 here) is over is aborted (or has just
// finished): it ends with [DONE], and the exit code is 0.
TEST_F(ServeProcessTest, AStreamPastTheShutdownTimeoutEndsAndTheExitCodeIs0) {
  Start({"--shutdown-timeout", "0"}, "abort");
  if (HasFatalFailure() || IsSkipped()) return;
  testing::RawClient stream(port_);
  stream.Post("/v1/completions",
              R"({"prompt": "Once upon a time", "max_tokens": 480, "ignore_eos": true,)"
              R"( "stream": true})");
  ASSERT_TRUE(stream.ReadChunks(1)) << stream.received();
  kill(pid_, SIGTERM);
  ASSERT_TRUE(stream.ReadUntil("data: [DONE]")) << stream.received();
  const std::string& got = stream.received();
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_TRUE(got.find("\"finish_reason\":\"abort\"") != std::string::npos ||
              got.find("\"finish_reason\":\"length\"") != std::string::npos)
      << got;
  EXPECT_EQ(WaitForExit(1000 * (0 + 2 + 10)), 0) << ReadFile(log_path_);
}

// A shutdown that cannot finish (the engine thread wedged inside a step: --fault-kind hang on the
// first executor call) is ended by the watchdog --shutdown-timeout + 2 s after the signal, with
// exit status 3 and a line on stderr, whatever the threads are doing.
TEST_F(ServeProcessTest, AWedgedEngineIsEndedByTheWatchdogWithStatus3) {
  Start({"--shutdown-timeout", "1", "--fault-kind", "hang", "--fault-at-call", "1"}, "wedged");
  if (HasFatalFailure() || IsSkipped()) return;
  testing::RawClient request(port_);
  request.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 4})");
  // Admitted (the request is in flight), then taken by the engine within a step's time.
  httplib::Client client("127.0.0.1", port_);
  bool admitted = false;
  for (int i = 0; i < 500 && !admitted; ++i) {
    auto load = client.Get("/load");
    admitted =
        load && nlohmann::json::parse(load->body, nullptr, false).value("server_load", 0) == 1;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(admitted) << ReadFile(log_path_);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid_, SIGTERM);
  EXPECT_EQ(WaitForExit(1000 * (1 + 2 + 10)), 3) << ReadFile(log_path_);
  EXPECT_NE(ReadFile(log_path_).find("tinyserve: the shutdown did not finish within 3.0 s "
                                     "(--shutdown-timeout + 2 s): exiting now with status 3"),
            std::string::npos)
      << ReadFile(log_path_);
}

// --overlap-grammar-masks auto|on|off (app/engine_flags.h): each serves; another value is a clear
// error before anything loads.
TEST_F(ServeProcessTest, OverlapGrammarMasksTakesAutoOnOrOff) {
  Start({"--overlap-grammar-masks", "sometimes"}, "overlap_bad", /*listen=*/false);
  if (HasFatalFailure() || IsSkipped()) return;
  EXPECT_NE(WaitForExit(20'000), 0);
  const std::string log = ReadFile(log_path_);
  EXPECT_NE(log.find("--overlap-grammar-masks: sometimes not in {auto,on,off}"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("on http://"), std::string::npos) << log;
  for (const char* value : {"auto", "on", "off"}) {
    Start({"--overlap-grammar-masks", value}, std::string("overlap_") + value);
    if (HasFatalFailure()) return;
    httplib::Client client("127.0.0.1", port_);
    auto health = client.Get("/health");
    ASSERT_TRUE(health) << value;
    EXPECT_EQ(health->status, 200) << value;
    EXPECT_EQ(StopWith(SIGTERM), 0) << value << ": " << ReadFile(log_path_);
  }
}

// --kv-cache-dtype (vLLM's flag) on the CPU: auto serves an fp32 cache and bfloat16 a bf16 one,
// each reported in vllm:cache_config_info as the dtype held (not the flag's "auto"), and a
// completion works on both; fp8 (CUDA only), fp8_e5m2 (not implemented) and an unknown value stop
// before listening, saying why.
TEST_F(ServeProcessTest, KvCacheDtypeIsReportedAndRefusedWhereItCannotBeHad) {
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"fp8",
       "--kv-cache-dtype fp8 needs --device cuda; the CPU backend's cache is float32 or "
       "bfloat16"},
      {"fp8_e5m2", "--kv-cache-dtype fp8_e5m2 is not implemented; fp8 (fp8_e4m3) is"},
      {"int3", "--kv-cache-dtype must be auto, bfloat16, float32, fp8 or fp8_e4m3, got 'int3'"}};
  for (const auto& [value, message] : refused) {
    Start({"--device", "cpu", "--kv-cache-dtype", value}, "kv_dtype_" + value, /*listen=*/false);
    if (HasFatalFailure() || IsSkipped()) return;
    EXPECT_NE(WaitForExit(20'000), 0) << value;
    const std::string log = ReadFile(log_path_);
    EXPECT_NE(log.find(message), std::string::npos) << log;
    EXPECT_EQ(log.find("on http://"), std::string::npos) << log;
  }
  for (const auto& [value, held] : std::vector<std::pair<std::string, std::string>>{
           {"auto", "float32"}, {"bfloat16", "bfloat16"}}) {
    // The configured memory fraction is a label too (vLLM's CacheConfig fields), as Python writes
    // a float.
    const std::string utilization = value == "auto" ? "0.9" : "0.85";
    std::vector<std::string> args = {"--device", "cpu", "--kv-cache-dtype", value};
    if (value != "auto") args.insert(args.end(), {"--gpu-memory-utilization", utilization});
    Start(args, "kv_dtype_" + value);
    if (HasFatalFailure()) return;
    httplib::Client client("127.0.0.1", port_);
    auto metrics = client.Get("/metrics");
    ASSERT_TRUE(metrics) << value;
    EXPECT_NE(metrics->body.find("cache_dtype=\"" + held + "\""), std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("gpu_memory_utilization=\"" + utilization + "\""),
              std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("calculate_kv_scales=\"False\""), std::string::npos)
        << metrics->body;
    auto done = client.Post("/v1/completions",
                            R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})",
                            "application/json");
    ASSERT_TRUE(done) << value;
    EXPECT_EQ(done->status, 200) << value << ": " << done->body;
    EXPECT_EQ(StopWith(SIGTERM), 0) << ReadFile(log_path_);
  }
}

INSTANTIATE_TEST_SUITE_P(Signals, ServeBinaryTest, ::testing::Values(SIGTERM, SIGINT),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return param_info.param == SIGTERM ? std::string("SIGTERM")
                                                              : std::string("SIGINT");
                         });

}  // namespace
}  // namespace tinyserve
