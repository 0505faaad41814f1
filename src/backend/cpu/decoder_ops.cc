#include "backend/cpu/decoder_ops.h"

#include "backend/cpu/activation_simd.h"
#include "backend/cpu/pointwise_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace weft::cpu {

namespace {
// Rows per chunk of RMSNorm's weight-gradient sums (a fixed order, whatever the threads).
constexpr int64_t kRowChunk = 64;
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; ++c) s += x[c] * x[c];
    const float r = 1.0f / std::sqrt(s / static_cast<float>(C) + eps);
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = x[c] * r * w[c];
    rstd[i] = r;
  }
}

void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                      int64_t N, int64_t C) {
  // With n = x r: dx = r (w g - n mean(w g n)), dw = sum over rows of g n.
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  std::vector<float> part(static_cast<size_t>(chunks * C), 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pdw = part.data() + k * C;
    for (int64_t i = k * kRowChunk; i < std::min(N, (k + 1) * kRowChunk); ++i) {
      const float* x = inp + i * C;
      const float* g = dout + i * C;
      const float r = rstd[i];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c) dot += w[c] * g[c] * x[c] * r;
      dot /= static_cast<float>(C);
      float* dx = dinp + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float n = x[c] * r;
        pdw[c] += g[c] * n;
        dx[c] += (w[c] * g[c] - n * dot) * r;
      }
    }
  }
  for (int64_t k = 0; k < chunks; ++k) {
    const float* pdw = part.data() + k * C;
    for (int64_t c = 0; c < C; ++c) dw[c] += pdw[c];
  }
}

void rope(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads, int64_t hd,
          int64_t rot, bool inverse) {
  const int64_t half = rot / 2;
  const float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r % T;
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * ld + h * hd;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half], si = sgn * s[i];
        v[i] = a * c[i] - b * si;
        v[i + half] = b * c[i] + a * si;
      }
    }
  }
}

void swiglu_forward(float* out, const float* pre, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = pre + i * 2 * F;
    const float* u = g + F;
    float* o = out + i * F;
    for (int64_t j = 0; j < F; ++j) o[j] = g[j] * sigmoid(g[j]) * u[j];
  }
}

// On SIMD registers where the CPU has them (SLEEF's erf and exp, pointwise_ops.h's blocks), else
// libm's scalar erf and exp.
void gelu_erf_forward(float* out, const float* inp, int64_t n) {
  if (simd_blocks(n, [&](float* y, const float* x, const float*, int64_t m, bool avx512) {
        avx512 ? gelu_erf_forward_avx512(y, x, m) : gelu_erf_forward_avx2(y, x, m);
      }, out, inp, nullptr)) {
    return;
  }
  constexpr float kInvSqrt2 = 0.70710678118654752f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * inp[i] * (1.0f + std::erf(inp[i] * kInvSqrt2));
}

void gelu_erf_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  if (simd_blocks(n, [&](float* g, const float* x, const float* d, int64_t m, bool avx512) {
        avx512 ? gelu_erf_backward_avx512(g, x, d, m) : gelu_erf_backward_avx2(g, x, d, m);
      }, dinp, inp, dout)) {
    return;
  }
  constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2)), pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
    dinp[i] = dout[i] * (cdf + x * pdf);
  }
}

void swiglu_backward(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* g = pre + i * 2 * F;
    const float* u = g + F;
    const float* d = dout + i * F;
    float* dg = dpre + i * 2 * F;
    float* du = dg + F;
    for (int64_t j = 0; j < F; ++j) {
      const float s = sigmoid(g[j]);
      du[j] = d[j] * g[j] * s;
      dg[j] = d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
    }
  }
}

void expand_kv(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) {
  const int64_t C = heads * hd, KV = kv_heads * hd, g = heads / kv_heads;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const float* src = qkvc + r * (C + 2 * KV);
    float* dst = qkv + r * 3 * C;
    std::memcpy(dst, src, static_cast<size_t>(C) * sizeof(float));
    for (int64_t part = 0; part < 2; ++part) {  // k, then v
      for (int64_t h = 0; h < heads; ++h) {
        std::memcpy(dst + C + part * C + h * hd, src + C + part * KV + (h / g) * hd, static_cast<size_t>(hd) * sizeof(float));
      }
    }
  }
}

void reduce_kv(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) {
  const int64_t C = heads * hd, KV = kv_heads * hd, g = heads / kv_heads;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const float* src = dqkv + r * 3 * C;
    float* dst = dqkvc + r * (C + 2 * KV);
    std::memcpy(dst, src, static_cast<size_t>(C) * sizeof(float));
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t j = 0; j < kv_heads; ++j) {
        float* o = dst + C + part * KV + j * hd;
        const float* s0 = src + C + part * C + j * g * hd;  // the first of its g query heads' copies
        std::memcpy(o, s0, static_cast<size_t>(hd) * sizeof(float));
        for (int64_t k = 1; k < g; ++k) {
          const float* s = s0 + k * hd;
          for (int64_t i = 0; i < hd; ++i) o[i] += s[i];
        }
      }
    }
  }
}

}  // namespace weft::cpu
