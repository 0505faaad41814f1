// AVX-512 activations (activation_simd.h); compiled with -mavx512f -mfma (CMakeLists.txt), run
// only where the CPU has them (pointwise_ops.cc asks).
#if defined(__x86_64__)
#include <immintrin.h>
#include <sleef.h>

#include "backend/cpu/activation_simd.h"

namespace weft::cpu {
namespace {

inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, Sleef_expf16_u10(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// log(1 + e^x) - log 2 = max(x, 0) + log1p(e^-|x|) - log 2.
inline __m512 ssp16(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 t = Sleef_log1pf16_u10(Sleef_expf16_u10(_mm512_sub_ps(_mm512_setzero_ps(), ax)));
  return _mm512_sub_ps(_mm512_add_ps(_mm512_max_ps(x, _mm512_setzero_ps()), t), _mm512_set1_ps(0.69314718055994530942f));
}

}  // namespace

void activation_forward_avx512(float* out, const float* x, int64_t n, Activation a) {
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 y = a == Activation::kSilu ? _mm512_mul_ps(v, sigmoid16(v)) : ssp16(v);
    _mm512_storeu_ps(out + i, y);
  }
}

void activation_backward_avx512(float* dinp, const float* x, const float* dout, int64_t n, Activation a,
                                bool accumulate) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 s = sigmoid16(v);
    // SiLU: s (1 + x (1 - s)); shifted softplus: s.
    const __m512 d = a == Activation::kSilu ? _mm512_mul_ps(s, _mm512_add_ps(one, _mm512_mul_ps(v, _mm512_sub_ps(one, s)))) : s;
    __m512 g = _mm512_mul_ps(d, _mm512_loadu_ps(dout + i));
    if (accumulate) g = _mm512_add_ps(_mm512_loadu_ps(dinp + i), g);
    _mm512_storeu_ps(dinp + i, g);
  }
}

void gelu_erf_forward_avx512(float* out, const float* x, int64_t n) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), r2 = _mm512_set1_ps(0.70710678118654752f);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 cdf = _mm512_mul_ps(half, _mm512_add_ps(one, Sleef_erff16_u10(_mm512_mul_ps(v, r2))));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(v, cdf));
  }
}

void gelu_erf_backward_avx512(float* dinp, const float* x, const float* dout, int64_t n) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), r2 = _mm512_set1_ps(0.70710678118654752f);
  const __m512 r2pi = _mm512_set1_ps(0.39894228040143268f), mhalf = _mm512_set1_ps(-0.5f);
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 cdf = _mm512_mul_ps(half, _mm512_add_ps(one, Sleef_erff16_u10(_mm512_mul_ps(v, r2))));
    const __m512 pdf = _mm512_mul_ps(r2pi, Sleef_expf16_u10(_mm512_mul_ps(_mm512_mul_ps(mhalf, v), v)));
    const __m512 d = _mm512_add_ps(cdf, _mm512_mul_ps(v, pdf));
    _mm512_storeu_ps(dinp + i, _mm512_mul_ps(_mm512_loadu_ps(dout + i), d));
  }
}

}  // namespace weft::cpu
#endif
