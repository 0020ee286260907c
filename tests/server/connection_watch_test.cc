// ConnectionWatch finds the socket of the request being handled and tells when its client closed.
#include "server/connection_watch.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/server/raw_http_client.h"

namespace tinyserve {
namespace {

TEST(ConnectionWatchTest, FindsTheSocketAndSeesThePeerClose) {
  httplib::Server server;
  std::atomic<bool> found{false};
  std::atomic<bool> open_at_first{false};
  std::atomic<bool> saw_close{false};
  server.Post("/wait", [&](const httplib::Request& req, httplib::Response& res) {
    const ConnectionWatch watch = ConnectionWatch::ForRequest(req);
    found = watch.found();
    open_at_first = !watch.IsPeerClosed();
    for (int i = 0; i < 2000 && !saw_close; ++i) {
      saw_close = watch.IsPeerClosed();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    res.set_content("bye", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread thread([&] { server.listen_after_bind(); });
  {
    testing::RawClient client(port);
    client.Post("/wait", "{}");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }  // closes the connection
  for (int i = 0; i < 1000 && !saw_close; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  server.stop();
  thread.join();
  EXPECT_TRUE(found);
  EXPECT_TRUE(open_at_first);
  EXPECT_TRUE(saw_close);
}

TEST(ConnectionWatchTest, AWatchThatFoundNothingNeverReportsAClose) {
  const ConnectionWatch watch;
  EXPECT_FALSE(watch.found());
  EXPECT_FALSE(watch.IsPeerClosed());
}

}  // namespace
}  // namespace tinyserve
