// Naive, obviously-correct reference implementations of the Backend op set (kernels/backend.h),
// for kernel tests on every device.
//
// Everything is computed in double on host vectors, straight from the formulas in backend.h and
// DESIGN §3/§7, with no blocking, no fusion and no attempt at speed: these are the oracle, so they
// must be readable at a glance. Inputs are fp32 host data (as the backends see them); outputs are
// double so a test can compare any device's result with atol + rtol * |ref|.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace tinyserve::reference {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight.  x [n, dim], weight [dim] -> [n, dim].
inline std::vector<double> RmsNorm(const std::vector<float>& x, const std::vector<float>& weight,
                                   int32_t n, int32_t dim, double eps) {
  std::vector<double> out(static_cast<size_t>(n) * dim);
  for (int32_t t = 0; t < n; ++t) {
    double ss = 0.0;
    for (int32_t j = 0; j < dim; ++j) ss += double{x[t * dim + j]} * double{x[t * dim + j]};
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int32_t j = 0; j < dim; ++j) out[t * dim + j] = double{x[t * dim + j]} * inv * weight[j];
  }
  return out;
}

// y = x * w^T.  x [m, k], w [n, k] -> y [m, n].
inline std::vector<double> Gemm(const std::vector<float>& x, const std::vector<float>& w, int32_t m,
                                int32_t n, int32_t k) {
  std::vector<double> y(static_cast<size_t>(m) * n);
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int32_t p = 0; p < k; ++p) acc += double{x[i * k + p]} * double{w[j * k + p]};
      y[i * n + j] = acc;
    }
  }
  return y;
}

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, hidden + i].  gate_up [n, 2*hidden] -> [n, hidden].
inline std::vector<double> SiluAndMul(const std::vector<float>& gate_up, int32_t n,
                                      int32_t hidden) {
  std::vector<double> out(static_cast<size_t>(n) * hidden);
  for (int32_t t = 0; t < n; ++t) {
    for (int32_t i = 0; i < hidden; ++i) {
      const double g = gate_up[t * 2 * hidden + i];
      const double u = gate_up[t * 2 * hidden + hidden + i];
      out[t * hidden + i] = g / (1.0 + std::exp(-g)) * u;
    }
  }
  return out;
}

// RoPE's inverse frequency of pair i: base^(-2i / head_dim) / divisor(i), where a scaled case
// divides pair i by 1 + i % 3 (a stand-in for rope scaling: any per-pair frequencies).
inline double RopeInvFreq(int32_t i, int32_t head_dim, double base, bool scaled) {
  return std::pow(base, -2.0 * i / head_dim) / (scaled ? 1 + i % 3 : 1);
}

// The RoPE angle of pair i at position pos: pos * RopeInvFreq(i).
inline double RopeAngle(int32_t pos, int32_t i, int32_t head_dim, double base, bool scaled) {
  return pos * RopeInvFreq(i, head_dim, base, scaled);
}

// y[i, j] + bias[j].  y [m, n], bias [n] -> [m, n].
inline std::vector<double> AddBias(const std::vector<float>& y, const std::vector<float>& bias,
                                   int32_t m, int32_t n) {
  std::vector<double> out(static_cast<size_t>(m) * n);
  for (int32_t i = 0; i < m; ++i) {
    for (int32_t j = 0; j < n; ++j) out[i * n + j] = double{y[i * n + j]} + double{bias[j]};
  }
  return out;
}

// The two dimensions RoPE pair i rotates: (2i, 2i+1) interleaved, (i, i + head_dim/2) NeoX.
inline std::pair<int32_t, int32_t> RopePair(int32_t i, int32_t head_dim, bool neox) {
  return neox ? std::pair(i, i + head_dim / 2) : std::pair(2 * i, 2 * i + 1);
}

// Rotates one head of `head_dim` values (in place, double) at position `pos`: each pair
// (a, b) = RopePair(i) by RopeAngle(pos, i).
inline void RopeHead(double* head, int32_t pos, int32_t head_dim, double base, bool neox,
                     bool scaled = false) {
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    const auto [a, b] = RopePair(i, head_dim, neox);
    const double angle = RopeAngle(pos, i, head_dim, base, scaled);
    const double x0 = head[a], x1 = head[b];
    head[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
    head[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
  }
}

// Dense causal attention for one chunk of a sequence whose whole context is given densely.
// k, v [context_len, num_kv_heads, head_dim]; q [chunk_len, num_heads, head_dim] holds the LAST
// chunk_len tokens of the context, so query j sits at position context_len - chunk_len + j and
// attends to positions [0, that position]. GQA: query head h reads kv head
// h / (num_heads / num_kv_heads). Scale 1/sqrt(head_dim). Returns [chunk_len, num_heads*head_dim].
inline std::vector<double> CausalAttention(const std::vector<float>& q, const std::vector<float>& k,
                                           const std::vector<float>& v, int32_t context_len,
                                           int32_t chunk_len, int32_t num_heads,
                                           int32_t num_kv_heads, int32_t head_dim) {
  const int32_t group = num_heads / num_kv_heads;
  const int32_t kv_width = num_kv_heads * head_dim;
  std::vector<double> out(static_cast<size_t>(chunk_len) * num_heads * head_dim, 0.0);
  for (int32_t j = 0; j < chunk_len; ++j) {
    const int32_t pos = context_len - chunk_len + j;
    for (int32_t h = 0; h < num_heads; ++h) {
      const float* qh = &q[(static_cast<size_t>(j) * num_heads + h) * head_dim];
      const int32_t kvh = h / group;
      std::vector<double> score(pos + 1);
      double max_score = -INFINITY;
      for (int32_t p = 0; p <= pos; ++p) {
        const float* kp = &k[static_cast<size_t>(p) * kv_width + kvh * head_dim];
        double dot = 0.0;
        for (int32_t d = 0; d < head_dim; ++d) dot += double{qh[d]} * double{kp[d]};
        score[p] = dot / std::sqrt(static_cast<double>(head_dim));
        max_score = std::max(max_score, score[p]);
      }
      double sum = 0.0;
      for (double& s : score) {
        s = std::exp(s - max_score);
        sum += s;
      }
      double* oh = &out[(static_cast<size_t>(j) * num_heads + h) * head_dim];
      for (int32_t p = 0; p <= pos; ++p) {
        const float* vp = &v[static_cast<size_t>(p) * kv_width + kvh * head_dim];
        for (int32_t d = 0; d < head_dim; ++d) oh[d] += score[p] / sum * vp[d];
      }
    }
  }
  return out;
}

}  // namespace tinyserve::reference
