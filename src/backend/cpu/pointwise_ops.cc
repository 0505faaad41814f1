#include "backend/cpu/pointwise_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/activation_simd.h"

namespace weft::cpu {

namespace {
constexpr float kLog2 = 0.69314718055994530942f;
// log(1 + e^x) without overflow: x + log1p(e^-x) for x > 0.
float softplus(float x) { return x > 0.0f ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

float activation_value(float x, Activation a) {
  switch (a) {
    case Activation::kRelu: return x > 0.0f ? x : 0.0f;
    case Activation::kSilu: return x * sigmoid(x);
    case Activation::kShiftedSoftplus: return softplus(x) - kLog2;
  }
  return x;
}

float activation_derivative(float x, Activation a) {
  switch (a) {
    case Activation::kRelu: return x > 0.0f ? 1.0f : 0.0f;
    case Activation::kSilu: {
      const float s = sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
    case Activation::kShiftedSoftplus: return sigmoid(x);
  }
  return 1.0f;
}

namespace {

// The widest SIMD activations this CPU runs (activation_simd.h), or none.
enum class Simd { kNone, kAvx2, kAvx512 };
Simd simd() {
#if defined(__x86_64__)
  static const Simd s = __builtin_cpu_supports("avx512f") ? Simd::kAvx512
                        : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? Simd::kAvx2
                                                                                              : Simd::kNone;
  return s;
#else
  return Simd::kNone;
#endif
}

// f over n elements in blocks of kActivationBlock (threads take whole blocks); the last,
// partial block through a padded copy, so every element takes the same path whatever n and
// the thread count. f(out, in..., count) gets a multiple of 16 elements.
template <typename F>
void by_blocks(int64_t n, F&& f) {
  const int64_t blocks = (n + kActivationBlock - 1) / kActivationBlock;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * kActivationBlock, count = std::min(kActivationBlock, n - first);
    f(first, count);
  }
}

bool vectorised(Activation a) { return a != Activation::kRelu && simd() != Simd::kNone; }

}  // namespace

void activation_forward(float* out, const float* inp, int64_t n, Activation a) {
  if (!vectorised(a)) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) out[i] = activation_value(inp[i], a);
    return;
  }
  simd_blocks(n, [a](float* y, const float* x, const float*, int64_t m, bool avx512) {
    avx512 ? activation_forward_avx512(y, x, m, a) : activation_forward_avx2(y, x, m, a);
  }, out, inp, nullptr);
}

void activation_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation a, bool accumulate) {
  if (!vectorised(a)) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float g = activation_derivative(inp[i], a) * dout[i];
      dinp[i] = accumulate ? dinp[i] + g : g;
    }
    return;
  }
  by_blocks(n, [&](int64_t first, int64_t count) {
    auto run = [&](float* di, const float* x, const float* d, int64_t m) {
      if (simd() == Simd::kAvx512) {
        activation_backward_avx512(di, x, d, m, a, accumulate);
      } else {
        activation_backward_avx2(di, x, d, m, a, accumulate);
      }
    };
    if (count % 16 == 0) return run(dinp + first, inp + first, dout + first, count);
    alignas(64) float x[kActivationBlock] = {}, d[kActivationBlock] = {}, g[kActivationBlock] = {};
    std::copy(inp + first, inp + first + count, x);
    std::copy(dout + first, dout + first + count, d);
    if (accumulate) std::copy(dinp + first, dinp + first + count, g);
    run(g, x, d, (count + 15) / 16 * 16);
    std::copy(g, g + count, dinp + first);
  });
}

bool simd_blocks(int64_t n, const SimdBlockFn& f, float* y, const float* x, const float* d) {
  if (simd() == Simd::kNone) return false;
  const bool avx512 = simd() == Simd::kAvx512;
  by_blocks(n, [&](int64_t first, int64_t count) {
    if (count % 16 == 0) return f(y + first, x + first, d ? d + first : nullptr, count, avx512);
    alignas(64) float xb[kActivationBlock] = {}, db[kActivationBlock] = {}, yb[kActivationBlock];
    std::copy(x + first, x + first + count, xb);
    if (d) std::copy(d + first, d + first + count, db);
    f(yb, xb, d ? db : nullptr, (count + 15) / 16 * 16, avx512);
    std::copy(yb, yb + count, y + first);
  });
  return true;
}

void mul(float* out, const float* a, const float* b, int64_t n, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) {
    const float v = a[i] * b[i];
    out[i] = accumulate ? out[i] + v : v;
  }
}

void scale_rows(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate) {
#pragma omp parallel for schedule(static) if (N * C > 16384)
  for (int64_t r = 0; r < N; ++r) {
    const float k = s[r];
    for (int64_t c = 0; c < C; ++c) {
      const float v = x[r * C + c] * k;
      out[r * C + c] = accumulate ? out[r * C + c] + v : v;
    }
  }
}

}  // namespace weft::cpu
