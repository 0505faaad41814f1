#include "backend/cpu/exp_ops.h"

#include <algorithm>

#include "backend/cpu/cpu_math.h"

namespace weft::cpu {

namespace {

// r[j] = vexp(x[j] - shift): one vectorised pass (x may be r).
inline void exp_pass(float* r, const float* x, int64_t n, float shift) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) r[j] = vexp(x[j] - shift);
}

// s + r[0] + r[1] + ... in this order: no pragma, and no -fassociative-math, so no reordering.
inline float add_in_order(float s, const float* r, int64_t n) {
  for (int64_t j = 0; j < n; ++j) s += r[j];
  return s;
}

}  // namespace

float exp_shifted_sum(float* r, int64_t n, float shift) {
  exp_pass(r, r, n, shift);
  return add_in_order(0.0f, r, n);
}

float sum_exp_shifted(const float* r, int64_t n, float shift) {
  constexpr int64_t kBlock = 512;  // in L1 between the two passes
  float e[kBlock];
  float s = 0.0f;
  for (int64_t j = 0; j < n; j += kBlock) {
    const int64_t m = std::min(kBlock, n - j);
    exp_pass(e, r + j, m, shift);
    s = add_in_order(s, e, m);
  }
  return s;
}

void exp_shifted_scaled(float* r, int64_t n, float shift, float k) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) r[j] = vexp(r[j] - shift) * k;
}

}  // namespace weft::cpu
