// RawClient: a minimal HTTP/1.1 client on a plain socket, for tests that must control the
// connection itself (read part of a stream, then close it at a chosen moment).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace tinyserve::testing {

// One connection: Post() sends a request; ReadUntil()/ReadChunks() read the response as it comes.
class RawClient {
 public:
  // `receive_buffer_bytes` > 0: SO_RCVBUF before connecting (a slow reader: a small TCP window).
  explicit RawClient(int port, int receive_buffer_bytes = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer_bytes > 0) {
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof(receive_buffer_bytes));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawClient() { Close(); }

  void Post(const std::string& path, const std::string& body) {
    const std::string req = "POST " + path +
                            " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(write(fd_, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  }
  // Writes `bytes` as they are (a request head, part of a body, anything).
  // Returns false iff the connection failed before all were written (the server may close it
  // without reading everything).
  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until the server closes the connection (EOF or reset) or `idle_ms` pass without data.
  // Returns true iff the server closed it.
  bool ReadUntilClosed(int idle_ms) {
    char buf[4096];
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, idle_ms) <= 0) return false;
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) return true;
      received_.append(buf, static_cast<size_t>(n));
    }
  }
  // Reads until the response so far contains `needle`. Returns false on EOF.
  bool ReadUntil(const std::string& needle) {
    char buf[4096];
    while (received_.find(needle) == std::string::npos) {
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) return false;
      received_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  // Reads once (what has arrived, or waits for something). Returns false on EOF or an error.
  bool ReadMore() {
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n <= 0) return false;
    received_.append(buf, static_cast<size_t>(n));
    return true;
  }
  // Reads until `n` SSE data chunks have arrived. Returns false on EOF.
  bool ReadChunks(size_t n) {
    char buf[4096];
    while (CountChunks() < n) {
      const ssize_t got = read(fd_, buf, sizeof(buf));
      if (got <= 0) return false;
      received_.append(buf, static_cast<size_t>(got));
    }
    return true;
  }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  const std::string& received() const { return received_; }
  int fd() const { return fd_; }

 private:
  size_t CountChunks() const {
    size_t count = 0;
    for (size_t pos = received_.find("data: {"); pos != std::string::npos;
         pos = received_.find("data: {", pos + 1)) {
      ++count;
    }
    return count;
  }

  int fd_ = -1;
  std::string received_;
};

}  // namespace tinyserve::testing
