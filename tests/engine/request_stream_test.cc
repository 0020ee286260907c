#include "engine/request_stream.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tinyserve {
namespace {

TEST(RequestStreamTest, NextTimesOutWhenNothingIsPending) {
  RequestStream stream("r");
  RequestOutput out;
  EXPECT_FALSE(stream.TryNext(&out));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(stream.Next(&out, 0.05));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(40));
  EXPECT_TRUE(out.empty());
}

TEST(RequestStreamTest, DeltasHoldEverythingSinceTheLastCallInOrder) {
  RequestStream stream("r");
  stream.PushEvent({EventType::kQueued, 1.0, 0, FinishReason::kNone});
  stream.PushToken(7, 2.0, nullptr);
  stream.PushToken(8, 3.0, nullptr);
  RequestOutput out;
  ASSERT_TRUE(stream.TryNext(&out));
  EXPECT_EQ(out.token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(out.token_ts, (std::vector<double>{2.0, 3.0}));
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_FALSE(out.finished);
  EXPECT_FALSE(stream.TryNext(&out));  // nothing new
  stream.PushToken(9, 4.0, nullptr);
  stream.Finish({EventType::kFinished, 4.0, 0, FinishReason::kLength}, std::nullopt, "");
  ASSERT_TRUE(stream.TryNext(&out));
  EXPECT_EQ(out.token_ids, (std::vector<int32_t>{9}));
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(stream.is_done());
  EXPECT_FALSE(stream.Next(&out, 10.0));  // done: returns at once
}

TEST(RequestStreamTest, NextWakesWhenTheProducerPushes) {
  RequestStream stream("r");
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stream.PushToken(5, 1.0, nullptr);
    stream.Finish({EventType::kFinished, 1.0, 0, FinishReason::kStop}, 5, "");
  });
  RequestOutput all;
  EXPECT_TRUE(stream.WaitForFinish(&all, 10.0));
  producer.join();
  EXPECT_EQ(all.token_ids, (std::vector<int32_t>{5}));
  EXPECT_EQ(all.finish_reason, FinishReason::kStop);
  EXPECT_EQ(all.stop_token_id, 5);
}

// Logs its calls as "wake <name>" / "flush <name>".
class LoggingWaker final : public StreamWaker {
 public:
  LoggingWaker(std::string name, std::vector<std::string>* log)
      : name_(std::move(name)), log_(log) {}
  void Wake() override { log_->push_back("wake " + name_); }
  void Flush() override { log_->push_back("flush " + name_); }

 private:
  const std::string name_;
  std::vector<std::string>* const log_;
};

TEST(RequestStreamTest, WakersAreWokenOnNotifyAndFlushedAfterEveryStreamOfTheBatch) {
  std::vector<std::string> log;
  RequestStream a("a");
  RequestStream b("b");
  RequestStream plain("plain");  // no waker
  RequestStream c("c");
  a.SetWaker(std::make_shared<LoggingWaker>("a", &log));
  b.SetWaker(std::make_shared<LoggingWaker>("b", &log));
  c.SetWaker(std::make_shared<LoggingWaker>("c", &log));

  a.PushToken(1, 1.0, nullptr);  // a notifying push: wake, then flush at once
  EXPECT_EQ(log, (std::vector<std::string>{"wake a", "flush a"}));
  log.clear();
  b.PushToken(2, 1.0, nullptr, /*notify=*/false);  // no call until the notify
  EXPECT_TRUE(log.empty());

  RequestStream::NotifyAll({&a, &b, &plain, &c});
  EXPECT_EQ(log, (std::vector<std::string>{"wake a", "wake b", "wake c", "flush a", "flush b",
                                           "flush c"}));
  log.clear();
  b.SetWaker(nullptr);
  RequestStream::NotifyAll({&a, &b});
  EXPECT_EQ(log, (std::vector<std::string>{"wake a", "flush a"}));
}

}  // namespace
}  // namespace tinyserve
