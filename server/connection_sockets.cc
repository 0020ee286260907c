#include "server/connection_sockets.h"

#include <dirent.h>
#include <linux/sockios.h>
#include <linux/tcp.h>  // struct tcp_info with tcpi_bytes_received (glibc's has it not)
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdlib>

namespace tinyserve {
namespace {

// The local port of `fd` if it is a connected TCP socket (it has a peer), else -1.
int ConnectedLocalPort(int fd) {
  int type = 0;
  socklen_t type_len = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM) {
    return -1;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return -1;
}

}  // namespace

std::vector<int> AcceptedSockets(int local_port) {
  std::vector<int> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  const int dir_fd = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    if (ConnectedLocalPort(static_cast<int>(fd)) == local_port) out.push_back(static_cast<int>(fd));
  }
  closedir(dir);
  return out;
}

int ShutdownAcceptedSockets(int local_port, int how) {
  int num_shut = 0;
  for (int fd : AcceptedSockets(local_port)) {
    if (ConnectedLocalPort(fd) == local_port && shutdown(fd, how) == 0) ++num_shut;
  }
  return num_shut;
}

int64_t BytesReadFromSocket(int fd) {
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) {
    return -1;
  }
  const int64_t queued = QueuedBytes(fd);
  if (queued < 0) return -1;
  return static_cast<int64_t>(info.tcpi_bytes_received) - queued;
}

int64_t QueuedBytes(int fd) {
  int queued = 0;
  return ioctl(fd, SIOCINQ, &queued) == 0 ? queued : -1;
}

}  // namespace tinyserve
