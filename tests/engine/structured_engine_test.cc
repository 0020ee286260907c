// Structured outputs in the engine (EngineRequest::grammar): every constrained sampled row gets
// its grammar mask in the batch, the matcher follows the sampled tokens, a token the grammar
// rejects fails only its request, and outputs are identical alone, batched and preempted (the
// matcher is replayed after a recompute); with an executor that AwaitsBitmaskFill(), the masks are
// filled while Execute() runs, awaited before sampling, and never outlive the step.
#include <functional>
#include <map>
#include <memory>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "structured/grammar.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/fake_executor.h"

namespace tinyserve {
namespace {

using testing::FakeExecutor;
using testing::MakeEngineRequest;
using testing::RecordingObserver;

constexpr int32_t kStructuredVocab = 40;  // not a multiple of 32: a partial last mask word
constexpr int32_t kEos = 0;

// Token bytes: 0 = EOS, 1..10 = "0".."9", 11 = "a", 12 = "b", 13 = "ab", 14 = "-", 15 = "a-",
// 16..39 = letters the grammars below never allow.
std::shared_ptr<const structured::Vocabulary> TestVocabulary() {
  std::vector<std::string> bytes(kStructuredVocab);
  for (int32_t d = 0; d < 10; ++d) bytes[1 + d] = std::string(1, static_cast<char>('0' + d));
  bytes[11] = "a";
  bytes[12] = "b";
  bytes[13] = "ab";
  bytes[14] = "-";
  bytes[15] = "a-";
  for (int32_t t = 16; t < kStructuredVocab; ++t)
    bytes[t] = std::string(1, static_cast<char>('c' + t - 16));
  return std::make_shared<const structured::Vocabulary>(std::move(bytes),
                                                        std::vector<int32_t>{kEos});
}

std::shared_ptr<const structured::CompiledGrammar> CompileOk(const structured::ConstraintSpec& s) {
  auto grammar = structured::Compile(s, TestVocabulary());
  EXPECT_TRUE(grammar.ok()) << grammar.status().ToString();
  return grammar.ok() ? *grammar : nullptr;
}

structured::ConstraintSpec GrammarSpec() {
  structured::ConstraintSpec s;
  s.kind = structured::ConstraintKind::kGrammar;
  s.text = "root ::= [ab]+ \"-\" [0-9] [0-9] [0-9]?\n";
  return s;
}

std::string TextOf(const std::vector<int32_t>& tokens) {
  const auto vocabulary = TestVocabulary();
  std::string text;
  for (int32_t t : tokens) text += vocabulary->token_bytes(t);
  return text;
}

// [ab]+-DD or [ab]+-DDD.
bool MatchesGrammar(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (text[i] == 'a' || text[i] == 'b')) ++i;
  if (i == 0 || i >= text.size() || text[i] != '-') return false;
  const std::string digits = text.substr(i + 1);
  if (digits.size() != 2 && digits.size() != 3) return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

EngineRequest Constrained(const std::string& id, int32_t salt, uint64_t seed,
                          std::shared_ptr<const structured::CompiledGrammar> grammar) {
  EngineRequest r =
      MakeEngineRequest(id, testing::Prompt(5 + salt % 4, salt, kStructuredVocab), 24);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.sampling.ignore_eos = false;
  r.grammar = std::move(grammar);
  return r;
}

// An executor that lets the engine fill the masks while it runs: it awaits them before its sampling
// (and before the fake's copy of the batch), and records what it saw.
class OverlappingExecutor : public FakeExecutor {
 public:
  using FakeExecutor::FakeExecutor;
  bool AwaitsBitmaskFill() const override { return true; }
  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override {
    if (on_execute) on_execute(batch);
    if (batch.bitmask_fill != nullptr) fills.push_back(batch.bitmask_fill);
    batch.AwaitBitmask();
    done_when_sampling.push_back(batch.bitmask_fill == nullptr || batch.bitmask_fill->done());
    return FakeExecutor::Execute(batch);
  }

  std::function<void(const ScheduledBatch&)> on_execute;  // at the start of Execute()
  std::vector<std::shared_ptr<const BitmaskFill>> fills;  // every step's fill
  std::vector<bool> done_when_sampling;                   // per Execute(): after AwaitBitmask()
};

struct RunResult {
  std::map<std::string, RequestOutput> outputs;
  int64_t preemptions = 0;
  std::vector<ScheduledBatch> batches;
  std::vector<SchedulerStats> steps;
};

// Runs `requests` to the end on an engine over `num_blocks` blocks of 4 slots; with `overlap`, on
// an OverlappingExecutor (the masks filled on the engine's mask worker during Execute()).
RunResult RunAll(std::vector<EngineRequest> requests, int32_t num_blocks, int32_t max_num_seqs = 8,
                 bool overlap = false) {
  FakeClock clock;
  FakeExecutor plain(num_blocks, 4, kStructuredVocab, /*max_model_len=*/64, &clock, 1.0);
  OverlappingExecutor overlapping(num_blocks, 4, kStructuredVocab, /*max_model_len=*/64, &clock,
                                  1.0);
  FakeExecutor& executor = overlap ? overlapping : plain;
  RecordingObserver recorder;
  EngineConfig config;
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = 16;
  config.eos_token_id = kEos;
  EngineCore core(config, &executor, &clock);
  core.AddObserver(&recorder);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (EngineRequest& r : requests) {
    const std::string id = r.request_id;
    streams[id] = testing::SubmitOk(core, std::move(r));
  }
  testing::RunUntilIdle(core);
  RunResult run;
  for (auto& [id, stream] : streams) run.outputs[id] = testing::Drain(*stream);
  for (const SchedulerStats& s : recorder.steps) run.preemptions += s.num_preemptions;
  run.batches = executor.batches();
  run.steps = recorder.steps;
  return run;
}

TEST(StructuredEngineTest, MasksReachTheBatchAndTheMatcherFollowsTheTokens) {
  const auto grammar = CompileOk(GrammarSpec());
  ASSERT_NE(grammar, nullptr);
  std::vector<EngineRequest> requests;
  requests.push_back(Constrained("c", 3, 11, grammar));
  EngineRequest plain = MakeEngineRequest("p", testing::Prompt(6, 9, kStructuredVocab), 10);
  requests.push_back(std::move(plain));
  RunResult run = RunAll(std::move(requests), /*num_blocks=*/64);

  const RequestOutput& c = run.outputs["c"];
  ASSERT_TRUE(c.finished);
  EXPECT_EQ(c.finish_reason, FinishReason::kStop) << c.error_message;
  ASSERT_FALSE(c.token_ids.empty());
  EXPECT_EQ(c.token_ids.back(), kEos);
  const std::vector<int32_t> body(c.token_ids.begin(), c.token_ids.end() - 1);
  EXPECT_TRUE(MatchesGrammar(TextOf(body))) << TextOf(body);
  EXPECT_EQ(run.outputs["p"].token_ids.size(), 10u);

  // Each step's mask of "c" is the mask of a matcher fed the outputs so far, and allows the
  // token that came out; "p" never has one.
  structured::Matcher matcher(grammar);
  std::vector<uint32_t> want(static_cast<size_t>(matcher.bitmask_words()));
  size_t next = 0;
  int32_t masked_steps = 0;
  for (const ScheduledBatch& b : run.batches) {
    EXPECT_TRUE(b.Validate(64, 4).ok());
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      if (!b.sample[s]) continue;
      const bool is_c = b.request_keys[s] == 0;  // "c" was submitted first
      ASSERT_EQ(b.bitmask_of(s) != nullptr, is_c) << "key " << b.request_keys[s];
      if (!is_c) continue;
      ASSERT_EQ(b.bitmask_words, (kStructuredVocab + 31) / 32);
      ASSERT_LT(next, c.token_ids.size());
      matcher.FillNextTokenBitmask(want);
      EXPECT_EQ(std::vector<uint32_t>(b.bitmask_of(s), b.bitmask_of(s) + b.bitmask_words), want)
          << "output " << next;
      const int32_t token = c.token_ids[next++];
      EXPECT_TRUE((want[token / 32] >> (token % 32)) & 1u) << "token " << token;
      ASSERT_TRUE(matcher.AcceptToken(token));
      ++masked_steps;
    }
  }
  EXPECT_EQ(next, c.token_ids.size());
  EXPECT_TRUE(matcher.is_terminated());
  // The stats count the masked rows.
  int32_t counted = 0;
  for (const SchedulerStats& s : run.steps) {
    counted += s.num_structured_seqs;
    EXPECT_GE(s.structured_mask_seconds, 0.0);
  }
  EXPECT_EQ(counted, masked_steps);
}

// The same seeded constrained requests alone, batched, and under a preemption storm (a KV cache
// far too small): identical tokens, every output in the language.
TEST(StructuredEngineTest, OutputsAreIdenticalAloneBatchedAndPreempted) {
  const auto grammar = CompileOk(GrammarSpec());
  structured::ConstraintSpec choice;
  choice.kind = structured::ConstraintKind::kChoice;
  choice.choices = {"ab-12", "ba-345", "a-00"};
  const auto choices = CompileOk(choice);
  ASSERT_NE(grammar, nullptr);
  ASSERT_NE(choices, nullptr);
  auto make = [&](int i) {
    return Constrained(testing::Name("r", i), i, 100 + static_cast<uint64_t>(i),
                       i % 3 == 2 ? choices : grammar);
  };
  std::map<std::string, std::vector<int32_t>> alone;
  for (int i = 0; i < 8; ++i) {
    std::vector<EngineRequest> one;
    one.push_back(make(i));
    RunResult run = RunAll(std::move(one), 64);
    alone[testing::Name("r", i)] = run.outputs[testing::Name("r", i)].token_ids;
  }
  std::vector<EngineRequest> batch, storm, batch_overlapped, storm_overlapped;
  for (int i = 0; i < 8; ++i) batch.push_back(make(i));
  for (int i = 0; i < 8; ++i) storm.push_back(make(i));
  for (int i = 0; i < 8; ++i) batch_overlapped.push_back(make(i));
  for (int i = 0; i < 8; ++i) storm_overlapped.push_back(make(i));
  RunResult batched = RunAll(std::move(batch), 64);
  RunResult preempted = RunAll(std::move(storm), /*num_blocks=*/9);
  // The same with the masks filled while Execute() runs.
  RunResult batched_overlapped = RunAll(std::move(batch_overlapped), 64, 8, /*overlap=*/true);
  RunResult preempted_overlapped = RunAll(std::move(storm_overlapped), 9, 8, /*overlap=*/true);
  EXPECT_GT(preempted.preemptions, 0);
  EXPECT_GT(preempted_overlapped.preemptions, 0);
  for (int i = 0; i < 8; ++i) {
    const std::string id = testing::Name("r", i);
    const std::vector<int32_t>& want = alone[id];
    ASSERT_FALSE(want.empty()) << id;
    EXPECT_EQ(want.back(), kEos) << id;
    const std::string text = TextOf(std::vector<int32_t>(want.begin(), want.end() - 1));
    if (i % 3 == 2) {
      EXPECT_TRUE(text == "ab-12" || text == "ba-345" || text == "a-00") << text;
    } else {
      EXPECT_TRUE(MatchesGrammar(text)) << text;
    }
    EXPECT_EQ(batched.outputs[id].token_ids, want) << id;
    EXPECT_EQ(preempted.outputs[id].token_ids, want) << id;
    EXPECT_EQ(preempted.outputs[id].finish_reason, FinishReason::kStop) << id;
    EXPECT_EQ(batched_overlapped.outputs[id].token_ids, want) << id;
    EXPECT_EQ(preempted_overlapped.outputs[id].token_ids, want) << id;
  }
}

// The fill is held back until Execute() has begun (a hook on the fill that waits for a semaphore
// Execute() releases), so Execute() deterministically starts before the masks are done; the
// executor's AwaitBitmask() then returns only once they are, and they are exactly the matcher's
// masks. The stats count the fills and the time the executor waited.
TEST(StructuredEngineTest, TheMaskFillOverlapsExecuteAndIsAwaitedBeforeSampling) {
  const auto grammar = CompileOk(GrammarSpec());
  ASSERT_NE(grammar, nullptr);
  FakeClock clock;
  OverlappingExecutor executor(64, 4, kStructuredVocab, 64, &clock, 1.0);
  RecordingObserver recorder;
  EngineConfig config;
  config.eos_token_id = kEos;
  EngineCore core(config, &executor, &clock);
  core.AddObserver(&recorder);
  std::counting_semaphore<> execute_began(0);
  int32_t hooks =
      0;  // written on the mask worker, read after the run (the fills' Wait() orders it)
  // On the engine thread (no overlap) the hook must not wait: Execute() would never come.
  const std::thread::id engine_thread = std::this_thread::get_id();
  core.SetMaskFillHookForTesting([&] {
    ++hooks;
    if (std::this_thread::get_id() == engine_thread) {
      ADD_FAILURE() << "the mask fill ran on the engine thread";
      return;
    }
    execute_began.acquire();
  });
  std::vector<bool> done_when_execute_began;
  executor.on_execute = [&](const ScheduledBatch& batch) {
    if (batch.bitmask_fill == nullptr) return;
    done_when_execute_began.push_back(batch.bitmask_fill->done());
    execute_began.release();
  };
  auto cs = testing::SubmitOk(core, Constrained("c", 3, 11, grammar));
  auto ps =
      testing::SubmitOk(core, MakeEngineRequest("p", testing::Prompt(6, 9, kStructuredVocab), 10));
  testing::RunUntilIdle(core);
  const RequestOutput c = testing::Drain(*cs);
  ASSERT_TRUE(c.finished);
  EXPECT_EQ(c.finish_reason, FinishReason::kStop) << c.error_message;
  ASSERT_GE(c.token_ids.size(), 4u);
  EXPECT_TRUE(
      MatchesGrammar(TextOf(std::vector<int32_t>(c.token_ids.begin(), c.token_ids.end() - 1))));
  EXPECT_EQ(testing::Drain(*ps).token_ids.size(), 10u);

  // One fill per sampled step of "c", each begun-before-done and done when sampling.
  ASSERT_EQ(executor.fills.size(), c.token_ids.size());
  EXPECT_EQ(hooks, static_cast<int32_t>(c.token_ids.size()));
  EXPECT_EQ(done_when_execute_began, std::vector<bool>(c.token_ids.size(), false));
  for (bool done : executor.done_when_sampling) EXPECT_TRUE(done);
  for (const auto& fill : executor.fills) EXPECT_TRUE(fill->done());
  // The masks the executor sampled with (its copies, made after the await) are the matcher's.
  structured::Matcher matcher(grammar);
  std::vector<uint32_t> want(static_cast<size_t>(matcher.bitmask_words()));
  size_t next = 0;
  for (const ScheduledBatch& b : executor.batches()) {
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      if (b.bitmask_of(s) == nullptr) continue;
      ASSERT_LT(next, c.token_ids.size());
      matcher.FillNextTokenBitmask(want);
      EXPECT_EQ(std::vector<uint32_t>(b.bitmask_of(s), b.bitmask_of(s) + b.bitmask_words), want);
      ASSERT_TRUE(matcher.AcceptToken(c.token_ids[next++]));
    }
  }
  EXPECT_EQ(next, c.token_ids.size());
  int32_t counted = 0;
  for (const SchedulerStats& s : recorder.steps) {
    counted += s.num_structured_seqs;
    EXPECT_GE(s.structured_mask_awaited_seconds, 0.0);
  }
  EXPECT_EQ(counted, static_cast<int32_t>(c.token_ids.size()));
}

// An executor that awaits the masks but fails (an error, or an exception) without awaiting them:
// the engine still waits for the fill before the step ends, and the batch's requests fail.
TEST(StructuredEngineTest, TheEngineWaitsForTheFillWhenExecuteFails) {
  const auto grammar = CompileOk(GrammarSpec());
  ASSERT_NE(grammar, nullptr);
  for (bool throws : {false, true}) {
    class FailingExecutor : public OverlappingExecutor {
     public:
      using OverlappingExecutor::OverlappingExecutor;
      StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override {
        if (on_execute) on_execute(batch);
        if (batch.bitmask_fill == nullptr) return FakeExecutor::Execute(batch);
        fills.push_back(batch.bitmask_fill);
        if (throws) throw std::runtime_error("injected");
        return Unavailable("injected device failure");
      }
      bool throws = false;
    };
    FakeClock clock;
    FailingExecutor executor(64, 4, kStructuredVocab, 64, &clock, 1.0);
    executor.throws = throws;
    EngineConfig config;
    config.eos_token_id = kEos;
    EngineCore core(config, &executor, &clock);
    std::counting_semaphore<> execute_began(0);
    const std::thread::id engine_thread = std::this_thread::get_id();
    core.SetMaskFillHookForTesting([&] {
      if (std::this_thread::get_id() != engine_thread) execute_began.acquire();
    });
    executor.on_execute = [&](const ScheduledBatch& batch) {
      if (batch.bitmask_fill != nullptr) execute_began.release();
    };
    auto cs = testing::SubmitOk(core, Constrained("c", 3, 11, grammar));
    testing::RunUntilIdle(core);
    const RequestOutput c = testing::Drain(*cs);
    EXPECT_EQ(c.finish_reason, FinishReason::kError) << throws;
    ASSERT_EQ(executor.fills.size(), 1u) << throws;
    EXPECT_TRUE(executor.fills[0]->done()) << throws;
  }
}

// An executor that drops the masks (a backend bug): the first token the grammar rejects fails that
// request with an error naming the token; an unconstrained neighbour finishes normally.
class MaskDroppingExecutor : public FakeExecutor {
 public:
  using FakeExecutor::FakeExecutor;
  StatusOr<ExecutorOutput> Execute(const ScheduledBatch& batch) override {
    ScheduledBatch copy = batch;
    copy.bitmask_words = 0;
    copy.token_bitmask.clear();
    copy.bitmask_row.clear();
    return FakeExecutor::Execute(copy);
  }
};

TEST(StructuredEngineTest, ARejectedTokenFailsOnlyItsRequest) {
  structured::ConstraintSpec choice;
  choice.kind = structured::ConstraintKind::kChoice;
  choice.choices = {"ab-12"};
  const auto grammar = CompileOk(choice);
  ASSERT_NE(grammar, nullptr);
  FakeClock clock;
  MaskDroppingExecutor executor(64, 4, kStructuredVocab, 64, &clock, 1.0);
  EngineConfig config;
  config.eos_token_id = kEos;
  EngineCore core(config, &executor, &clock);
  EngineRequest c = MakeEngineRequest("c", testing::Prompt(6, 2, kStructuredVocab), 12);
  c.grammar = grammar;
  // Greedy: the fake model's argmax; find where the grammar first rejects it.
  auto cs = testing::SubmitOk(core, std::move(c));
  auto ps =
      testing::SubmitOk(core, MakeEngineRequest("p", testing::Prompt(6, 2, kStructuredVocab), 12));
  testing::RunUntilIdle(core);
  const RequestOutput p = testing::Drain(*ps);
  const RequestOutput got = testing::Drain(*cs);
  EXPECT_EQ(p.finish_reason, FinishReason::kLength);
  ASSERT_EQ(p.token_ids.size(), 12u);
  structured::Matcher m(grammar);
  size_t rejected = 0;
  while (rejected < p.token_ids.size() && m.AcceptToken(p.token_ids[rejected])) ++rejected;
  ASSERT_LT(rejected, p.token_ids.size()) << "the unconstrained output happens to fit";
  EXPECT_EQ(got.finish_reason, FinishReason::kError);
  EXPECT_EQ(got.error_message, "structured output: the sampled token " +
                                   std::to_string(p.token_ids[rejected]) +
                                   " is not allowed by the grammar");
  EXPECT_EQ(got.token_ids,
            std::vector<int32_t>(p.token_ids.begin(), p.token_ids.begin() + rejected + 1));
}

TEST(StructuredEngineTest, AGrammarForAnotherVocabularySizeIsRefused) {
  structured::ConstraintSpec choice;
  choice.kind = structured::ConstraintKind::kChoice;
  choice.choices = {"a"};
  auto grammar =
      structured::Compile(choice, std::make_shared<const structured::Vocabulary>(
                                      std::vector<std::string>{"", "a"}, std::vector<int32_t>{0}));
  ASSERT_TRUE(grammar.ok()) << grammar.status().ToString();
  FakeClock clock;
  FakeExecutor executor(16, 4, kStructuredVocab, 64, &clock, 1.0);
  EngineCore core(EngineConfig{}, &executor, &clock);
  EngineRequest r = MakeEngineRequest("r", {1, 2}, 4);
  r.grammar = *grammar;
  StatusOr<std::shared_ptr<RequestStream>> s = core.Submit(std::move(r));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "the request's grammar was compiled for a vocabulary of 2 tokens; the model has 40");
}

TEST(ScheduledBatchBitmaskTest, ValidateChecksTheMaskShape) {
  ScheduledBatch b;
  b.max_blocks_per_seq = 1;
  b.AddSequence({1}, {0}, {0}, 1, {0}, /*wants_logits=*/true);
  b.AddSequence({2}, {0}, {4}, 1, {1}, /*wants_logits=*/false);
  EXPECT_TRUE(b.Validate(2, 4).ok());
  b.bitmask_words = 2;
  b.token_bitmask.assign(2, ~0u);
  EXPECT_FALSE(b.Validate(2, 4).ok());  // rows without bitmask_row
  b.bitmask_row = {0, -1};
  EXPECT_TRUE(b.Validate(2, 4).ok());
  EXPECT_EQ(b.bitmask_of(0), b.token_bitmask.data());
  EXPECT_EQ(b.bitmask_of(1), nullptr);
  b.bitmask_row = {-1, 0};  // an unsampled sequence
  EXPECT_FALSE(b.Validate(2, 4).ok());
  b.bitmask_row = {1, -1};  // outside the mask
  EXPECT_FALSE(b.Validate(2, 4).ok());
  b.bitmask_row = {0};  // not num_seqs entries
  EXPECT_FALSE(b.Validate(2, 4).ok());
  b.bitmask_row = {0, -1};
  b.token_bitmask.assign(3, ~0u);  // not whole rows
  EXPECT_FALSE(b.Validate(2, 4).ok());
}

}  // namespace
}  // namespace tinyserve
