// AVX2 activations (activation_simd.h); compiled with -mavx2 -mfma (CMakeLists.txt), run
// only where the CPU has them (pointwise_ops.cc asks).
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "backend/cpu/activation_simd.h"

namespace weft::cpu {
namespace {

inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, Sleef_expf8_u10(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// log(1 + e^x) - log 2 = max(x, 0) + log1p(e^-|x|) - log 2.
inline __m256 ssp8(__m256 x) {
  const __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);  // |x|
  const __m256 t = Sleef_log1pf8_u10(Sleef_expf8_u10(_mm256_sub_ps(_mm256_setzero_ps(), ax)));
  return _mm256_sub_ps(_mm256_add_ps(_mm256_max_ps(x, _mm256_setzero_ps()), t), _mm256_set1_ps(0.69314718055994530942f));
}

}  // namespace

void activation_forward_avx2(float* out, const float* x, int64_t n, Activation a) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 y = a == Activation::kSilu ? _mm256_mul_ps(v, sigmoid8(v)) : ssp8(v);
    _mm256_storeu_ps(out + i, y);
  }
}

void activation_backward_avx2(float* dinp, const float* x, const float* dout, int64_t n, Activation a,
                                bool accumulate) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 s = sigmoid8(v);
    // SiLU: s (1 + x (1 - s)); shifted softplus: s.
    const __m256 d = a == Activation::kSilu ? _mm256_mul_ps(s, _mm256_add_ps(one, _mm256_mul_ps(v, _mm256_sub_ps(one, s)))) : s;
    __m256 g = _mm256_mul_ps(d, _mm256_loadu_ps(dout + i));
    if (accumulate) g = _mm256_add_ps(_mm256_loadu_ps(dinp + i), g);
    _mm256_storeu_ps(dinp + i, g);
  }
}

void gelu_erf_forward_avx2(float* out, const float* x, int64_t n) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), r2 = _mm256_set1_ps(0.70710678118654752f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 cdf = _mm256_mul_ps(half, _mm256_add_ps(one, Sleef_erff8_u10(_mm256_mul_ps(v, r2))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, cdf));
  }
}

void gelu_erf_backward_avx2(float* dinp, const float* x, const float* dout, int64_t n) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), r2 = _mm256_set1_ps(0.70710678118654752f);
  const __m256 r2pi = _mm256_set1_ps(0.39894228040143268f), mhalf = _mm256_set1_ps(-0.5f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 cdf = _mm256_mul_ps(half, _mm256_add_ps(one, Sleef_erff8_u10(_mm256_mul_ps(v, r2))));
    const __m256 pdf = _mm256_mul_ps(r2pi, Sleef_expf8_u10(_mm256_mul_ps(_mm256_mul_ps(mhalf, v), v)));
    const __m256 d = _mm256_add_ps(cdf, _mm256_mul_ps(v, pdf));
    _mm256_storeu_ps(dinp + i, _mm256_mul_ps(_mm256_loadu_ps(dout + i), d));
  }
}

}  // namespace weft::cpu
#endif
