// ConnectionQueue alone (no sockets): accept stamps from a FakeClock, the arrival of a
// connection's first and later requests, the count of connections queued or served, and the
// refusal over max_connections.
#include "server/connection_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "base/clock.h"

namespace tinyserve {
namespace {

void WaitFor(const std::atomic<int>& value, int want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (value.load() != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(value.load(), want);
}

TEST(ConnectionQueueTest, OffThePoolARequestArrivesNow) {
  EXPECT_EQ(CurrentConnection(), nullptr);
  EXPECT_EQ(BeginRequest(3.0), 3.0);
  EXPECT_EQ(RequestArrival(4.0), 4.0);
}

TEST(ConnectionQueueTest, TheFirstRequestArrivesAtTheAcceptAndLaterOnesWhenTheyBegin) {
  FakeClock clock(5.0);
  std::atomic<int64_t> num_connections{0};
  std::atomic<int> started{0};
  std::promise<void> release_first;
  std::shared_future<void> first_released = release_first.get_future().share();
  double first_arrival = -1, second_arrival = -1, arrival_in_handler = -1, queued_arrival = -1;
  {
    ConnectionQueue queue(/*num_threads=*/1, /*max_connections=*/0, &clock, &num_connections,
                          [] { ADD_FAILURE() << "no limit, no refusal"; });
    queue.enqueue([&] {
      ASSERT_NE(CurrentConnection(), nullptr);
      EXPECT_FALSE(CurrentConnection()->rejected);
      EXPECT_EQ(CurrentConnection()->accept_ts, 5.0);
      first_arrival = BeginRequest(7.0);  // handled at 7, accepted at 5
      arrival_in_handler = RequestArrival(7.5);
      second_arrival = BeginRequest(9.0);  // a keep-alive request begun at 9
      started.fetch_add(1);
      first_released.wait();
    });
    WaitFor(started, 1);
    clock.Set(6.0);
    queue.enqueue([&] { queued_arrival = BeginRequest(clock.Now()); });  // waits for the worker
    EXPECT_EQ(num_connections.load(), 2);
    clock.Set(11.0);
    release_first.set_value();
    queue.shutdown();  // runs what is queued, then joins
  }
  EXPECT_EQ(first_arrival, 5.0);
  EXPECT_EQ(arrival_in_handler, 5.0);
  EXPECT_EQ(second_arrival, 9.0);
  EXPECT_EQ(queued_arrival, 6.0);  // its accept, not the 11.0 when a worker took it
  EXPECT_EQ(num_connections.load(), 0);
  EXPECT_EQ(CurrentConnection(), nullptr);
}

TEST(ConnectionQueueTest, OverMaxConnectionsAConnectionIsRefusedAndNotCounted) {
  FakeClock clock(1.0);
  std::atomic<int64_t> num_connections{0};
  std::atomic<int> started{0};
  std::atomic<int> num_refused{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bool refused_flag = false;
  double refused_accept = -1;
  {
    ConnectionQueue queue(/*num_threads=*/1, /*max_connections=*/1, &clock, &num_connections,
                          [&] { num_refused.fetch_add(1); });
    queue.enqueue([&] {
      started.fetch_add(1);
      released.wait();
    });
    WaitFor(started, 1);
    EXPECT_EQ(num_connections.load(), 1);
    clock.Set(2.0);
    std::atomic<int> refused_ran{0};
    queue.enqueue([&] {
      refused_flag = CurrentConnection() != nullptr && CurrentConnection()->rejected;
      refused_accept = CurrentConnection() != nullptr ? CurrentConnection()->accept_ts : -1;
      refused_ran.fetch_add(1);
    });
    // Run by a rejection thread while the only worker is still busy.
    WaitFor(refused_ran, 1);
    EXPECT_EQ(num_refused.load(), 1);
    EXPECT_EQ(num_connections.load(), 1);
    release.set_value();
  }
  EXPECT_TRUE(refused_flag);
  EXPECT_EQ(refused_accept, 2.0);
  EXPECT_EQ(num_connections.load(), 0);
}

}  // namespace
}  // namespace tinyserve
