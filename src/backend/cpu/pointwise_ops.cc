#include "backend/cpu/pointwise_ops.h"

#include <cmath>

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

void activation_forward(float* out, const float* inp, int64_t n, Activation a) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) out[i] = activation_value(inp[i], a);
}

void activation_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation a, bool accumulate) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) {
    const float g = activation_derivative(inp[i], a) * dout[i];
    dinp[i] = accumulate ? dinp[i] + g : g;
  }
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
