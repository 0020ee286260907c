// LiveRequestMap against std::unordered_map under random inserts and erases (backward-shift
// deletion and growth are the parts that can go wrong).
#include "metrics/live_request_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace tinyserve {
namespace {

TEST(LiveRequestMapTest, MatchesUnorderedMapUnderRandomOperations) {
  // Keys as the engine makes them (counting from 0), sparse ones, and the largest storable.
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 4000; ++k) keys.push_back(k);
  for (uint64_t k = 1; k <= 999; ++k) keys.push_back(k * 0x100000001ull);
  keys.push_back(LiveRequestMap<int64_t>::kEmpty - 1);
  LiveRequestMap<int64_t> map(/*initial_capacity=*/8);
  std::unordered_map<uint64_t, int64_t> ref;
  std::mt19937 rng(7);
  for (int op = 0; op < 200000; ++op) {
    const uint64_t key = keys[rng() % keys.size()];
    if (rng() % 3 == 0) {
      map.Erase(key);
      ref.erase(key);
    } else {
      map.FindOrInsert(key) += op;
      ref[key] += op;
    }
    if (op % 1000 == 0) {
      ASSERT_EQ(map.size(), ref.size());
      for (const uint64_t k : keys) {
        const int64_t* v = map.Find(k);
        auto it = ref.find(k);
        ASSERT_EQ(v != nullptr, it != ref.end());
        if (v != nullptr) {
          ASSERT_EQ(*v, it->second);
        }
      }
    }
  }
}

TEST(LiveRequestMapTest, ErasedEntriesComeBackDefault) {
  const uint64_t a = 0, b = 1;
  LiveRequestMap<int> map;
  map.FindOrInsert(a) = 5;
  map.FindOrInsert(b) = 6;
  map.Erase(a);
  map.Erase(a);  // absent: no-op
  EXPECT_EQ(map.Find(a), nullptr);
  EXPECT_EQ(*map.Find(b), 6);
  EXPECT_EQ(map.FindOrInsert(a), 0);
  EXPECT_EQ(map.size(), 2u);
}

}  // namespace
}  // namespace tinyserve
