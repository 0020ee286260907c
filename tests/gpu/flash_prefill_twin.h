// The CPU twin of the tensor-core prefill attention (kernels/cuda/flash_prefill.cu): the same
// arithmetic in the same order as the kernel run on the host execution layer (whose MMA sums each
// element as c + a0 b0 + ... + a15 b15 in order; tests/gpu_host/mma_emulation.h), so there the two
// agree bit for bit; on a GPU the MMA's summation order and exp2f differ, within a tolerance. Per
// row (token t of a sequence with at least kFlashMinQueryTokens query tokens, query head h):
//   q rounded to bf16; keys in tiles of kFlashKeys (64) at absolute positions, up to the row's
//   position; per tile: s_j = fmaf chain over the dimensions in order from 0, x_j = (s_j k_scale)
//   log2(e) / sqrt(head_dim) (-inf past the row's position), m = max(m, max_j x_j), corr = 2^(m_old
//   - m), p_j = bf16(2^(x_j - m)); each of the 4 lanes of the row sums its keys' p (keys 8i + 2
//   lane + e, in i then e order) into l_lane = l_lane corr + sum; o_d = o_d corr, then an fmaf
//   chain of p_j v_jd over the tile's keys in order; at the end l = (l0 + l1) + (l2 + l3), out = (o
//   / l) v_scale. The scales are an fp8 cache's (KvScales; 1.0 otherwise).
// Rows of shorter sequences are left as they are (the CUDA-core kernels' rows).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/gpu/gpu_test_util.h"

namespace tinyserve {

inline constexpr int32_t kFlashTwinKeys = 64;
inline constexpr int32_t kFlashTwinMinQuery = 2;  // kFlashMinQueryTokens (kernels/cuda/ops.h)

// q [num_tokens, q_stride]; k_cache, v_cache [slots, num_kv_heads * head_dim] holding the cache's
// values (bf16 or fp8 ones, widened, not yet scaled); tables [num_seqs, table_stride]; out
// [num_tokens, num_heads * head_dim].
inline void FlashPrefillTwin(const std::vector<float>& q, int32_t q_stride,
                             const std::vector<float>& k_cache, const std::vector<float>& v_cache,
                             const std::vector<int32_t>& positions,
                             const std::vector<int32_t>& query_start,
                             const std::vector<int32_t>& tables, int32_t table_stride,
                             int32_t block_size, int32_t num_heads, int32_t num_kv_heads,
                             int32_t head_dim, std::vector<float>* out, KvScales scales = {}) {
  const int32_t hd = head_dim, kv_width = num_kv_heads * hd;
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(hd));
  const int32_t num_seqs = static_cast<int32_t>(query_start.size()) - 1;
  std::vector<float> qb(hd), x(kFlashTwinKeys), p(kFlashTwinKeys), o(hd);
  for (int32_t s = 0; s < num_seqs; ++s) {
    if (query_start[s + 1] - query_start[s] < kFlashTwinMinQuery) continue;
    for (int32_t t = query_start[s]; t < query_start[s + 1]; ++t) {
      const int32_t pos = positions[t];
      for (int32_t h = 0; h < num_heads; ++h) {
        const int32_t kvh = h / (num_heads / num_kv_heads);
        for (int32_t d = 0; d < hd; ++d) {
          qb[d] = RoundToBf16(q[static_cast<size_t>(t) * q_stride + h * hd + d]);
        }
        float m = -INFINITY, lane_l[4] = {0, 0, 0, 0};
        std::fill(o.begin(), o.end(), 0.0f);
        for (int32_t j0 = 0; j0 <= pos; j0 += kFlashTwinKeys) {
          auto row_of = [&](int32_t key) {
            const int32_t slot =
                tables[static_cast<size_t>(s) * table_stride + key / block_size] * block_size +
                key % block_size;
            return static_cast<size_t>(slot) * kv_width + static_cast<size_t>(kvh) * hd;
          };
          float mx = -INFINITY;
          for (int32_t j = 0; j < kFlashTwinKeys; ++j) {
            const int32_t key = j0 + j;
            if (key > pos) {
              x[j] = -INFINITY;
              continue;
            }
            const size_t at = row_of(key);
            float acc = 0.0f;
            for (int32_t d = 0; d < hd; ++d) acc = std::fma(qb[d], k_cache[at + d], acc);
            x[j] = (acc * scales.k) * scale_log2;
            mx = std::fmax(mx, x[j]);
          }
          const float m_new = std::fmax(m, mx);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;
          const float corr = std::exp2(m - m_use);
          for (int32_t j = 0; j < kFlashTwinKeys; ++j) p[j] = RoundToBf16(std::exp2(x[j] - m_use));
          for (int lane = 0; lane < 4; ++lane) {
            float sum = 0.0f;
            for (int32_t i = 0; i < kFlashTwinKeys / 8; ++i) {
              for (int32_t e = 0; e < 2; ++e) sum += p[8 * i + 2 * lane + e];
            }
            lane_l[lane] = lane_l[lane] * corr + sum;
          }
          m = m_new;
          for (int32_t d = 0; d < hd; ++d) {
            float acc = o[d] * corr;
            for (int32_t j = 0; j < kFlashTwinKeys; ++j) {
              const float v = j0 + j > pos ? 0.0f : v_cache[row_of(j0 + j) + d];
              acc = std::fma(p[j], v, acc);
            }
            o[d] = acc;
          }
        }
        const float l = (lane_l[0] + lane_l[1]) + (lane_l[2] + lane_l[3]);
        for (int32_t d = 0; d < hd; ++d) {
          (*out)[(static_cast<size_t>(t) * num_heads + h) * hd + d] = (o[d] / l) * scales.v;
        }
      }
    }
  }
}

}  // namespace tinyserve
