// Helpers of the integration tests that run real programs (tinyserve, Prometheus, HAProxy) on
// loopback: finding an executable, a free port, reading a log file, and ChildProcess, a child whose
// lifetime is the test's. Header-only, test code only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tinyserve::testing_util {

inline std::string ReadLogFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `name` in a directory of $PATH, then in /usr/sbin, /sbin and /usr/local/sbin (haproxy lives
// there); "" if absent.
inline std::string FindBinary(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs_text = path != nullptr ? path : "/usr/bin:/bin";
  dirs_text += ":/usr/sbin:/sbin:/usr/local/sbin";
  std::stringstream dirs(dirs_text);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A port that was free on 127.0.0.1 a moment ago (for programs that cannot report a port 0);
// 0 if none could be found.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// A child process with stdout and stderr going to `log_path` and `env` added to its environment;
// killed (SIGKILL) if the test process dies, and stopped (SIGTERM, then SIGKILL after 10 s) and
// reaped when this object goes away.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args, const std::string& log_path,
               const std::vector<std::pair<std::string, std::string>>& env = {}) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Stop(); }

  bool started() const { return pid_ > 0; }
  // True while the process has not exited (reaps it if it has).
  bool Running() {
    if (pid_ <= 0) return false;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 1000; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace tinyserve::testing_util
