#include "server/connection_watch.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tinyserve {
namespace {

// The numeric host and port of `addr`, as httplib formats them (getnameinfo, NI_NUMERICHOST).
bool Endpoint(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof(buf), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return false;
  }
  *host = buf;
  if (addr.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  return true;
}

// "remote host|remote port|local host|local port": one TCP connection, as httplib names it.
std::string Key(const std::string& remote_host, int remote_port, const std::string& local_host,
                int local_port) {
  return remote_host + "|" + std::to_string(remote_port) + "|" + local_host + "|" +
         std::to_string(local_port);
}

// The key of stream socket `fd`, or "" if it is not a connected stream socket.
std::string SocketKey(int fd) {
  int type = 0;
  socklen_t type_len = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM) {
    return "";
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string remote_host, local_host;
  int remote_port = -1, local_port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      !Endpoint(addr, len, &remote_host, &remote_port)) {
    return "";
  }
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      !Endpoint(addr, len, &local_host, &local_port)) {
    return "";
  }
  return Key(remote_host, remote_port, local_host, local_port);
}

// Every connected stream socket of the process by key, refreshed by one scan of /proc/self/fd
// when a lookup misses (or finds a descriptor that now belongs to another connection). A burst of
// N connections costs a few scans, not N: each scan indexes every connection accepted so far.
class SocketIndex {
 public:
  static SocketIndex& Get() {
    static SocketIndex* index = new SocketIndex();  // never destroyed: handlers may outlive main
    return *index;
  }

  int Find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_key_.find(key); it != by_key_.end() && SocketKey(it->second) == key) {
      return it->second;
    }
    Rescan();
    auto it = by_key_.find(key);
    return it == by_key_.end() ? -1 : it->second;
  }

 private:
  void Rescan() {
    by_key_.clear();
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) return;
    const int dir_fd = dirfd(dir);
    while (const dirent* entry = readdir(dir)) {
      char* end = nullptr;
      const long fd = std::strtol(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
      std::string key = SocketKey(static_cast<int>(fd));
      if (!key.empty()) by_key_[std::move(key)] = static_cast<int>(fd);
    }
    closedir(dir);
  }

  std::mutex mu_;
  std::unordered_map<std::string, int> by_key_;  // guarded by mu_
};

}  // namespace

ConnectionWatch ConnectionWatch::ForRequest(const httplib::Request& req) {
  if (req.remote_port < 0 || req.local_port < 0 || req.local_addr.empty()) {
    return ConnectionWatch();
  }
  return ConnectionWatch(SocketIndex::Get().Find(
                             Key(req.remote_addr, req.remote_port, req.local_addr, req.local_port)),
                         req.version == "HTTP/1.1");
}

bool ConnectionWatch::IsPeerClosed() const {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

bool ConnectionWatch::IsClientGone() {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return true;  // reset, or both sides shut
  if ((p.revents & POLLRDHUP) == 0) return false;
  if (!may_probe_) return true;
  if (probed_) return false;  // half-closed: it took the probe without a reset
  probed_ = true;
  static constexpr char kProbe[] = "HTTP/1.1 100 Continue\r\n\r\n";
  return send(fd_, kProbe, sizeof(kProbe) - 1, MSG_NOSIGNAL) !=
         static_cast<ssize_t>(sizeof(kProbe) - 1);
}

}  // namespace tinyserve
