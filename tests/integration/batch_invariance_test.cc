// Batch invariance, bitwise (README "Batch invariance"): a request's logits at every output index
// are the same bits alone; in batches of 2, 7, 32 and 64; with prompts prefilled in chunks of 1, 3,
// 17 or whole; continued from prefix-cache hits; after preemptions (recompute); with 1 and 2
// threads; with block sizes 1, 16 and 32. On the real stories260K and on a random-weight model in
// the stories15M shape (vocab 32000, dim 288).
//
// How logits are matched across runs: a recording executor keeps a shadow of the KV cache (slot ->
// token id), so for every sampled row it can read back the sequence's whole token history (prompt
// and outputs so far) through the block table. That history names (request, output index) in
// every run, whatever the batch, chunking, blocks or preemptions; the row's logits are stored
// under it and compared with memcmp, never with a tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "models/llama2c.h"
#include "models/model_runner.h"
#include "models/presets.h"
#include "tests/models/test_util.h"

namespace tinyserve {
namespace {

const std::string kShared = TINYSERVE_SHARED_DIR;

using History = std::vector<int32_t>;
using LogitsByHistory = std::map<History, std::vector<float>>;

class LogitsRecorder final : public ModelExecutor {
 public:
  // REQUIRES: the runner keeps its sampled logits (ModelRunnerOptions::keep_sampled_logits).
  explicit LogitsRecorder(ModelRunner* inner)
      : inner_(inner),
        shadow_(static_cast<size_t>(inner->num_kv_blocks()) * inner->block_size(), -1) {}

  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& b) override {
    for (int32_t t = 0; t < b.num_tokens(); ++t) {
      if (b.slot_mapping[t] >= 0) shadow_[b.slot_mapping[t]] = b.token_ids[t];
    }
    StatusOr<ExecutorOutput> out = inner_->Execute(b);
    if (!out.ok()) return out;
    const int32_t bs = inner_->block_size();
    const int32_t vocab = inner_->vocab_size();
    const std::vector<float>& all = inner_->last_sampled_logits();
    int32_t row = 0;
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      if (!b.sample[s]) continue;
      History h(b.context_lens[s]);
      for (int32_t p = 0; p < b.context_lens[s]; ++p) {
        const int64_t block =
            b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + p / bs];
        h[p] = shadow_[block * bs + p % bs];
      }
      const float* r = all.data() + static_cast<size_t>(row++) * vocab;
      std::vector<float> logits(r, r + vocab);
      auto [it, inserted] = logits_.emplace(std::move(h), logits);
      // The same history twice in one run (a prompt sent again): it must give the same bits.
      if (!inserted && std::memcmp(it->second.data(), logits.data(), 4 * logits.size()) != 0) {
        ++repeat_mismatches_;
      }
    }
    return out;
  }
  void Release(const std::vector<uint64_t>& keys) override { inner_->Release(keys); }
  int32_t num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  int32_t block_size() const override { return inner_->block_size(); }
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t max_model_len() const override { return inner_->max_model_len(); }

  const LogitsByHistory& logits() const { return logits_; }
  int repeat_mismatches() const { return repeat_mismatches_; }

 private:
  ModelRunner* inner_;
  std::vector<int32_t> shadow_;  // [num_kv_blocks * block_size]: the token written at each slot
  LogitsByHistory logits_;
  int repeat_mismatches_ = 0;
};

// Counts what the scenario is meant to exercise.
class ScenarioObserver final : public EngineObserver {
 public:
  void OnRequestEvent(const RequestRecord& r, const RequestEvent& e) override {
    if (e.type == EventType::kPreempted) ++preemptions_of[std::string(r.request_id)];
  }
  void OnStep(const SchedulerStats& stats) override {
    prefix_cache_hits += stats.prefix_cache_hits;
    max_running = std::max(max_running, stats.num_running);
  }
  std::map<std::string, int> preemptions_of;
  int64_t prefix_cache_hits = 0;
  int32_t max_running = 0;
};

struct Scenario {
  int32_t block_size = 16;
  int32_t num_blocks = 512;
  int threads = 2;
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int32_t long_prefill_token_threshold = 0;
  bool prefix_caching = false;
  bool one_at_a_time = false;  // each request runs alone, to completion, before the next
  int rounds = 1;              // the whole set is sent again after it finished (prefix hits)
  DType kv_cache_dtype = DType::kFloat32;
};

struct Result {
  LogitsByHistory logits;
  ScenarioObserver stats;
  int repeat_mismatches = 0;
};

using Prompts = std::vector<std::vector<int32_t>>;

Prompts MakePrompts(int n, int32_t vocab, uint32_t seed, int32_t min_len, int32_t max_len) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> len(min_len, max_len), tok(3, vocab - 1);
  Prompts prompts;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p{1};  // BOS
    const int32_t l = len(rng);
    for (int32_t j = 1; j < l; ++j) p.push_back(tok(rng));
    prompts.push_back(p);
  }
  // A quarter share the first 20 tokens of the last one (those longer than 24 tokens), so that
  // the prefix cache has blocks to hit across requests too. No prompt is a prefix of another, so
  // a history names one request.
  const std::vector<int32_t>& donor = prompts[n - 1];
  for (int i = 0; i < n / 4; ++i) {
    if (prompts[i].size() > 24 && donor.size() >= 20) {
      std::copy(donor.begin(), donor.begin() + 20, prompts[i].begin());
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const auto& a = prompts[i];
      const auto& b = prompts[j];
      if (i != j && a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin())) {
        ADD_FAILURE() << "prompt " << i << " is a prefix of prompt " << j;
      }
    }
  }
  return prompts;
}

class BatchInvarianceTest : public ::testing::Test {
 protected:
  static Result Run(const std::shared_ptr<const LlamaWeights>& weights, const Prompts& prompts,
                    int32_t max_tokens, const Scenario& sc) {
    ModelRunnerOptions o;
    o.block_size = sc.block_size;
    o.num_kv_blocks = sc.num_blocks;
    o.keep_sampled_logits = true;
    auto runner = ModelRunner::Create(weights, CreateCpuBackend(sc.threads, sc.kv_cache_dtype), o);
    EXPECT_TRUE(runner.ok()) << runner.status().ToString();
    if (!runner.ok()) return {};
    LogitsRecorder recorder(runner->get());
    Result result;
    FakeClock clock;
    EngineConfig config;
    config.max_num_seqs = sc.max_num_seqs;
    config.max_num_batched_tokens = sc.max_num_batched_tokens;
    config.long_prefill_token_threshold = sc.long_prefill_token_threshold;
    config.enable_prefix_caching = sc.prefix_caching;
    EngineCore engine(config, &recorder, &clock);
    engine.AddObserver(&result.stats);
    auto drain = [&] {
      for (int steps = 0; engine.HasPendingWork() && steps < 100000; ++steps) {
        engine.Step();
        clock.Advance(0.001);
      }
    };
    int next_id = 0;
    for (int round = 0; round < sc.rounds; ++round) {
      for (const std::vector<int32_t>& p : prompts) {
        EngineRequest req;
        req.request_id = "r" + std::to_string(next_id++);
        req.prompt_token_ids = p;
        req.sampling.temperature = 0.0f;  // greedy: identical logits give identical paths
        req.sampling.max_tokens = max_tokens;
        req.sampling.ignore_eos = true;
        auto s = engine.Submit(req);
        EXPECT_TRUE(s.ok()) << s.status().ToString();
        if (sc.one_at_a_time) drain();
      }
      drain();
    }
    result.logits = recorder.logits();
    result.repeat_mismatches = recorder.repeat_mismatches();
    return result;
  }

  // Every row of `got` is bitwise the row `want` has for the same history, and both saw the same
  // histories (so the same greedy paths).
  static void ExpectBitwiseSame(const Result& got, const LogitsByHistory& want, size_t want_rows) {
    EXPECT_EQ(got.repeat_mismatches, 0);
    EXPECT_EQ(got.logits.size(), want_rows);
    int compared = 0, differing = 0;
    for (const auto& [history, logits] : got.logits) {
      auto it = want.find(history);
      if (it == want.end()) {
        ADD_FAILURE() << "a history of " << history.size() << " tokens the oracle never saw";
        continue;
      }
      ++compared;
      if (std::memcmp(it->second.data(), logits.data(), 4 * logits.size()) != 0) ++differing;
    }
    EXPECT_EQ(differing, 0) << "of " << compared << " rows";
    EXPECT_GT(compared, 0);
  }

  // The first `n` prompts' rows of the oracle.
  static size_t RowsOf(const LogitsByHistory& oracle, const Prompts& prompts, size_t n) {
    size_t rows = 0;
    for (const auto& [history, logits] : oracle) {
      for (size_t i = 0; i < n; ++i) {
        if (history.size() >= prompts[i].size() &&
            std::equal(prompts[i].begin(), prompts[i].end(), history.begin())) {
          ++rows;
          break;
        }
      }
    }
    return rows;
  }
};

TEST_F(BatchInvarianceTest, Stories260KLogitsAreBitwiseTheSameInEveryArrangement) {
  auto w = LoadLlama2cCheckpoint(kShared + "/models/stories260K.bin");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const Prompts prompts = MakePrompts(64, 512, 15, 8, 48);
  const int32_t max_tokens = 24;
  // The oracle: each request alone, on 1 thread, block size 16, no prefix cache.
  Scenario alone;
  alone.one_at_a_time = true;
  alone.threads = 1;
  const Result oracle = Run(*w, prompts, max_tokens, alone);
  ASSERT_EQ(oracle.logits.size(), 64u * max_tokens);

  for (int n : {2, 7, 32, 64}) {
    SCOPED_TRACE("batch of " + std::to_string(n));
    const Prompts some(prompts.begin(), prompts.begin() + n);
    Scenario crowd;  // 2 threads, all admitted at once
    const Result r = Run(*w, some, max_tokens, crowd);
    EXPECT_GE(r.stats.max_running, n);
    ExpectBitwiseSame(r, oracle.logits, RowsOf(oracle.logits, prompts, n));
  }
  struct Chunking {
    int32_t chunk, block_size, threads;
  };
  for (const Chunking& c : {Chunking{1, 1, 2}, Chunking{3, 16, 1}, Chunking{17, 32, 2}}) {
    SCOPED_TRACE("prefill chunks of " + std::to_string(c.chunk) + ", block size " +
                 std::to_string(c.block_size) + ", " + std::to_string(c.threads) + " threads");
    const Prompts some(prompts.begin(), prompts.begin() + 7);
    Scenario sc;
    sc.long_prefill_token_threshold = c.chunk;
    sc.block_size = c.block_size;
    sc.num_blocks = 8192 / c.block_size;
    sc.threads = c.threads;
    ExpectBitwiseSame(Run(*w, some, max_tokens, sc), oracle.logits,
                      RowsOf(oracle.logits, prompts, 7));
  }
  {
    SCOPED_TRACE("prefix-cache hits (every prompt sent twice)");
    const Prompts some(prompts.begin(), prompts.begin() + 32);
    Scenario sc;
    sc.prefix_caching = true;
    sc.rounds = 2;
    const Result r = Run(*w, some, max_tokens, sc);
    // The second round finds at least every full block of each prompt but the last token's.
    int64_t second_round_hits = 0;
    for (const std::vector<int32_t>& p : some) second_round_hits += (p.size() - 1) / 16 * 16;
    EXPECT_GE(r.stats.prefix_cache_hits, second_round_hits);
    EXPECT_GT(second_round_hits, 0);
    ExpectBitwiseSame(r, oracle.logits, RowsOf(oracle.logits, prompts, 32));
  }
  for (int32_t block_size : {1, 16}) {
    SCOPED_TRACE("preemption storm, block size " + std::to_string(block_size));
    Scenario sc;  // 64 requests of up to 72 tokens in 256 slots
    sc.block_size = block_size;
    sc.num_blocks = 256 / block_size;
    sc.prefix_caching = true;
    sc.max_num_batched_tokens = 256;
    const Result r = Run(*w, prompts, max_tokens, sc);
    int once = 0, thrice = 0;
    for (const auto& [id, count] : r.stats.preemptions_of) {
      once += count == 1;
      thrice += count >= 3;
    }
    EXPECT_GT(once, 0);
    EXPECT_GT(thrice, 0);
    ExpectBitwiseSame(r, oracle.logits, oracle.logits.size());
  }
}

// The same on a bf16 KV cache (--kv-cache-dtype bfloat16 on the CPU): alone, in a crowd, in
// prefill chunks and through a preemption storm with prefix caching, bitwise; and the logits are
// not the fp32 cache's (the cache really holds bf16).
TEST_F(BatchInvarianceTest, Stories260KLogitsAreBitwiseTheSameOnABf16KvCache) {
  auto w = LoadLlama2cCheckpoint(kShared + "/models/stories260K.bin");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const Prompts prompts = MakePrompts(32, 512, 15, 8, 48);
  const int32_t max_tokens = 16;
  Scenario alone;
  alone.one_at_a_time = true;
  alone.threads = 1;
  alone.kv_cache_dtype = DType::kBFloat16;
  const Result oracle = Run(*w, prompts, max_tokens, alone);
  ASSERT_EQ(oracle.logits.size(), 32u * max_tokens);
  {
    Scenario fp32 = alone;
    fp32.kv_cache_dtype = DType::kFloat32;
    const Result r = Run(*w, prompts, max_tokens, fp32);
    int differ = 0, shared = 0;
    for (const auto& [history, logits] : oracle.logits) {
      auto it = r.logits.find(history);
      if (it == r.logits.end()) continue;
      ++shared;
      differ += std::memcmp(it->second.data(), logits.data(), logits.size() * 4) != 0;
    }
    EXPECT_GT(shared, 0);
    EXPECT_GT(differ, shared / 2) << "a bf16 cache gave the fp32 cache's logits";
  }
  {
    SCOPED_TRACE("batch of 32");
    Scenario crowd;
    crowd.kv_cache_dtype = DType::kBFloat16;
    const Result r = Run(*w, prompts, max_tokens, crowd);
    EXPECT_GE(r.stats.max_running, 32);
    ExpectBitwiseSame(r, oracle.logits, oracle.logits.size());
  }
  {
    SCOPED_TRACE("prefill chunks of 3, block size 1");
    Scenario sc;
    sc.long_prefill_token_threshold = 3;
    sc.block_size = 1;
    sc.num_blocks = 8192;
    sc.kv_cache_dtype = DType::kBFloat16;
    ExpectBitwiseSame(Run(*w, prompts, max_tokens, sc), oracle.logits, oracle.logits.size());
  }
  {
    SCOPED_TRACE("preemption storm, block size 16, prefix caching");
    Scenario sc;  // 32 requests of up to 64 tokens in 128 slots
    sc.num_blocks = 8;
    sc.prefix_caching = true;
    sc.max_num_batched_tokens = 256;
    sc.kv_cache_dtype = DType::kBFloat16;
    const Result r = Run(*w, prompts, max_tokens, sc);
    int preempted = 0;
    for (const auto& [id, count] : r.stats.preemptions_of) preempted += count > 0;
    EXPECT_GT(preempted, 0);
    ExpectBitwiseSame(r, oracle.logits, oracle.logits.size());
  }
}

TEST_F(BatchInvarianceTest, Stories15MShapeLogitsAreBitwiseTheSameInEveryArrangement) {
  testing_util::ScratchDir dir("batch_invariance");
  std::optional<ModelPreset> preset = FindModelPreset("stories15M");
  ASSERT_TRUE(preset.has_value());
  Llama2cHeader h = preset->header;
  h.seq_len = 128;
  const std::string path = dir / "stories15M.bin";
  ASSERT_TRUE(WriteRandomLlama2cCheckpoint(path, h, 15).ok());
  auto w = LoadLlama2cCheckpoint(path);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const Prompts prompts = MakePrompts(32, 32000, 16, 8, 40);
  const int32_t max_tokens = 6;
  Scenario alone;
  alone.one_at_a_time = true;
  alone.threads = 1;
  const Result oracle = Run(*w, prompts, max_tokens, alone);
  ASSERT_EQ(oracle.logits.size(), 32u * max_tokens);
  {
    SCOPED_TRACE("batch of 32, 2 threads");
    ExpectBitwiseSame(Run(*w, prompts, max_tokens, Scenario{}), oracle.logits,
                      oracle.logits.size());
  }
  {
    SCOPED_TRACE("batch of 7, chunks of 17, block size 32, prompts sent twice (prefix hits)");
    const Prompts some(prompts.begin(), prompts.begin() + 7);
    Scenario sc;
    sc.long_prefill_token_threshold = 17;
    sc.block_size = 32;
    sc.num_blocks = 64;
    sc.prefix_caching = true;
    sc.rounds = 2;
    const Result r = Run(*w, some, max_tokens, sc);
    EXPECT_GT(r.stats.prefix_cache_hits, 0);
    ExpectBitwiseSame(r, oracle.logits, RowsOf(oracle.logits, prompts, 7));
  }
  {
    SCOPED_TRACE("preemption storm, block size 1, 1 thread");
    Scenario sc;  // 32 requests of up to 46 tokens in 256 slots
    sc.block_size = 1;
    sc.num_blocks = 256;
    sc.threads = 1;
    sc.max_num_batched_tokens = 128;
    const Result r = Run(*w, prompts, max_tokens, sc);
    int preempted = 0;
    for (const auto& [id, count] : r.stats.preemptions_of) preempted += count > 0;
    EXPECT_GT(preempted, 0);
    ExpectBitwiseSame(r, oracle.logits, oracle.logits.size());
  }
}

}  // namespace
}  // namespace tinyserve
