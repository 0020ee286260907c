// ApplyBpeMerges (heap + linked list) must give exactly what run.c's O(n^2) loop gives.
#include "models/tokenizer/bpe_merge.h"

#include <gtest/gtest.h>

#include <chrono>
#include <random>

namespace tinyserve {
namespace {

// run.c's loop: scan every adjacent pair, take the first with the strictly highest score, merge.
std::vector<int32_t> NaiveMerge(const MergeTable& table, std::vector<int32_t> ids) {
  while (true) {
    const MergeTable::Rule* best = nullptr;
    size_t best_index = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const MergeTable::Rule* rule = table.Find(ids[i], ids[i + 1]);
      if (rule != nullptr && (best == nullptr || rule->score > best->score)) {
        best = rule;
        best_index = i;
      }
    }
    if (best == nullptr) return ids;
    ids[best_index] = best->merged_id;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_index) + 1);
  }
}

TEST(BpeMergeTest, EmptyAndSingleSymbolAreUnchanged) {
  MergeTable table;
  table.Add(1, 1, {1.0f, 2});
  std::vector<int32_t> empty;
  ApplyBpeMerges(table, empty);
  EXPECT_TRUE(empty.empty());
  std::vector<int32_t> one = {1};
  ApplyBpeMerges(table, one);
  EXPECT_EQ(one, std::vector<int32_t>({1}));
}

TEST(BpeMergeTest, TiesGoLeftmost) {
  // "a a a": (a,a) merges at 0 first, leaving "aa a".
  MergeTable table;
  table.Add(1, 1, {0.0f, 2});
  std::vector<int32_t> ids = {1, 1, 1};
  ApplyBpeMerges(table, ids);
  EXPECT_EQ(ids, std::vector<int32_t>({2, 1}));
}

TEST(BpeMergeTest, HigherScoreWinsOverPosition) {
  MergeTable table;
  table.Add(1, 2, {-5.0f, 10});  // left pair, worse score
  table.Add(2, 3, {-1.0f, 11});  // right pair, better score
  std::vector<int32_t> ids = {1, 2, 3};
  ApplyBpeMerges(table, ids);
  EXPECT_EQ(ids, std::vector<int32_t>({1, 11}));
}

TEST(BpeMergeTest, MatchesNaiveLoopOnRandomTables) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    // Ids 0..4 are "characters"; rules build ids 5.. from any existing ids. Scores come from a few
    // values so that ties are common.
    MergeTable table;
    int32_t next_id = 5;
    const int num_rules = 3 + static_cast<int>(rng() % 25);
    for (int r = 0; r < num_rules; ++r) {
      const int32_t left = static_cast<int32_t>(rng() % next_id);
      const int32_t right = static_cast<int32_t>(rng() % next_id);
      const float score = static_cast<float>(static_cast<int>(rng() % 4)) - 2.0f;
      table.Add(left, right, {score, next_id++});
    }
    const size_t length = rng() % 80;
    std::vector<int32_t> ids(length);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 5);
    std::vector<int32_t> fast = ids;
    ApplyBpeMerges(table, fast);
    ASSERT_EQ(fast, NaiveMerge(table, ids)) << "trial " << trial;
  }
}

TEST(BpeMergeTest, LongInputIsFast) {
  // 200,000 symbols that all merge pairwise, then again: O(n log n) takes milliseconds (seconds
  // under sanitizers); the O(n^2) loop would take many minutes. The bound leaves room for slow CI.
  MergeTable table;
  table.Add(0, 0, {0.0f, 1});
  table.Add(1, 1, {-1.0f, 2});
  std::vector<int32_t> ids(200000, 0);
  const auto start = std::chrono::steady_clock::now();
  ApplyBpeMerges(table, ids);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(ids, std::vector<int32_t>(50000, 2));
  EXPECT_LT(seconds, 30.0);
}

}  // namespace
}  // namespace tinyserve
