// The invariant of DESIGN §3 on the fake model: every request's output (and, for those that ask,
// its prompt logprobs, each position once) is the same whether it ran alone, in a batch, or was
// preempted any number of times (greedy or seeded sampling, prefix caching on or off, either
// policy); aborts at random moments leak no blocks; the engine thread
// serves many concurrent clients and shuts down cleanly.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"

namespace tinyserve {
namespace {

using testing::FakeExecutor;
using testing::RecordingObserver;
using Outputs = std::map<std::string, std::vector<int32_t>>;
using PromptLogprobs = std::map<std::string, std::vector<TokenLogprobs>>;

constexpr int32_t kVocab = 32;
constexpr int32_t kMaxModelLen = 64;
constexpr int32_t kBlockSize = 4;

std::vector<EngineRequest> MakeRequests(int n, uint32_t seed, bool sampled) {
  std::mt19937 rng(seed);
  std::vector<int32_t> shared_prefix;
  for (int i = 0; i < 12; ++i) shared_prefix.push_back(1 + static_cast<int32_t>(rng() % 31));
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < n; ++i) {
    EngineRequest r;
    r.request_id = testing::Name("r", i);
    if (i % 3 == 0) r.prompt_token_ids = shared_prefix;  // prefix-cache hits across requests
    const int32_t len = 1 + static_cast<int32_t>(rng() % 40);
    for (int32_t k = 0; k < len; ++k) {
      r.prompt_token_ids.push_back(1 + static_cast<int32_t>(rng() % 31));
    }
    r.sampling.max_tokens = 1 + static_cast<int32_t>(rng() % 30);
    r.sampling.ignore_eos = true;
    r.priority = static_cast<int32_t>(rng() % 3);
    r.arrival_ts = 0.001 * i;
    if (i % 4 == 1) r.sampling.prompt_logprobs = i % 5;  // some of them share the cached prefix
    if (sampled) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 1000 + i;
    } else {
      r.sampling.temperature = 0.0f;
    }
    reqs.push_back(r);
  }
  return reqs;
}

Outputs RunAlone(const std::vector<EngineRequest>& reqs,
                 PromptLogprobs* prompt_logprobs = nullptr) {
  Outputs out;
  for (const EngineRequest& r : reqs) {
    FakeClock clock;
    FakeExecutor executor(64, kBlockSize, kVocab, kMaxModelLen);
    EngineCore core(EngineConfig{}, &executor, &clock);
    auto stream = core.Submit(r);
    EXPECT_TRUE(stream.ok());
    while (core.HasPendingWork()) core.Step();
    RequestOutput all;
    EXPECT_TRUE((*stream)->WaitForFinish(&all, 0));
    out[r.request_id] = all.token_ids;
    if (prompt_logprobs != nullptr) (*prompt_logprobs)[r.request_id] = all.prompt_logprobs;
  }
  return out;
}

struct BatchedRun {
  Outputs outputs;
  PromptLogprobs prompt_logprobs;
  int32_t num_preemptions = 0;
  int64_t prefix_cache_hits = 0;
  int32_t num_free_blocks = 0;
};

// A terrible block hash (3 values, parent ignored): collisions everywhere, which the prefix
// cache must turn into misses.
uint64_t WeakHash(uint64_t, const int32_t* tokens, int32_t n) {
  return static_cast<uint64_t>(tokens[0] + tokens[n - 1]) % 3;
}

BatchedRun RunBatched(const std::vector<EngineRequest>& reqs, int32_t num_blocks,
                      bool prefix_caching, SchedulingPolicy policy,
                      BlockHashFn hash_fn = &DefaultBlockHash) {
  FakeClock clock;
  FakeExecutor executor(num_blocks, kBlockSize, kVocab, kMaxModelLen, &clock, 0.01);
  EngineConfig config;
  config.max_num_batched_tokens = 48;
  config.enable_prefix_caching = prefix_caching;
  config.policy = policy;
  RecordingObserver recorder;  // outlives the core, whose destructor still reports to it
  EngineCore core(config, &executor, &clock, hash_fn);
  core.AddObserver(&recorder);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  // Half up front, the rest while the engine runs.
  size_t next = 0;
  for (; next < reqs.size() / 2; ++next) streams[reqs[next].request_id] = *core.Submit(reqs[next]);
  while (core.HasPendingWork() || next < reqs.size()) {
    if (next < reqs.size()) {
      streams[reqs[next].request_id] = *core.Submit(reqs[next]);
      ++next;
    }
    core.Step();
  }
  BatchedRun run;
  int64_t recomputed_by_requests = 0;
  for (auto& [id, stream] : streams) {
    RequestOutput all;
    EXPECT_TRUE(stream->WaitForFinish(&all, 0)) << id;
    EXPECT_EQ(all.finish_reason, FinishReason::kLength) << id;
    recomputed_by_requests +=
        all.counts.num_recomputed_prompt_tokens + all.counts.num_recomputed_output_tokens;
    run.outputs[id] = all.token_ids;
    run.prompt_logprobs[id] = all.prompt_logprobs;
  }
  int64_t recomputed = 0;
  for (const SchedulerStats& s : recorder.steps) {
    run.num_preemptions += s.num_preemptions;
    run.prefix_cache_hits += s.prefix_cache_hits;
    // Every computed token is of one kind; the reasons add up to the preemptions.
    EXPECT_EQ(s.num_prefill_computed_tokens + s.num_decode_tokens + s.num_recomputed_tokens,
              s.num_computed_tokens);
    EXPECT_LE(s.num_recomputed_prompt_tokens, s.num_recomputed_tokens);
    int32_t by_reason = 0;
    for (int32_t n : s.num_preemptions_by_reason) by_reason += n;
    EXPECT_EQ(by_reason, s.num_preemptions);
    recomputed += s.num_recomputed_tokens;
  }
  // The requests' own recompute counts (delivered with their finish) add up to the steps'.
  EXPECT_EQ(recomputed_by_requests, recomputed);
  run.num_free_blocks = core.scheduler().kv_cache().pool().num_free_blocks();
  return run;
}

struct InvariantCase {
  bool sampled;
  bool prefix_caching;
  SchedulingPolicy policy;
  BlockHashFn hash_fn = &DefaultBlockHash;
};

class InvariantTest : public ::testing::TestWithParam<InvariantCase> {};

TEST_P(InvariantTest, OutputsMatchRunningAloneDespitePreemptions) {
  const InvariantCase c = GetParam();
  const std::vector<EngineRequest> reqs = MakeRequests(48, 7, c.sampled);
  PromptLogprobs alone_prompt_logprobs;
  const Outputs alone = RunAlone(reqs, &alone_prompt_logprobs);
  const BatchedRun batched =
      RunBatched(reqs, /*num_blocks=*/20, c.prefix_caching, c.policy, c.hash_fn);
  EXPECT_GE(batched.num_preemptions, 20);
  if (c.prefix_caching && c.hash_fn == &DefaultBlockHash) {
    EXPECT_GT(batched.prefix_cache_hits, 0);  // the shared prefixes did hit
  } else if (!c.prefix_caching) {
    EXPECT_EQ(batched.prefix_cache_hits, 0);
  }
  EXPECT_EQ(batched.num_free_blocks, 20);
  for (const EngineRequest& r : reqs) {
    EXPECT_EQ(batched.outputs.at(r.request_id), alone.at(r.request_id)) << r.request_id;
    const std::vector<TokenLogprobs>& got = batched.prompt_logprobs.at(r.request_id);
    const std::vector<TokenLogprobs>& want = alone_prompt_logprobs.at(r.request_id);
    ASSERT_EQ(got.size(), r.sampling.prompt_logprobs ? r.prompt_token_ids.size() - 1 : 0)
        << r.request_id;
    ASSERT_EQ(got.size(), want.size()) << r.request_id;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].token_id, r.prompt_token_ids[i + 1]) << r.request_id << " " << i;
      EXPECT_EQ(got[i].logprob, want[i].logprob) << r.request_id << " " << i;
      EXPECT_EQ(got[i].top, want[i].top) << r.request_id << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllModes, InvariantTest,
    ::testing::Values(InvariantCase{false, true, SchedulingPolicy::kFcfs},
                      InvariantCase{false, false, SchedulingPolicy::kFcfs},
                      InvariantCase{true, true, SchedulingPolicy::kFcfs},
                      InvariantCase{true, false, SchedulingPolicy::kFcfs},
                      InvariantCase{false, true, SchedulingPolicy::kPriority},
                      InvariantCase{true, true, SchedulingPolicy::kPriority},
                      InvariantCase{false, true, SchedulingPolicy::kFcfs, &WeakHash},
                      InvariantCase{true, true, SchedulingPolicy::kFcfs, &WeakHash}),
    [](const ::testing::TestParamInfo<InvariantCase>& param_info) {
      std::string name = param_info.param.sampled ? "Seeded" : "Greedy";
      name += param_info.param.prefix_caching ? "PrefixCaching" : "NoPrefixCaching";
      name += param_info.param.policy == SchedulingPolicy::kFcfs ? "Fcfs" : "Priority";
      if (param_info.param.hash_fn != &DefaultBlockHash) name += "WeakHash";
      return name;
    });

TEST(EngineAbortTest, RandomAbortsDuringABusyRunLeakNothing) {
  const std::vector<EngineRequest> reqs = MakeRequests(60, 99, /*sampled=*/true);
  const Outputs alone = RunAlone(reqs);
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 rng(seed);
    FakeClock clock;
    FakeExecutor executor(20, kBlockSize, kVocab, kMaxModelLen, &clock, 0.01);
    EngineConfig config;
    config.max_num_batched_tokens = 32;
    RecordingObserver recorder;  // outlives the core, whose destructor still reports to it
    EngineCore core(config, &executor, &clock);
    core.AddObserver(&recorder);
    std::map<std::string, std::shared_ptr<RequestStream>> streams;
    std::map<std::string, bool> aborted;
    size_t next = 0;
    int32_t steps = 0;
    while (core.HasPendingWork() || next < reqs.size()) {
      if (next < reqs.size() && rng() % 2 == 0) {
        streams[reqs[next].request_id] = *core.Submit(reqs[next]);
        ++next;
      }
      if (next > 0 && rng() % 4 == 0) {  // abort any submitted request, live or not
        const std::string& id = reqs[rng() % next].request_id;
        core.Abort(id);
        aborted[id] = true;
      }
      core.Step();
      ++steps;
      // No leak at any moment: used blocks are exactly those held by live requests.
      std::set<int32_t> held;
      for (const Request* r : core.scheduler().running()) {
        held.insert(r->block_ids.begin(), r->block_ids.end());
      }
      for (const Request* r : core.scheduler().waiting()) ASSERT_TRUE(r->block_ids.empty());
      ASSERT_EQ(core.scheduler().kv_cache().pool().num_used_blocks(),
                static_cast<int32_t>(held.size()));
    }
    int32_t num_aborted = 0, preemptions = 0;
    for (auto& [id, stream] : streams) {
      RequestOutput all;
      ASSERT_TRUE(stream->WaitForFinish(&all, 0)) << id;
      const std::vector<int32_t>& ref = alone.at(id);
      ASSERT_LE(all.token_ids.size(), ref.size());
      EXPECT_TRUE(std::equal(all.token_ids.begin(), all.token_ids.end(), ref.begin())) << id;
      if (all.finish_reason == FinishReason::kAbort) {
        EXPECT_TRUE(aborted[id]) << id;
        ++num_aborted;
      } else {
        EXPECT_EQ(all.finish_reason, FinishReason::kLength) << id;
        EXPECT_EQ(all.token_ids, ref) << id;
      }
      // Exactly one FINISHED, last.
      const auto& events = recorder.events[id];
      EXPECT_EQ(std::count_if(events.begin(), events.end(),
                              [](const RequestEvent& e) { return e.type == EventType::kFinished; }),
                1);
      EXPECT_EQ(events.back().type, EventType::kFinished);
    }
    for (const SchedulerStats& s : recorder.steps) preemptions += s.num_preemptions;
    EXPECT_GT(num_aborted, 5);
    EXPECT_GT(preemptions, 0);
    EXPECT_EQ(core.scheduler().kv_cache().pool().num_free_blocks(), 20);
    EXPECT_EQ(core.scheduler().num_running() + core.scheduler().num_waiting(), 0);
  }
}

TEST(EngineThreadTest, ManyClientsAllFinishAndShutdownIsClean) {
  SteadyClock clock;
  FakeExecutor executor(32, kBlockSize, kVocab, kMaxModelLen);
  EngineConfig config;
  config.max_num_batched_tokens = 64;
  EngineCore core(config, &executor, &clock);
  core.Start();
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<int> finished(kThreads, 0);
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        EngineRequest r = testing::MakeEngineRequest(testing::Name(testing::Name("t", t) + "-", i),
                                                     testing::Prompt(1 + i % 17, i), 1 + i % 9);
        r.arrival_ts = clock.Now();
        auto stream = core.Submit(r);
        ASSERT_TRUE(stream.ok());
        RequestOutput all;
        ASSERT_TRUE((*stream)->WaitForFinish(&all, 30.0));
        EXPECT_EQ(all.finish_reason, FinishReason::kLength);
        EXPECT_EQ(static_cast<int>(all.token_ids.size()), 1 + i % 9);
        for (size_t k = 1; k < all.token_ts.size(); ++k)
          EXPECT_GE(all.token_ts[k], all.token_ts[k - 1]);
        ++finished[t];
      }
    });
  }
  for (std::thread& c : clients) c.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(finished[t], kPerThread);
  core.Stop();
  EXPECT_EQ(core.scheduler().kv_cache().pool().num_free_blocks(), 32);
}

TEST(EngineThreadTest, StopWhileBusyAbortsWhatIsLeft) {
  SteadyClock clock;
  FakeExecutor executor(32, kBlockSize, kVocab, kMaxModelLen);
  EngineCore core(EngineConfig{}, &executor, &clock);
  core.Start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 50; ++i) {
    streams.push_back(*core.Submit(
        testing::MakeEngineRequest(testing::Name("r", i), testing::Prompt(20, i), 40)));
  }
  RequestOutput first;
  EXPECT_FALSE(streams[0]->is_done());
  streams[0]->Next(&first, 5.0);  // wait until the engine is working
  core.Stop();
  for (auto& s : streams) {
    RequestOutput all;
    ASSERT_TRUE(s->WaitForFinish(&all, 0) || s->is_done());
  }
  RequestOutput nothing;
  EXPECT_FALSE(streams[1]->Next(&nothing, 0.01));  // finished and handed out: returns at once
  EXPECT_EQ(core.scheduler().kv_cache().pool().num_free_blocks(), 32);
  EXPECT_FALSE(core.HasPendingWork());
}

}  // namespace
}  // namespace tinyserve
