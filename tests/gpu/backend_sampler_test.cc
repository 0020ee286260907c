// Backend::SampleRows and Backend::ScoreRows: one test body over both backends (issue 17 item 2).
// The CPU backend runs everywhere; the CUDA backend runs on a GPU (test_gpu) and on the host
// execution layer (test_gpu_host, label gpu-host), and skips where neither can run. Each row is
// checked against CpuSampler (kernels/cpu/cpu_sampler.h, the rules) and against properties of the
// features themselves, for every sampling feature: temperature, top_k (ties), top_p, min_p,
// repetition / presence / frequency penalties from a history the backend keeps (incrementally, and
// rebuilt as after a preemption), min_tokens stop masks (and the step where they would mask
// everything), logit_bias (repeated ids), allowed_token_ids, the raw fallback when everything is
// masked, seeded Philox draws, logprobs with rank and top-n, and prompt-logprob scoring.
//
// Tokens, ranks and top-n ids must be identical across backends. The fp64 boundary cases of
// kernels/sampling.h (a draw u * total, a top_p cut or a min_p test within a few fp64 ulps of a
// boundary, where the CUDA kernels' other summation order may fall on the other side) are allowed
// by the contract but do not occur on these inputs: a mismatch here is a bug, not a boundary.
// Logprobs agree to 1e-5 (+1e-6 relative).
#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_sampler.h"
#include "tests/gpu/gpu_test_util.h"
#ifdef TINYSERVE_GPU_HOST
#include "tests/gpu_host/executor.h"
#endif

namespace tinyserve {
namespace {

// kCpuThreads: the CPU backend with three threads, whose SampleRows and ScoreRows share the rows
// of a large enough block out over its pool.
enum class Device { kCpu, kCpuThreads, kCuda };
const char* DeviceName(Device d) {
  return d == Device::kCpu ? "cpu" : (d == Device::kCpuThreads ? "cpu3threads" : "cuda");
}
void PrintTo(Device d, std::ostream* os) { *os << DeviceName(d); }

constexpr float kInf = std::numeric_limits<float>::infinity();

// A sampled row as the executor would hold it: spec, host history, output index.
struct Case {
  SamplingSpec spec;
  std::vector<int32_t> history;  // prompt, then outputs
  int32_t num_prompt = 0;
  uint64_t output_index = 0;
  PenaltyState penalties;  // the history, on the host (the reference's)
};

int32_t ArgMax(const float* x, int32_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// Case `kind` for a row of `logits` [v]; every id is in range whatever v.
Case MakeCase(int kind, const float* logits, int32_t v, uint64_t seed, std::mt19937& rng) {
  Case c;
  SamplingSpec& s = c.spec;
  s.seed = seed;
  c.output_index = seed % 9;
  const int32_t top = ArgMax(logits, v);
  auto id = [&](int32_t i) { return ((i % v) + v) % v; };
  auto random_ids = [&](int count) {
    std::vector<int32_t> ids;
    for (int i = 0; i < count; ++i)
      ids.push_back(std::uniform_int_distribution<int32_t>(0, v - 1)(rng));
    return ids;
  };
  auto history = [&](int num_prompt, int num_outputs) {
    c.history = random_ids(num_prompt + num_outputs);
    c.history.push_back(top);  // the argmax is an output: penalties move it
    c.history.push_back(top);
    c.num_prompt = num_prompt;
  };
  switch (kind) {
    case 0:
      s.temperature = 0.0f;
      s.num_logprobs = 5;
      break;
    case 1:
      break;  // temperature 1
    case 2:
      s.temperature = 0.7f;
      s.top_p = 0.9f;
      s.num_logprobs = 3;
      break;
    case 3:
      s.temperature = 1.3f;
      s.top_k = 40;
      break;
    case 4:
      s.temperature = 0.8f;
      s.top_p = 0.5f;
      s.min_p = 0.05f;
      s.top_k = 17;
      s.num_logprobs = 20;
      break;
    case 5:
      s.min_p = 0.2f;
      s.num_logprobs = 0;
      break;
    case 6:
      s.temperature = 2.0f;
      s.top_p = 0.95f;
      s.top_k = 1000;
      break;
    case 7:
      s.temperature = 0.5f;
      s.top_p = 0.1f;
      s.top_k = 2;
      s.num_logprobs = 1;
      break;
    case 8:
      s.temperature = 0.0f;
      s.repetition_penalty = 1.7f;
      history(6, 3);
      break;
    case 9:
      s.temperature = 0.9f;
      s.frequency_penalty = 0.8f;
      s.presence_penalty = 0.5f;
      history(4, 8);
      break;
    case 10:
      s.temperature = 1.1f;
      s.top_p = 0.8f;
      s.repetition_penalty = 1.3f;
      s.frequency_penalty = 0.4f;
      s.presence_penalty = -0.2f;
      history(10, 10);
      s.num_logprobs = 2;
      break;
    case 11:
      s.temperature = 0.0f;
      s.frequency_penalty = 100.0f;
      history(2, 2);
      break;
    case 12:  // min_tokens active: the argmax and a few others masked
      s.temperature = 0.0f;
      s.min_tokens = 1000;
      s.min_tokens_masked_ids = {top, id(top + 1), id(top + 2)};
      break;
    case 13:  // min_tokens passed: nothing masked
      s.temperature = 0.6f;
      s.min_tokens = 1;
      c.output_index = 3;
      s.min_tokens_masked_ids = {top};
      break;
    case 14:  // the stop ids cover every allowed id: the step is not masked
      s.temperature = 0.0f;
      s.min_tokens = 1000;
      s.allowed_token_ids = {id(top + 3), top};
      s.min_tokens_masked_ids = {top, id(top + 3)};
      break;
    case 15:  // logit_bias: a big push, a pull on the argmax, a repeated id
      s.temperature = 0.0f;
      s.logit_bias = {
          {id(top + 5), 0.3f}, {top, -40.0f}, {id(top + 5), 0.7f}, {id(top + 6), 50.0f}};
      s.num_logprobs = 4;
      break;
    case 16:
      s.temperature = 0.8f;
      s.logit_bias = {{id(top + 1), 1.5f}, {id(top + 2), -1.5f}};
      s.allowed_token_ids = random_ids(12);
      break;
    case 17:
      s.temperature = 0.0f;
      s.allowed_token_ids = random_ids(5);
      s.allowed_token_ids.push_back(s.allowed_token_ids[0]);
      break;
    case 18:
      s.temperature = 1.2f;
      s.top_k = 3;
      s.allowed_token_ids = random_ids(10);
      break;
    case 19:  // every allowed id biased to -inf: the raw argmax among the allowed ids
      s.temperature = 0.9f;
      s.allowed_token_ids = random_ids(6);
      for (int32_t a : s.allowed_token_ids) s.logit_bias.emplace_back(a, -kInf);
      s.num_logprobs = 3;
      break;
    default:  // everything at once
      s.temperature = 0.9f;
      s.top_k = 50;
      s.top_p = 0.9f;
      s.min_p = 0.01f;
      s.allowed_token_ids = random_ids(200);
      s.min_tokens = 100;
      s.min_tokens_masked_ids = {s.allowed_token_ids[0], top};
      s.logit_bias = {{s.allowed_token_ids[1], 3.0f}};
      s.repetition_penalty = 1.2f;
      s.frequency_penalty = 0.3f;
      s.presence_penalty = 0.1f;
      history(30, 5);
      s.num_logprobs = 4;
      break;
  }
  if (s.has_penalties()) c.penalties.Reset(c.history, c.num_prompt);
  return c;
}
constexpr int kNumKinds = 21;

class BackendSamplerTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam() == Device::kCpu) {
      backend_ = CreateCpuBackend(1);
    } else if (GetParam() == Device::kCpuThreads) {
      backend_ = CreateCpuBackend(3);
    } else {
      TS_SKIP_WITHOUT_CUDA();
      backend_ = MakeCudaBackend(DType::kFloat32);
    }
    ASSERT_NE(backend_, nullptr);
  }

  DeviceBuffer Upload(const std::vector<float>& host) {
    DeviceBuffer d(backend_.get(), host.size() * sizeof(float));
    backend_->CopyToDevice(d.as<void>(), host.data(), host.size() * sizeof(float));
    return d;
  }

  // The rows of `cases`, their histories set into slots first + 0, 1, ... when the backend keeps
  // them.
  std::vector<SampleRow> Rows(const std::vector<Case>& cases, int32_t vocab, int32_t first = 0) {
    std::vector<SampleRow> rows;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      SampleRow r{&c.spec, &c.penalties, c.output_index};
      if (backend_->KeepsPenaltyHistory() && c.spec.has_penalties()) {
        r.penalty_slot = first + static_cast<int32_t>(i);
        backend_->SetPenaltyHistory(r.penalty_slot, vocab, c.history.data(),
                                    static_cast<int32_t>(c.history.size()), c.num_prompt);
      }
      rows.push_back(r);
    }
    return rows;
  }

  // Also checks, where the host execution layer counts copies, that the call's arguments (rows,
  // id lists, biases, token masks) went up to the CUDA backend in one copy.
  std::vector<TokenLogprobs> Sample(const float* d_logits, int32_t vocab,
                                    const std::vector<SampleRow>& rows) {
    std::vector<TokenLogprobs> out(rows.size());
    Status s = Status::Ok();
    EXPECT_EQ(CopiesDuring([&] {
                s = backend_->SampleRows(d_logits, vocab, rows.data(),
                                         static_cast<int32_t>(rows.size()), out.data());
              }),
              1);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  // The host-to-device copies the CUDA backend makes while f() runs, counted by the host execution
  // layer; 1 where nothing counts them (the CPU backends, a real GPU).
  template <typename F>
  int64_t CopiesDuring(F f) {
#ifdef TINYSERVE_GPU_HOST
    if (GetParam() == Device::kCuda) {
      const int64_t before = gpu_host::CopiesToDevice().copies;
      f();
      return gpu_host::CopiesToDevice().copies - before;
    }
#endif
    f();
    return 1;
  }

  std::unique_ptr<Backend> backend_;
};

// got against CpuSampler's answer `want` for a row with `num_logprobs`.
void ExpectSame(const TokenLogprobs& got, const TokenLogprobs& want, int32_t num_logprobs) {
  EXPECT_EQ(got.token_id, want.token_id);
  if (num_logprobs < 0) {
    EXPECT_EQ(got.rank, 0);
    EXPECT_TRUE(got.top.empty());
    return;
  }
  EXPECT_NEAR(got.logprob, want.logprob, 1e-5 + 1e-6 * std::abs(want.logprob));
  EXPECT_EQ(got.rank, want.rank);
  ASSERT_EQ(got.top.size(), want.top.size());
  for (size_t j = 0; j < want.top.size(); ++j) {
    EXPECT_EQ(got.top[j].first, want.top[j].first) << "top " << j;
    EXPECT_NEAR(got.top[j].second, want.top[j].second, 1e-5 + 1e-6 * std::abs(want.top[j].second));
  }
}

// Properties each feature guarantees, whatever the implementation.
void ExpectFeatures(const Case& c, const float* logits, int32_t v, const TokenLogprobs& got) {
  const SamplingSpec& s = c.spec;
  ASSERT_GE(got.token_id, 0);
  ASSERT_LT(got.token_id, v);
  const auto& allowed = s.allowed_token_ids;
  if (!allowed.empty()) {
    EXPECT_NE(std::find(allowed.begin(), allowed.end(), got.token_id), allowed.end());
  }
  const bool plain = s.allowed_token_ids.empty() && s.logit_bias.empty() && !s.has_penalties() &&
                     c.output_index >= static_cast<uint64_t>(s.min_tokens);
  if (s.is_greedy() && plain) {
    EXPECT_EQ(got.token_id, ArgMax(logits, v));
  }
  if (allowed.empty() && c.output_index < static_cast<uint64_t>(s.min_tokens) &&
      s.min_tokens_masked_ids.size() < static_cast<size_t>(v)) {
    const auto& m = s.min_tokens_masked_ids;
    EXPECT_EQ(std::find(m.begin(), m.end(), got.token_id), m.end()) << "a masked stop id";
  }
  if (s.num_logprobs >= 0) {
    EXPECT_GE(got.rank, 1);
    EXPECT_LE(got.logprob, 0.0f);
    ASSERT_EQ(got.top.size(), static_cast<size_t>(std::min(s.num_logprobs, v)));
    if (!got.top.empty()) {
      EXPECT_EQ(got.top[0].first, ArgMax(logits, v));
    }
    for (size_t j = 1; j < got.top.size(); ++j) EXPECT_LE(got.top[j].second, got.top[j - 1].second);
  }
}

std::vector<float> RandomLogits(std::mt19937& rng, int32_t rows, int32_t v) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(rows) * v);
  for (float& x : logits) x = d(rng);
  // Ties around the top-k boundary: every third entry of row 1 the same value.
  if (rows > 1) {
    for (int32_t i = 0; i < v; i += 3) logits[v + i] = 2.5f;
  }
  return logits;
}

TEST_P(BackendSamplerTest, EveryFeatureMatchesTheCpuRulesOnAwkwardSizes) {
  std::mt19937 rng(17);
  for (int32_t v : {1, 7, 32000 + 13}) {
    for (int32_t n : {1, 3, 65}) {
      SCOPED_TRACE("vocab " + std::to_string(v) + ", rows " + std::to_string(n));
      const std::vector<float> logits = RandomLogits(rng, n, v);
      std::vector<Case> cases;
      for (int32_t r = 0; r < n; ++r) {
        cases.push_back(MakeCase((r + n) % kNumKinds, &logits[static_cast<size_t>(r) * v], v,
                                 1000 + 31 * r + n, rng));
      }
      DeviceBuffer d = Upload(logits);
      const std::vector<TokenLogprobs> got = Sample(d.as<float>(), v, Rows(cases, v));
      CpuSampler cpu(v);
      for (int32_t r = 0; r < n; ++r) {
        SCOPED_TRACE("row " + std::to_string(r) + ", kind " + std::to_string((r + n) % kNumKinds));
        const float* row = &logits[static_cast<size_t>(r) * v];
        TokenLogprobs want;
        want.token_id =
            cpu.Sample({&cases[r].spec, &cases[r].penalties, cases[r].output_index}, row, &want);
        ExpectSame(got[r], want, cases[r].spec.num_logprobs);
        ExpectFeatures(cases[r], row, v, got[r]);
      }
    }
  }
}

// Structured-output token bitmasks (SampleRow::token_bitmask) on top of every feature, on vocab
// sizes that leave the last mask word partial: the backend's token is the CPU rules' token. Masks
// range from dense to a single token, to none allowed (the fallback), to no mask at all.
TEST_P(BackendSamplerTest, TokenBitmasksMatchTheCpuRulesOnAwkwardSizes) {
  std::mt19937 rng(23);
  for (int32_t v : {33, 1000}) {
    for (int32_t n : {1, 6, 41}) {
      SCOPED_TRACE("vocab " + std::to_string(v) + ", rows " + std::to_string(n));
      const std::vector<float> logits = RandomLogits(rng, n, v);
      const int32_t words = (v + 31) / 32;
      std::vector<Case> cases;
      std::vector<std::vector<uint32_t>> masks(n, std::vector<uint32_t>(words, 0u));
      for (int32_t r = 0; r < n; ++r) {
        cases.push_back(MakeCase((3 * r + n) % kNumKinds, &logits[static_cast<size_t>(r) * v], v,
                                 500 + 17 * r + n, rng));
        const int shape = r % 5;  // 0: half, 1: one token, 2: none, 3: a few, 4: no mask
        for (int32_t t = 0; t < v; ++t) {
          const bool on = shape == 0   ? rng() % 2 == 0
                          : shape == 1 ? t == (r * 7) % v
                          : shape == 3 ? rng() % 97 < 4
                                       : false;
          if (on) masks[r][t / 32] |= 1u << (t % 32);
        }
      }
      std::vector<SampleRow> rows = Rows(cases, v);
      for (int32_t r = 0; r < n; ++r) {
        if (r % 5 != 4) rows[r].token_bitmask = masks[r].data();
      }
      DeviceBuffer d = Upload(logits);
      const std::vector<TokenLogprobs> got = Sample(d.as<float>(), v, rows);
      CpuSampler cpu(v);
      for (int32_t r = 0; r < n; ++r) {
        SCOPED_TRACE("row " + std::to_string(r) + ", kind " +
                     std::to_string((3 * r + n) % kNumKinds) + ", mask " + std::to_string(r % 5));
        const float* row = &logits[static_cast<size_t>(r) * v];
        SampleRow ref{&cases[r].spec, &cases[r].penalties, cases[r].output_index};
        ref.token_bitmask = rows[r].token_bitmask;
        TokenLogprobs want;
        want.token_id = cpu.Sample(ref, row, &want);
        ExpectSame(got[r], want, cases[r].spec.num_logprobs);
        if (r % 5 == 1 && cases[r].spec.allowed_token_ids.empty()) {
          EXPECT_EQ(got[r].token_id, (r * 7) % v);  // the one token the mask allows
        }
      }
    }
  }
}

// The features change the token where they should (so the comparison above is not vacuous).
TEST_P(BackendSamplerTest, FeaturesMoveTheToken) {
  const int32_t v = 4099;
  std::mt19937 rng(5);
  const std::vector<float> logits = RandomLogits(rng, 1, v);
  const int32_t top = ArgMax(logits.data(), v);
  DeviceBuffer d = Upload(logits);
  auto one = [&](const Case& c) { return Sample(d.as<float>(), v, Rows({c}, v))[0].token_id; };
  EXPECT_EQ(one(MakeCase(0, logits.data(), v, 1, rng)), top);             // greedy
  EXPECT_NE(one(MakeCase(11, logits.data(), v, 1, rng)), top);            // frequency penalty
  EXPECT_NE(one(MakeCase(12, logits.data(), v, 1, rng)), top);            // min_tokens mask
  EXPECT_EQ(one(MakeCase(15, logits.data(), v, 1, rng)), (top + 6) % v);  // logit_bias
  Case c = MakeCase(19, logits.data(), v, 1, rng);                        // raw fallback
  int32_t want = c.spec.allowed_token_ids[0];
  for (int32_t a : c.spec.allowed_token_ids) {
    if (logits[a] > logits[want] || (logits[a] == logits[want] && a < want)) want = a;
  }
  EXPECT_EQ(one(c), want);
  // Seeded draws: the same (seed, index) gives the same token, other seeds spread out.
  Case hot = MakeCase(1, logits.data(), v, 1, rng);
  hot.spec.temperature = 5.0f;
  std::vector<int32_t> tokens;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    hot.spec.seed = seed;
    tokens.push_back(one(hot));
    EXPECT_EQ(one(hot), tokens.back());
  }
  std::sort(tokens.begin(), tokens.end());
  EXPECT_GT(std::unique(tokens.begin(), tokens.end()) - tokens.begin(), 4);
}

// A row's result does not depend on the batch it is sampled in: alone, among 3, among 33, the
// same token and the same logprob bits.
TEST_P(BackendSamplerTest, RowsAreBatchInvariant) {
  std::mt19937 rng(23);
  for (int32_t v : {7, 32000 + 13}) {
    SCOPED_TRACE("vocab " + std::to_string(v));
    const int32_t n = 33;
    const std::vector<float> logits = RandomLogits(rng, n, v);
    std::vector<Case> cases;
    for (int32_t r = 0; r < n; ++r) {
      cases.push_back(MakeCase(r % kNumKinds, &logits[static_cast<size_t>(r) * v], v, 7 * r, rng));
    }
    DeviceBuffer d = Upload(logits);
    const std::vector<TokenLogprobs> all = Sample(d.as<float>(), v, Rows(cases, v));
    const std::vector<TokenLogprobs> three =
        Sample(d.as<float>(), v, Rows({cases[0], cases[1], cases[2]}, v));
    for (int32_t r = 0; r < n; ++r) {
      SCOPED_TRACE("row " + std::to_string(r));
      const std::vector<TokenLogprobs> alone =
          Sample(d.as<float>() + static_cast<size_t>(r) * v, v, Rows({cases[r]}, v, 40));
      for (const TokenLogprobs* other : {&alone[0], r < 3 ? &three[r] : &alone[0]}) {
        EXPECT_EQ(other->token_id, all[r].token_id);
        EXPECT_EQ(std::memcmp(&other->logprob, &all[r].logprob, 4), 0);
        EXPECT_EQ(other->rank, all[r].rank);
        EXPECT_EQ(other->top, all[r].top);
      }
    }
  }
}

// The penalty history follows accepted tokens one at a time (AddPenaltyOutputs on a backend that
// keeps it, PenaltyState::AddOutput on the host), and a history set again from prompt + outputs
// (a preemption's recompute) continues exactly as the incremental one.
TEST_P(BackendSamplerTest, PenaltyHistoryFollowsAcceptedTokensAndSurvivesARebuild) {
  for (int32_t v : {7, 4099}) {
    SCOPED_TRACE("vocab " + std::to_string(v));
    std::mt19937 rng(29);
    const int32_t n = 3, steps = 8;
    std::vector<Case> cases;
    const std::vector<float> logits = RandomLogits(rng, n, v);
    for (int32_t r = 0; r < n; ++r) {
      cases.push_back(MakeCase(r == 0 ? 11 : (r == 1 ? 9 : 10), &logits[static_cast<size_t>(r) * v],
                               v, 100 + r, rng));
      cases[r].output_index = 0;
    }
    DeviceBuffer d = Upload(logits);  // the same logits every step: only the history moves
    std::vector<SampleRow> rows = Rows(cases, v);
    CpuSampler cpu(v);
    std::vector<int32_t> tokens0;
    for (int32_t step = 0; step < steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      if (step == 4 && backend_->KeepsPenaltyHistory()) {  // request 1 recomputed
        backend_->SetPenaltyHistory(rows[1].penalty_slot, v, cases[1].history.data(),
                                    static_cast<int32_t>(cases[1].history.size()),
                                    cases[1].num_prompt);
      }
      for (int32_t r = 0; r < n; ++r) rows[r].output_index = cases[r].output_index;
      const std::vector<TokenLogprobs> got = Sample(d.as<float>(), v, rows);
      std::vector<int32_t> slots, accepted;
      for (int32_t r = 0; r < n; ++r) {
        TokenLogprobs want;
        want.token_id = cpu.Sample({&cases[r].spec, &cases[r].penalties, cases[r].output_index},
                                   &logits[static_cast<size_t>(r) * v], &want);
        ExpectSame(got[r], want, cases[r].spec.num_logprobs);
        cases[r].penalties.AddOutput(want.token_id);
        cases[r].history.push_back(want.token_id);
        ++cases[r].output_index;
        slots.push_back(rows[r].penalty_slot);
        accepted.push_back(got[r].token_id);
      }
      tokens0.push_back(got[0].token_id);
      EXPECT_EQ(
          CopiesDuring([&] { backend_->AddPenaltyOutputs(slots.data(), accepted.data(), n); }), 1);
    }
    ASSERT_TRUE(backend_->Synchronize().ok());
    // Greedy with a frequency penalty of 100 on fixed logits: without the accepted tokens in the
    // history every step would repeat one token.
    std::sort(tokens0.begin(), tokens0.end());
    EXPECT_GE(std::unique(tokens0.begin(), tokens0.end()) - tokens0.begin(), 4);
  }
}

// Prompt logprobs: the raw logprob and rank of given tokens and their top-n (0..20, and more than
// the vocabulary), as CpuSampler::FillLogprobs.
TEST_P(BackendSamplerTest, ScoresPromptTokens) {
  std::mt19937 rng(31);
  for (int32_t v : {1, 7, 32000 + 13}) {
    for (int32_t n : {1, 3, 65}) {
      SCOPED_TRACE("vocab " + std::to_string(v) + ", rows " + std::to_string(n));
      const std::vector<float> logits = RandomLogits(rng, n, v);
      std::vector<int32_t> targets(n), num_top(n);
      for (int32_t r = 0; r < n; ++r) {
        targets[r] = std::uniform_int_distribution<int32_t>(0, v - 1)(rng);
        num_top[r] = (r * 7) % 22;  // 0 .. 21
      }
      DeviceBuffer d = Upload(logits);
      std::vector<TokenLogprobs> got(n);
      Status s = Status::Ok();
      EXPECT_EQ(CopiesDuring([&] {
                  s = backend_->ScoreRows(d.as<float>(), v, targets.data(), num_top.data(), n,
                                          got.data());
                }),
                1);
      ASSERT_TRUE(s.ok()) << s.ToString();
      CpuSampler cpu(v);
      for (int32_t r = 0; r < n; ++r) {
        SCOPED_TRACE("row " + std::to_string(r));
        TokenLogprobs want;
        cpu.FillLogprobs(&logits[static_cast<size_t>(r) * v], targets[r], num_top[r], &want);
        EXPECT_EQ(got[r].token_id, targets[r]);
        ExpectSame(got[r], want, num_top[r]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendSamplerTest,
                         ::testing::Values(Device::kCpu, Device::kCpuThreads, Device::kCuda),
                         [](const ::testing::TestParamInfo<Device>& p) {
                           return std::string(DeviceName(p.param));
                         });

// Only the requested results cross to the host: prompt logprobs of 5 rows of a [64, 32000] logits
// block bring back 5 results and their top-n, sampling 64 greedy rows 64 results: never a logits
// row (128000 bytes). Counted by the host execution layer's cudaMemcpy accounting.
TEST(BackendSamplerBytesTest, OnlyTheRequestedRowsComeBack) {
#ifndef TINYSERVE_GPU_HOST
  GTEST_SKIP() << "device-to-host bytes are counted by the host execution layer (test_gpu_host)";
#else
  TS_SKIP_WITHOUT_CUDA();
  std::unique_ptr<Backend> b = MakeCudaBackend(DType::kFloat32);
  ASSERT_NE(b, nullptr);
  const int32_t v = 32000, rows = 64;
  std::mt19937 rng(37);
  const std::vector<float> logits = RandomLogits(rng, rows, v);
  DeviceBuffer d(b.get(), logits.size() * 4);
  b->CopyToDevice(d.as<void>(), logits.data(), logits.size() * 4);
  ASSERT_TRUE(b->Synchronize().ok());

  const std::vector<int32_t> targets = {5, 31999, 0, 17, 4242}, num_top = {0, 1, 5, 20, 3};
  std::vector<TokenLogprobs> scored(5);
  const int64_t before = gpu_host::BytesCopiedToHost();
  ASSERT_TRUE(
      b->ScoreRows(d.as<float>() + 40 * v, v, targets.data(), num_top.data(), 5, scored.data())
          .ok());
  const int64_t score_bytes = gpu_host::BytesCopiedToHost() - before;
  // 16 bytes of result per row, 8 per top entry at the widest row's 20.
  EXPECT_EQ(score_bytes, 5 * 16 + 5 * 20 * 8);
  EXPECT_LT(score_bytes, int64_t{v} * 4);
  CpuSampler cpu(v);
  for (int32_t i = 0; i < 5; ++i) {
    TokenLogprobs want;
    cpu.FillLogprobs(&logits[static_cast<size_t>(40 + i) * v], targets[i], num_top[i], &want);
    ExpectSame(scored[i], want, num_top[i]);
  }

  SamplingSpec greedy;
  greedy.temperature = 0.0f;
  std::vector<SampleRow> sample(rows, SampleRow{&greedy, nullptr, 0});
  std::vector<TokenLogprobs> sampled(rows);
  const int64_t before_sample = gpu_host::BytesCopiedToHost();
  ASSERT_TRUE(b->SampleRows(d.as<float>(), v, sample.data(), rows, sampled.data()).ok());
  EXPECT_EQ(gpu_host::BytesCopiedToHost() - before_sample, rows * 16);
  for (int32_t r = 0; r < rows; ++r) {
    EXPECT_EQ(sampled[r].token_id, ArgMax(&logits[static_cast<size_t>(r) * v], v));
  }
#endif
}

}  // namespace
}  // namespace tinyserve
