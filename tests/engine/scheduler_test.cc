// Scheduler tests without an executor: each step is Schedule() and then Update() with a fixed
// sampled token, so the plan, preemptions, queues and stats can be checked exactly.
#include "engine/scheduler.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tinyserve {
namespace {

using Ids = std::vector<int32_t>;
using Names = std::vector<std::string>;

std::unique_ptr<Request> MakeRequest(const std::string& id, int32_t prompt_len, int32_t max_tokens,
                                     int32_t priority = 0, double arrival = 0.0) {
  auto r = std::make_unique<Request>();
  r->request_id = id;
  for (int32_t i = 0; i < prompt_len; ++i) {
    r->token_ids.push_back(static_cast<int32_t>((id[0] * 37 + i * 11) % 97));
  }
  r->num_prompt_tokens = prompt_len;
  r->sampling.temperature = 0.0f;
  r->sampling.max_tokens = max_tokens;
  r->sampling.ignore_eos = true;
  r->priority = priority;
  r->arrival_ts = arrival;
  return r;
}

SchedulerConfig Config(int32_t num_blocks, int32_t block_size, int32_t budget,
                       int32_t max_num_seqs = 64,
                       SchedulingPolicy policy = SchedulingPolicy::kFcfs) {
  SchedulerConfig c;
  c.num_kv_blocks = num_blocks;
  c.block_size = block_size;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_num_seqs;
  c.policy = policy;
  c.max_model_len = 1024;
  return c;
}

struct Plan {
  Names ids;
  Ids num_new;
  Ids sample;
  Names preempted;
};

// One step: Schedule(now) then Update(now) with `token` for every sampled sequence.
Plan RunStep(Scheduler& s, double now, int32_t token = 5) {
  const SchedulerOutput& out = s.Schedule(now);
  Plan p;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    p.ids.push_back(out.requests[i]->request_id);
    p.num_new.push_back(out.num_new_tokens[i]);
    p.sample.push_back(out.batch.sample[i]);
  }
  for (const Request* r : out.preempted) p.preempted.push_back(r->request_id);
  s.Update(std::vector<int32_t>(static_cast<size_t>(out.batch.num_sampled()), token), now);
  return p;
}

Names WaitingIds(const Scheduler& s) {
  Names ids;
  for (const Request* r : s.waiting()) ids.push_back(r->request_id);
  return ids;
}

Names RunningIds(const Scheduler& s) {
  Names ids;
  for (const Request* r : s.running()) ids.push_back(r->request_id);
  return ids;
}

TEST(SchedulerTest, TokenBudgetChunksPrefillsAndSamplesOnlyAtTheEnd) {
  Scheduler s(Config(64, 4, 16));
  s.AddRequest(MakeRequest("a", 10, 10), 0);
  s.AddRequest(MakeRequest("b", 10, 10), 0);
  s.AddRequest(MakeRequest("c", 30, 10), 0);

  const SchedulerOutput& out = s.Schedule(0);
  // a: all 10 tokens; b: the 6 left in the budget; c: nothing left.
  EXPECT_EQ(out.batch.query_start, (Ids{0, 10, 16}));
  EXPECT_EQ(out.batch.context_lens, (Ids{10, 6}));
  EXPECT_EQ(out.batch.sample, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(out.batch.positions, (Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5}));
  // a has blocks 0 1 2, b blocks 3 4: slot = block * 4 + offset.
  EXPECT_EQ(out.batch.slot_mapping,
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(out.batch.max_blocks_per_seq, 3);
  EXPECT_EQ(out.batch.block_tables, (Ids{0, 1, 2, 3, 4, -1}));
  EXPECT_TRUE(out.batch.Validate(64, 4).ok());
  EXPECT_EQ(s.stats().num_computed_tokens, 16);
  s.Update({5}, 0);
  EXPECT_EQ(WaitingIds(s), (Names{"c"}));

  Plan p = RunStep(s, 1);
  EXPECT_EQ(p.ids, (Names{"a", "b", "c"}));
  EXPECT_EQ(p.num_new, (Ids{1, 4, 11}));
  EXPECT_EQ(p.sample, (Ids{1, 1, 0}));
  p = RunStep(s, 2);
  EXPECT_EQ(p.num_new, (Ids{1, 1, 14}));
  EXPECT_EQ(p.sample, (Ids{1, 1, 0}));
  p = RunStep(s, 3);
  EXPECT_EQ(p.num_new, (Ids{1, 1, 5}));
  EXPECT_EQ(p.sample, (Ids{1, 1, 1}));
}

TEST(SchedulerTest, LongPrefillThresholdCutsChunks) {
  SchedulerConfig c = Config(64, 4, 100);
  c.long_prefill_token_threshold = 4;
  Scheduler s(c);
  s.AddRequest(MakeRequest("a", 10, 2), 0);
  EXPECT_EQ(RunStep(s, 0).num_new, (Ids{4}));
  EXPECT_EQ(RunStep(s, 1).num_new, (Ids{4}));
  Plan p = RunStep(s, 2);
  EXPECT_EQ(p.num_new, (Ids{2}));
  EXPECT_EQ(p.sample, (Ids{1}));
}

TEST(SchedulerTest, MaxNumSeqsCapsRunningRequests) {
  Scheduler s(Config(64, 4, 100, /*max_num_seqs=*/2));
  s.AddRequest(MakeRequest("a", 4, 1), 0);
  s.AddRequest(MakeRequest("b", 4, 3), 0);
  s.AddRequest(MakeRequest("c", 4, 3), 0);
  EXPECT_EQ(RunStep(s, 0).ids, (Names{"a", "b"}));
  EXPECT_EQ(WaitingIds(s), (Names{"c"}));
  // a finished (max_tokens 1): c takes its seat.
  EXPECT_EQ(RunStep(s, 1).ids, (Names{"b", "c"}));
}

TEST(SchedulerTest, FcfsPreemptsItselfWhenLastAndAdmitsNothingThatStep) {
  Scheduler s(Config(5, 2, 100));
  s.AddRequest(MakeRequest("a", 3, 20), 0);
  s.AddRequest(MakeRequest("b", 3, 20), 0);
  EXPECT_EQ(RunStep(s, 0).ids, (Names{"a", "b"}));  // 2 + 2 blocks
  EXPECT_EQ(RunStep(s, 1).ids, (Names{"a", "b"}));  // 4 tokens each: still 2 blocks
  s.AddRequest(MakeRequest("c", 2, 20), 1);         // would fit in 1 block
  // a takes the last block; b cannot grow, and is itself the victim: the pass stops.
  Plan p = RunStep(s, 2);
  EXPECT_EQ(p.ids, (Names{"a"}));
  EXPECT_EQ(p.preempted, (Names{"b"}));
  // No admission in a step that preempted, though b's blocks would now hold c.
  EXPECT_EQ(RunningIds(s), (Names{"a"}));
  EXPECT_EQ(WaitingIds(s), (Names{"b", "c"}));  // b at the head
  const Request* b = s.Find("b");
  EXPECT_EQ(b->status, RequestStatus::kPreempted);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_output_tokens(), 2);  // outputs kept
  EXPECT_TRUE(b->block_ids.empty());
  const SchedulerStats& st = s.stats();
  EXPECT_EQ(st.num_preemptions, 1);
  EXPECT_EQ(st.num_preemptions_by_reason[static_cast<int>(PreemptionReason::kKvFull)], 1);
  EXPECT_EQ(st.num_preemptions_by_reason[static_cast<int>(PreemptionReason::kPriority)], 0);
  EXPECT_EQ(st.num_preempted_waiting, 1);
  EXPECT_EQ(st.num_waiting, 2);
  EXPECT_EQ(st.num_running, 1);
  EXPECT_EQ(st.num_used_blocks, 3);
}

TEST(SchedulerTest, FcfsVictimIsTheMostRecentlyAdmitted) {
  Scheduler s(Config(6, 2, 100));
  s.AddRequest(MakeRequest("a", 3, 20), 0);
  s.AddRequest(MakeRequest("b", 1, 20), 0);
  s.AddRequest(MakeRequest("c", 3, 20), 0);
  RunStep(s, 0);  // blocks: a 2, b 1, c 2; 1 free
  RunStep(s, 1);  // a 5 tokens, b 3, c 5
  // a takes the free block; b needs one: c (admitted last) is preempted for it.
  Plan p = RunStep(s, 2);
  EXPECT_EQ(p.ids, (Names{"a", "b"}));
  EXPECT_EQ(p.preempted, (Names{"c"}));
  EXPECT_EQ(WaitingIds(s), (Names{"c"}));
}

TEST(SchedulerTest, PriorityVictimIsTheLargestPriorityEvenIfAlreadyPlanned) {
  Scheduler s(Config(5, 2, 100, 64, SchedulingPolicy::kPriority));
  s.AddRequest(MakeRequest("a", 3, 20, /*priority=*/5, /*arrival=*/0), 0);
  RunStep(s, 0);
  s.AddRequest(MakeRequest("b", 4, 20, /*priority=*/0, /*arrival=*/1), 1);
  EXPECT_EQ(RunStep(s, 1).ids, (Names{"a", "b"}));  // a 5 tokens, b 5; 1 block free
  // a (planned first) takes the free block; b needs one: a, the least important, is preempted,
  // leaves the plan, and b gets a's blocks.
  Plan p = RunStep(s, 2);
  EXPECT_EQ(p.ids, (Names{"b"}));
  EXPECT_EQ(p.num_new, (Ids{1}));
  EXPECT_EQ(p.preempted, (Names{"a"}));
  EXPECT_EQ(RunningIds(s), (Names{"b"}));
  EXPECT_EQ(WaitingIds(s), (Names{"a"}));
  // a (priority 5) made room for b (priority 0): a priority preemption.
  EXPECT_EQ(s.stats().num_preemptions_by_reason[static_cast<int>(PreemptionReason::kPriority)], 1);
  EXPECT_EQ(s.stats().num_preemptions_by_reason[static_cast<int>(PreemptionReason::kKvFull)], 0);
  EXPECT_STREQ(PreemptionReasonName(PreemptionReason::kPriority), "priority");
  EXPECT_STREQ(PreemptionReasonName(PreemptionReason::kKvFull), "kv_full");
}

TEST(SchedulerTest, PriorityPolicyPreemptingAnEquallyImportantRequestIsKvFull) {
  Scheduler s(Config(5, 2, 100, 64, SchedulingPolicy::kPriority));
  s.AddRequest(MakeRequest("a", 3, 20, /*priority=*/1, /*arrival=*/0), 0);
  s.AddRequest(MakeRequest("b", 3, 20, /*priority=*/1, /*arrival=*/1), 0);
  RunStep(s, 0);
  RunStep(s, 1);
  EXPECT_EQ(RunStep(s, 2).preempted, (Names{"b"}));  // b is itself the victim
  EXPECT_EQ(s.stats().num_preemptions_by_reason[static_cast<int>(PreemptionReason::kKvFull)], 1);
  EXPECT_EQ(s.stats().num_preemptions_by_reason[static_cast<int>(PreemptionReason::kPriority)], 0);
}

TEST(SchedulerTest, PriorityWaitingQueueIsOrderedByPriorityThenArrival) {
  Scheduler s(Config(64, 4, 100, /*max_num_seqs=*/1, SchedulingPolicy::kPriority));
  s.AddRequest(MakeRequest("a", 4, 1, 2, 0.0), 0);
  s.AddRequest(MakeRequest("b", 4, 1, 1, 1.0), 0);
  s.AddRequest(MakeRequest("c", 4, 1, 1, 0.5), 0);
  s.AddRequest(MakeRequest("d", 4, 1, 0, 2.0), 0);
  EXPECT_EQ(WaitingIds(s), (Names{"d", "c", "b", "a"}));
  EXPECT_EQ(RunStep(s, 0).ids, (Names{"d"}));
  EXPECT_EQ(RunStep(s, 1).ids, (Names{"c"}));
}

TEST(SchedulerTest, WaitingRequestThatDoesNotFitPreemptsNobody) {
  Scheduler s(Config(4, 4, 100));
  s.AddRequest(MakeRequest("a", 9, 20), 0);  // 3 blocks
  RunStep(s, 0);
  s.AddRequest(MakeRequest("b", 5, 20), 0);  // needs 2 blocks; 1 free
  Plan p = RunStep(s, 1);
  EXPECT_EQ(p.ids, (Names{"a"}));
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(WaitingIds(s), (Names{"b"}));
  EXPECT_EQ(s.Find("b")->status, RequestStatus::kWaiting);
}

TEST(SchedulerTest, PrefixCacheStatsCountAdmissionsAndExcludeRecompute) {
  SchedulerConfig c = Config(16, 4, 100);
  Scheduler s(c);
  s.AddRequest(MakeRequest("a", 9, 1), 0);
  RunStep(s, 0);
  EXPECT_EQ(s.stats().prefix_cache_queries, 9);
  EXPECT_EQ(s.stats().prefix_cache_hits, 0);
  // Same first 9 tokens ("a..." prompt) plus more: 2 full blocks hit.
  auto b = MakeRequest("a2", 9, 1);
  b->request_id = "b";
  b->token_ids.push_back(1);
  b->num_prompt_tokens = 10;
  s.AddRequest(std::move(b), 1);
  Plan p = RunStep(s, 1);
  EXPECT_EQ(p.num_new, (Ids{2}));
  EXPECT_EQ(s.stats().prefix_cache_queries, 10);
  EXPECT_EQ(s.stats().prefix_cache_hits, 8);
  EXPECT_EQ(s.stats().num_computed_tokens, 2);
  EXPECT_EQ(s.stats().num_prompt_tokens, 10);
  EXPECT_EQ(s.stats().num_prompt_tokens_cached, 8);
  EXPECT_EQ(s.stats().num_prefill_computed_tokens, 2);
  EXPECT_EQ(s.stats().num_decode_tokens, 0);
  EXPECT_EQ(s.stats().num_generation_tokens, 1);
  ASSERT_EQ(s.finished().size(), 2u);
  EXPECT_EQ(s.finished()[1]->counts.num_cached_prompt_tokens, 8);
  // Both finished: the 2 shared full blocks stay cached; the 2 partial blocks are plain free.
  EXPECT_EQ(s.stats().num_cached_blocks, 2);
  EXPECT_EQ(s.stats().num_free_blocks, 14);
  EXPECT_EQ(s.stats().kv_cache_usage, 0.0);
}

TEST(SchedulerTest, ResumedRequestRecomputesPromptAndOutputs) {
  SchedulerConfig c = Config(5, 2, 100);
  c.enable_prefix_caching = false;
  Scheduler s(c);
  s.AddRequest(MakeRequest("a", 3, 5), 0);
  s.AddRequest(MakeRequest("b", 3, 20), 0);
  RunStep(s, 0);
  RunStep(s, 1);
  EXPECT_EQ(RunStep(s, 2).preempted, (Names{"b"}));  // b: 5 tokens, 4 computed
  RunStep(s, 3);
  RunStep(s, 4);  // a finishes (5 outputs)
  EXPECT_EQ(s.Find("a"), nullptr);
  Plan p = RunStep(s, 5);
  EXPECT_EQ(p.ids, (Names{"b"}));
  EXPECT_EQ(p.num_new, (Ids{5}));  // prompt 3 + outputs 2
  EXPECT_EQ(p.sample, (Ids{1}));
  EXPECT_EQ(s.stats().num_recomputed_tokens, 4);
  // Of the 5: prompt 3 and output 1 computed before (recompute); output 2's K/V is new (decode).
  EXPECT_EQ(s.stats().num_recomputed_prompt_tokens, 3);
  EXPECT_EQ(s.stats().num_prefill_computed_tokens, 0);
  EXPECT_EQ(s.stats().num_decode_tokens, 1);
  EXPECT_EQ(s.stats().num_computed_tokens, 5);
  EXPECT_EQ(s.Find("b")->counts.num_recomputed_prompt_tokens, 3);
  EXPECT_EQ(s.Find("b")->counts.num_recomputed_output_tokens, 1);
  EXPECT_EQ(s.Find("b")->counts.num_cached_prompt_tokens, 0);
  EXPECT_EQ(s.stats().prefix_cache_queries, 0);  // resumed: excluded
  EXPECT_EQ(s.stats().num_prompt_tokens, 0);     // b's first token came long ago
  EXPECT_EQ(s.Find("b")->num_output_tokens(), 3);
}

TEST(SchedulerTest, RequestsNeverExceedMaxModelLen) {
  SchedulerConfig c = Config(64, 4, 100);
  c.max_model_len = 8;
  Scheduler s(c);
  s.AddRequest(MakeRequest("a", 5, 100), 0);
  for (int i = 0; i < 3; ++i) RunStep(s, i);
  ASSERT_EQ(s.finished().size(), 1u);
  EXPECT_EQ(s.finished()[0]->num_tokens(), 8);
  EXPECT_EQ(s.finished()[0]->finish_reason, FinishReason::kLength);
  // The cache caps it too: 2 blocks of 4 = 8 tokens.
  SchedulerConfig small = Config(2, 4, 100);
  EXPECT_EQ(Scheduler(small).max_model_len(), 8);
}

TEST(SchedulerTest, StopChecksFollowVllmOrder) {
  Scheduler s(Config(64, 4, 100));
  auto a = MakeRequest("a", 2, 10);
  a->sampling.ignore_eos = false;
  a->eos_token_id = 2;
  a->sampling.min_tokens = 2;
  s.AddRequest(std::move(a), 0);
  auto b = MakeRequest("b", 2, 10);
  b->sampling.stop_token_ids = {9};
  s.AddRequest(std::move(b), 0);
  auto c = MakeRequest("c", 2, 1);  // max_tokens 1, EOS sampled: length wins (vLLM)
  c->sampling.ignore_eos = false;
  c->eos_token_id = 2;
  s.AddRequest(std::move(c), 0);
  s.Schedule(0);
  s.Update({2, 9, 2}, 0);  // a: EOS under min_tokens: goes on; b: stop id; c: length
  ASSERT_EQ(s.finished().size(), 2u);
  EXPECT_EQ(s.finished()[0]->request_id, "b");
  EXPECT_EQ(s.finished()[0]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(s.finished()[0]->stop_token_id, 9);
  EXPECT_EQ(s.finished()[1]->request_id, "c");
  EXPECT_EQ(s.finished()[1]->finish_reason, FinishReason::kLength);
  s.Schedule(1);
  s.Update({2}, 1);  // a: EOS after min_tokens: stop
  ASSERT_EQ(s.finished().size(), 3u);
  EXPECT_EQ(s.finished()[2]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(s.finished()[2]->stop_token_id, std::nullopt);
}

// A model with several end-of-sequence ids (Llama-3: <|end_of_text|>, <|eom_id|>, <|eot_id|>):
// each ends a request as EOS does, unless ignore_eos.
TEST(SchedulerTest, ExtraEosIdsStopLikeEos) {
  SchedulerConfig config = Config(64, 4, 100);
  config.extra_eos_token_ids = {7, 8};
  Scheduler s(config);
  for (const char* id : {"a", "b", "c"}) {
    auto r = MakeRequest(id, 2, 10);
    r->sampling.ignore_eos = std::string(id) == "c";
    r->eos_token_id = 2;
    s.AddRequest(std::move(r), 0);
  }
  s.Schedule(0);
  s.Update({8, 5, 7}, 0);  // a: an extra EOS id; b: an ordinary token; c: ignores EOS
  ASSERT_EQ(s.finished().size(), 1u);
  EXPECT_EQ(s.finished()[0]->request_id, "a");
  EXPECT_EQ(s.finished()[0]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(s.finished()[0]->stop_token_id, std::nullopt);  // not one of the request's stop ids
  s.Schedule(1);
  s.Update({7, 8}, 1);  // b: stops on the other extra id; c: still ignores it
  ASSERT_EQ(s.finished().size(), 2u);
  EXPECT_EQ(s.finished()[1]->request_id, "b");
  EXPECT_EQ(s.finished()[1]->finish_reason, FinishReason::kStop);
}

TEST(SchedulerTest, FinishRequestFreesBlocksWhereverItIs) {
  Scheduler s(Config(5, 2, 100, 2));
  s.AddRequest(MakeRequest("a", 3, 20), 0);
  s.AddRequest(MakeRequest("b", 3, 20), 0);
  s.AddRequest(MakeRequest("w", 3, 20), 0);  // waits: max_num_seqs 2
  RunStep(s, 0);
  RunStep(s, 1);
  RunStep(s, 2);  // b preempted
  ASSERT_EQ(s.Find("b")->status, RequestStatus::kPreempted);
  EXPECT_TRUE(s.FinishRequest("b", FinishReason::kAbort, 3));  // preempted
  EXPECT_TRUE(s.FinishRequest("w", FinishReason::kAbort, 3));  // waiting
  EXPECT_TRUE(s.FinishRequest("a", FinishReason::kAbort, 3));  // running
  EXPECT_FALSE(s.FinishRequest("a", FinishReason::kAbort, 3));
  EXPECT_FALSE(s.has_unfinished_requests());
  EXPECT_EQ(s.kv_cache().pool().num_free_blocks(), 5);
  EXPECT_EQ(s.stats().num_preempted_waiting, 0);
}

}  // namespace
}  // namespace tinyserve
