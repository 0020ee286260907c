// The real `tinyserve serve` binary on a random loopback port with the stories260K model: /health
// and /metrics answer, SIGTERM and SIGINT stop it with exit code 0, and the trace file it wrote
// is valid JSON. (Load through the OpenAI API, and the real-Prometheus scrape, come with it.)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include <vector>

namespace tinyserve {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ServeBinaryTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
#ifndef TINYSERVE_BINARY
    GTEST_SKIP() << "built without the tinyserve binary";
#else
    binary_ = TINYSERVE_BINARY;
    const std::string model = std::string(TINYSERVE_SHARED_DIR) + "/models/stories260K.bin";
    if (!std::filesystem::exists(binary_) || !std::filesystem::exists(model)) {
      GTEST_SKIP() << "needs " << binary_ << " and " << model;
    }
    const std::string dir = ::testing::TempDir();
    const std::string stem =
        dir + "/tinyserve_serve_" + std::to_string(getpid()) + "_" + std::to_string(GetParam());
    log_path_ = stem + ".log";
    trace_path_ = stem + ".trace.json";
    std::filesystem::remove(log_path_);
    std::filesystem::remove(trace_path_);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      dup2(fd, 1);
      execl(binary_.c_str(), binary_.c_str(), "serve", "--model", model.c_str(), "--host",
            "127.0.0.1", "--port", "0", "--served-model-name", "tiny", "--trace-file",
            trace_path_.c_str(), "--threads", "1", static_cast<char*>(nullptr));
      _exit(127);
    }
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
  // Sends `sig` and returns the exit status (-1 if it did not exit normally within 10 s).
  int StopWith(int sig) {
    kill(pid_, sig);
    for (int i = 0; i < 1000; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  std::string binary_, log_path_, trace_path_;
  pid_t pid_ = -1;
  int port_ = 0;
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

INSTANTIATE_TEST_SUITE_P(Signals, ServeBinaryTest, ::testing::Values(SIGTERM, SIGINT),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return param_info.param == SIGTERM ? std::string("SIGTERM")
                                                              : std::string("SIGINT");
                         });

}  // namespace
}  // namespace tinyserve
