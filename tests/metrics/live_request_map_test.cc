// LiveRequestMap against std::unordered_map under random inserts and erases (backward-shift
// deletion and growth are the parts that can go wrong).
#include "metrics/live_request_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace tinyserve {
namespace {

TEST(LiveRequestMapTest, MatchesUnorderedMapUnderRandomOperations) {
  std::vector<int64_t> objects(5000);  // their addresses are the keys
  LiveRequestMap<int64_t> map(/*initial_capacity=*/8);
  std::unordered_map<const void*, int64_t> ref;
  std::mt19937 rng(7);
  for (int op = 0; op < 200000; ++op) {
    const void* key = &objects[rng() % objects.size()];
    if (rng() % 3 == 0) {
      map.Erase(key);
      ref.erase(key);
    } else {
      map.FindOrInsert(key) += op;
      ref[key] += op;
    }
    if (op % 1000 == 0) {
      ASSERT_EQ(map.size(), ref.size());
      for (const int64_t& o : objects) {
        const int64_t* v = map.Find(&o);
        auto it = ref.find(&o);
        ASSERT_EQ(v != nullptr, it != ref.end());
        if (v != nullptr) {
          ASSERT_EQ(*v, it->second);
        }
      }
    }
  }
}

TEST(LiveRequestMapTest, ErasedEntriesComeBackDefault) {
  int a = 0, b = 0;
  LiveRequestMap<int> map;
  map.FindOrInsert(&a) = 5;
  map.FindOrInsert(&b) = 6;
  map.Erase(&a);
  map.Erase(&a);  // absent: no-op
  EXPECT_EQ(map.Find(&a), nullptr);
  EXPECT_EQ(*map.Find(&b), 6);
  EXPECT_EQ(map.FindOrInsert(&a), 0);
  EXPECT_EQ(map.size(), 2u);
}

}  // namespace
}  // namespace tinyserve
