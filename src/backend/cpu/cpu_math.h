// The CPU backend's vectorisable elementwise math and attention rows, shared by its fp32 kernels
// (cpu_backend.cc) and its 16-bit attention (attention_16.cc), so that both compute the same bits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/exp_ops.h"

namespace weft::cpu {

// exp(x) for the softmax and GELU hot loops, written so that the compiler vectorises it
// (glibc's vector expf is only declared under -ffast-math). Range reduction
// x = n ln2 + r, |r| <= ln2/2, then a degree-6 Taylor/Horner polynomial for exp(r) and 2^n
// through the exponent bits: relative error below 2e-7 (about 2 ulp) on [-87, 88].
inline float vexp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::nearbyint(x * 1.44269504088896341f);
  const float r = std::fma(n, -0.693145751953125f, std::fma(n, -1.428606765330187e-06f, x));
  float p = 1.0f / 720.0f;
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float fast_tanh(float x) {
  // tanh(x) = 1 - 2 / (exp(2x) + 1); saturates correctly for large |x|.
  x = std::min(std::max(x, -9.0f), 9.0f);
  float e = vexp(2.0f * x);
  return 1.0f - 2.0f / (e + 1.0f);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

// Attention works per (sample, head) in blocks of kAttBlock query rows: a causal block multiplies
// only against keys [0, end of the block), which skips most of the masked half.
inline constexpr int64_t kAttBlock = 64;

// The maximum of r[0, n), as the fold mx = std::max(mx, r[j]) from -inf finds it (a NaN never
// replaces it), vectorised: 32 lanes fold their elements, then the lanes fold. A maximum is one
// of the values whatever the order, so the result is the serial fold's (up to the sign of a zero
// maximum met as both +0 and -0); the serial fold, one dependent compare an element, ran at a
// quarter of the load rate.
inline float row_max(const float* r, int64_t n) {
  constexpr int64_t kLanes = 32;
  float m[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) m[l] = -INFINITY;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) m[l] = r[j + l] > m[l] ? r[j + l] : m[l];
  }
  float mx = -INFINITY;
  for (int64_t l = 0; l < kLanes; ++l) mx = std::max(mx, m[l]);
  for (; j < n; ++j) mx = std::max(mx, r[j]);
  return mx;
}

// Softmax in place over the scores r[0, n) (a causal row i: n = i + 1); then zeros r[n, len).
inline void softmax_row(float* r, int64_t n, int64_t len) {
  const float mx = row_max(r, n);
  const float s = exp_shifted_sum(r, n, mx);  // exp_ops.h: vectorised, summed in order
  const float inv = 1.0f / s;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) r[j] *= inv;
  for (int64_t j = n; j < len; ++j) r[j] = 0.0f;
}

// Softmax backward in place over d[0, n) (the gradient of the probabilities a[0, n) in, of the
// scores out): d = a (d - sum_j a d) scale, the 1/sqrt(hs) scale folded in; then zeros d[n, len).
inline void softmax_backward_row(const float* a, float* d, int64_t n, int64_t len, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < n; ++j) dot += a[j] * d[j];
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) d[j] = a[j] * (d[j] - dot) * scale;
  for (int64_t j = n; j < len; ++j) d[j] = 0.0f;
}
// The same for a causal row i (n = i + 1). Its loops run to j <= i as the reference kernel's
// always did: the compiler vectorises the sum differently from the j < n form, and the pinned
// curves hold these bits.
inline void softmax_backward_causal_row(const float* a, float* d, int64_t i, int64_t len, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= i; ++j) dot += a[j] * d[j];
#pragma omp simd
  for (int64_t j = 0; j <= i; ++j) d[j] = a[j] * (d[j] - dot) * scale;
  for (int64_t j = i + 1; j < len; ++j) d[j] = 0.0f;
}

// One row of LayerNorm's backward: dx += the input gradient, pdw/pdb += the row's weight and
// bias gradients (a thread's partial sums), from the row's input x, its output gradient g, the
// weight w and the row's mean m and 1/std r.
inline void layernorm_backward_row(float* dx, float* pdw, float* pdb, const float* x, const float* g, const float* w,
                                   float m, float r, int64_t C) {
  float sum_d = 0.0f, sum_dn = 0.0f;
#pragma omp simd reduction(+ : sum_d, sum_dn)
  for (int64_t c = 0; c < C; ++c) {
    float n = (x[c] - m) * r;
    float d = w[c] * g[c];
    sum_d += d;
    sum_dn += d * n;
  }
  sum_d /= C;
  sum_dn /= C;
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    float n = (x[c] - m) * r;
    float d = w[c] * g[c];
    pdb[c] += g[c];
    pdw[c] += n * g[c];
    dx[c] += (d - sum_d - n * sum_dn) * r;
  }
}

}  // namespace weft::cpu
