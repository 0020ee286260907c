#include "server/connection_watch.h"

#include <poll.h>
#include <sys/socket.h>

namespace tinyserve {

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
