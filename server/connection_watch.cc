#include "server/connection_watch.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

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

bool Matches(int fd, const httplib::Request& req) {
  int type = 0;
  socklen_t type_len = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM) {
    return false;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      !Endpoint(addr, len, &host, &port) || port != req.remote_port || host != req.remote_addr) {
    return false;
  }
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      !Endpoint(addr, len, &host, &port) || port != req.local_port) {
    return false;
  }
  return req.local_addr.empty() || host == req.local_addr;
}

}  // namespace

ConnectionWatch ConnectionWatch::ForRequest(const httplib::Request& req) {
  if (req.remote_port < 0 || req.local_port < 0) return ConnectionWatch();
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return ConnectionWatch();
  const int dir_fd = dirfd(dir);
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    if (Matches(static_cast<int>(fd), req)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return ConnectionWatch(found);
}

bool ConnectionWatch::IsPeerClosed() const {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace tinyserve
