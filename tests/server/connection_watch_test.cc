// ConnectionWatch tells a handler when its client closed, and tells a half-close apart.
#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace tinyserve {
namespace {

// A connected loopback TCP pair: client() and server() descriptors, both closed at the end.
class SocketPair {
 public:
  SocketPair() {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    client_ = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    server_ = accept(listener, nullptr, nullptr);
    close(listener);
  }
  ~SocketPair() {
    CloseClient();
    close(server_);
  }
  int client() const { return client_; }
  int server() const { return server_; }
  void CloseClient() {
    if (client_ >= 0) close(client_);
    client_ = -1;
  }

 private:
  int client_ = -1;
  int server_ = -1;
};

HttpRequest RequestOn(int fd) {
  HttpRequest req;
  req.version = "HTTP/1.1";
  req.socket_fd = fd;
  return req;
}

// Polls `gone` for up to a second.
template <typename F>
bool Eventually(F gone) {
  for (int i = 0; i < 1000; ++i) {
    if (gone()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(ConnectionWatchTest, SeesThePeerClose) {
  SocketPair pair;
  const ConnectionWatch watch = ConnectionWatch::ForRequest(RequestOn(pair.server()));
  EXPECT_TRUE(watch.found());
  EXPECT_FALSE(watch.IsPeerClosed());
  pair.CloseClient();
  EXPECT_TRUE(Eventually([&] { return watch.IsPeerClosed(); }));
}

TEST(ConnectionWatchTest, AHalfClosedClientIsNotGone) {
  SocketPair pair;
  ConnectionWatch watch = ConnectionWatch::ForRequest(RequestOn(pair.server()));
  EXPECT_FALSE(watch.IsClientGone());
  shutdown(pair.client(), SHUT_WR);  // its request sent, still reading
  EXPECT_TRUE(Eventually([&] { return watch.IsPeerClosed(); }));
  EXPECT_FALSE(watch.IsClientGone());  // sends the 100 Continue probe
  char buf[64] = {};
  const ssize_t n = recv(pair.client(), buf, sizeof(buf) - 1, 0);
  EXPECT_EQ(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0), "HTTP/1.1 100 Continue\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(watch.IsClientGone());
}

// A client that closed answers the probe with a reset.
TEST(ConnectionWatchTest, AClosedClientIsGoneAfterTheProbe) {
  SocketPair pair;
  ConnectionWatch watch = ConnectionWatch::ForRequest(RequestOn(pair.server()));
  pair.CloseClient();
  EXPECT_TRUE(Eventually([&] { return watch.IsPeerClosed(); }));
  EXPECT_TRUE(Eventually([&] { return watch.IsClientGone(); }));
}

// An HTTP/1.0 client may get no interim response: its FIN counts as gone.
TEST(ConnectionWatchTest, AnHttp10ClientsFinIsGone) {
  SocketPair pair;
  HttpRequest req = RequestOn(pair.server());
  req.version = "HTTP/1.0";
  ConnectionWatch watch = ConnectionWatch::ForRequest(req);
  EXPECT_FALSE(watch.IsClientGone());
  shutdown(pair.client(), SHUT_WR);
  EXPECT_TRUE(Eventually([&] { return watch.IsClientGone(); }));
}

TEST(ConnectionWatchTest, AWatchThatFoundNothingNeverReportsAClose) {
  ConnectionWatch watch;
  EXPECT_FALSE(watch.found());
  EXPECT_FALSE(watch.IsPeerClosed());
  EXPECT_FALSE(watch.IsClientGone());
}

}  // namespace
}  // namespace tinyserve
