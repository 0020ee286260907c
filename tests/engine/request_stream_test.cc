#include "engine/request_stream.h"

#include <chrono>
#include <thread>

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

}  // namespace
}  // namespace tinyserve
