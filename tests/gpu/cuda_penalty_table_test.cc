// The penalty-history kernels (kernels/cuda/sampling.cu: LaunchPenaltySet, LaunchPenaltyAdd)
// against their CPU twin PenaltyState (kernels/sampling.h): after a set from prompt + outputs and
// incremental adds, every (slot, id) entry of the device tables says what PenaltyState says (in the
// prompt or the outputs; how often among the outputs), on awkward vocabularies and histories, and a
// slot set again from the whole history (a preemption's rebuild) equals the incremental one. Skips
// without a CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "kernels/sampling.h"
#include "tests/gpu/gpu_test_util.h"

namespace tinyserve {
namespace {

template <typename T>
std::vector<T> Download(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Succeeds iff row `slot` of the tables is `want`'s history: the prompt flag or an output count on
// exactly PenaltyState's distinct ids, the counts equal to its output counts.
::testing::AssertionResult SameHistory(const std::vector<int32_t>& in_prompt,
                                       const std::vector<int32_t>& counts, int32_t slot, int32_t v,
                                       const PenaltyState& want) {
  std::vector<int32_t> want_counts(v, 0);
  std::vector<bool> want_seen(v, false);
  for (const auto& [id, count] : want.output_counts()) want_counts[id] = count;
  for (int32_t id : want.distinct_tokens()) want_seen[id] = true;
  for (int32_t id = 0; id < v; ++id) {
    const size_t e = static_cast<size_t>(slot) * v + id;
    const bool seen = in_prompt[e] != 0 || counts[e] > 0;
    if (counts[e] != want_counts[id] || seen != want_seen[id] ||
        (in_prompt[e] != 0 && in_prompt[e] != 1)) {
      return ::testing::AssertionFailure()
             << "slot " << slot << " id " << id << ": in_prompt " << in_prompt[e] << " count "
             << counts[e] << ", want seen " << want_seen[id] << " count " << want_counts[id];
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(CudaPenaltyTableTest, TablesAreThePenaltyStateTwin) {
  TS_SKIP_WITHOUT_CUDA();
  std::mt19937 rng(41);
  for (int32_t v : {1, 7, 32000 + 13}) {
    SCOPED_TRACE("vocab " + std::to_string(v));
    std::uniform_int_distribution<int32_t> tok(0, v - 1);
    const int32_t slots = 3;
    const std::vector<int32_t> prompt_lens = {0, 5, 1000}, output_lens = {0, 17, 3};
    const size_t cells = static_cast<size_t>(slots) * v;
    int32_t* in_prompt = Upload(std::vector<int32_t>(cells, -7));  // set must clear its row
    int32_t* counts = Upload(std::vector<int32_t>(cells, -7));
    std::vector<std::vector<int32_t>> history(slots);
    std::vector<PenaltyState> want(slots);
    std::vector<int32_t*> buffers;
    for (int32_t s = 0; s < slots; ++s) {
      for (int32_t i = 0; i < prompt_lens[s] + output_lens[s]; ++i) {
        // Repeats: a small id range half the time.
        history[s].push_back(i % 2 ? tok(rng) : tok(rng) % std::min(v, 4));
      }
      want[s].Reset(history[s], prompt_lens[s]);
      buffers.push_back(Upload(history[s]));
      ASSERT_EQ(
          cuda::LaunchPenaltySet(in_prompt, counts, v, s, buffers.back(),
                                 static_cast<int32_t>(history[s].size()), prompt_lens[s], nullptr),
          cudaSuccess);
    }
    // Steps of accepted tokens: every slot, sometimes twice in one call, sometimes the same id.
    for (int step = 0; step < 6; ++step) {
      std::vector<int32_t> step_slots, step_tokens;
      for (int32_t s = 0; s < slots; ++s) {
        for (int k = 0; k < 1 + (step + s) % 2; ++k) {
          const int32_t t = k == 1 ? step_tokens.back() : tok(rng);
          step_slots.push_back(s);
          step_tokens.push_back(t);
          want[s].AddOutput(t);
          history[s].push_back(t);
        }
      }
      int32_t* d_slots = Upload(step_slots);
      int32_t* d_tokens = Upload(step_tokens);
      ASSERT_EQ(cuda::LaunchPenaltyAdd(counts, v, d_slots, d_tokens,
                                       static_cast<int32_t>(step_slots.size()), nullptr),
                cudaSuccess);
      buffers.push_back(d_slots);
      buffers.push_back(d_tokens);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int32_t> p = Download(in_prompt, cells), c = Download(counts, cells);
    for (int32_t s = 0; s < slots; ++s) EXPECT_TRUE(SameHistory(p, c, s, v, want[s]));
    // Rebuild slot 1 from its whole history, as after a preemption: the same row.
    buffers.push_back(Upload(history[1]));
    ASSERT_EQ(
        cuda::LaunchPenaltySet(in_prompt, counts, v, 1, buffers.back(),
                               static_cast<int32_t>(history[1].size()), prompt_lens[1], nullptr),
        cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(Download(in_prompt, cells), p);
    EXPECT_EQ(Download(counts, cells), c);
    for (int32_t* b : buffers) cudaFree(b);
    cudaFree(in_prompt);
    cudaFree(counts);
  }
}

}  // namespace
}  // namespace tinyserve
