// The decoder variants' ops (backend.h: RMSNorm, rotary positions, SwiGLU, grouped-query
// attention's kv heads) on the CPU backend against their definitions in double: the forwards
// element by element, the backwards against central differences of a random linear loss, the
// kv expansion and reduction as each other's adjoint, the rotation as orthogonal with its
// inverse undoing it, ALiBi's biased attention against a double softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend_test_util.h"

namespace weft {
namespace {

using test::randn;

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(DecoderOps, RmsNormForwardAndBackward) {
  auto be = make_cpu_backend();
  const int64_t N = 5, C = 12;
  const float eps = 1e-5f;
  std::vector<float> x = randn(N * C, 1), w = randn(C, 2), g = randn(N * C, 3);
  std::vector<float> out(N * C), rstd(N);
  be->rmsnorm_forward_f32(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  for (int64_t i = 0; i < N; ++i) {
    double ms = 0.0;
    for (int64_t c = 0; c < C; ++c) ms += static_cast<double>(x[i * C + c]) * x[i * C + c];
    const double r = 1.0 / std::sqrt(ms / C + eps);
    EXPECT_NEAR(rstd[i], r, 1e-5 * r);
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(out[i * C + c], x[i * C + c] * r * w[c], 1e-5);
  }
  // L = sum g * out: dx and dw against central differences (the backward accumulates).
  std::vector<float> dx(N * C, 0.25f), dw(C, -0.5f);
  be->rmsnorm_backward_f32(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
  const auto loss = [&](const std::vector<float>& xs, const std::vector<float>& ws) {
    std::vector<float> o(N * C), r(N);
    be->rmsnorm_forward_f32(o.data(), r.data(), xs.data(), ws.data(), N, C, eps);
    return dot(g, o);
  };
  const float h = 1e-2f;
  for (int64_t k = 0; k < N * C; k += 7) {
    std::vector<float> xp = x, xm = x;
    xp[k] += h;
    xm[k] -= h;
    EXPECT_NEAR(dx[k] - 0.25f, (loss(xp, w) - loss(xm, w)) / (2 * h), 2e-3) << "dx " << k;
  }
  for (int64_t c = 0; c < C; ++c) {
    std::vector<float> wp = w, wm = w;
    wp[c] += h;
    wm[c] -= h;
    EXPECT_NEAR(dw[c] + 0.5f, (loss(x, wp) - loss(x, wm)) / (2 * h), 2e-3) << "dw " << c;
  }
}

TEST(DecoderOps, RopeRotatesPairsAndItsInverseUndoesIt) {
  auto be = make_cpu_backend();
  const int64_t B = 2, T = 5, heads = 3, hd = 8, rot = 6, ld = heads * hd + 4, N = B * T, half = rot / 2;
  std::vector<float> x = randn(N * ld, 4), cos(T * half), sin(T * half);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(t) / std::pow(100.0, 2.0 * i / rot);
      cos[t * half + i] = static_cast<float>(std::cos(a));
      sin[t * half + i] = static_cast<float>(std::sin(a));
    }
  }
  std::vector<float> y = x;
  be->rope_f32(y.data(), cos.data(), sin.data(), N, T, ld, heads, hd, rot, false);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = r % T;
    for (int64_t h = 0; h < heads; ++h) {
      const float* v = x.data() + r * ld + h * hd;
      const float* o = y.data() + r * ld + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double c = cos[t * half + i], s = sin[t * half + i];
        EXPECT_NEAR(o[i], v[i] * c - v[i + half] * s, 1e-6);
        EXPECT_NEAR(o[i + half], v[i + half] * c + v[i] * s, 1e-6);
      }
      for (int64_t i = rot; i < hd; ++i) EXPECT_EQ(o[i], v[i]);  // beyond the turning dimensions
    }
    for (int64_t j = heads * hd; j < ld; ++j) EXPECT_EQ(y[r * ld + j], x[r * ld + j]);  // beyond the heads
  }
  // Orthogonal: the inverse is the transpose, so it is the backward; applying it undoes the turn.
  std::vector<float> g = randn(N * ld, 5), gi = g;
  be->rope_f32(gi.data(), cos.data(), sin.data(), N, T, ld, heads, hd, rot, true);
  EXPECT_NEAR(dot(y, g), dot(x, gi), 1e-4);
  be->rope_f32(y.data(), cos.data(), sin.data(), N, T, ld, heads, hd, rot, true);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

TEST(DecoderOps, SwigluForwardAndBackward) {
  auto be = make_cpu_backend();
  const int64_t N = 4, F = 6;
  std::vector<float> pre = randn(N * 2 * F, 6), g = randn(N * F, 7), out(N * F), dpre(N * 2 * F);
  be->swiglu_forward_f32(out.data(), pre.data(), N, F);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t j = 0; j < F; ++j) {
      const double a = pre[i * 2 * F + j], u = pre[i * 2 * F + F + j];
      EXPECT_NEAR(out[i * F + j], a / (1.0 + std::exp(-a)) * u, 1e-6);
    }
  }
  be->swiglu_backward_f32(dpre.data(), pre.data(), g.data(), N, F);
  const auto loss = [&](const std::vector<float>& p) {
    std::vector<float> o(N * F);
    be->swiglu_forward_f32(o.data(), p.data(), N, F);
    return dot(g, o);
  };
  const float h = 1e-2f;
  for (int64_t k = 0; k < N * 2 * F; ++k) {
    std::vector<float> pp = pre, pm = pre;
    pp[k] += h;
    pm[k] -= h;
    EXPECT_NEAR(dpre[k], (loss(pp) - loss(pm)) / (2 * h), 2e-3) << k;
  }
}

TEST(DecoderOps, KvExpansionAndReductionAreAdjoint) {
  auto be = make_cpu_backend();
  const int64_t N = 3, heads = 6, kv = 2, hd = 4, C = heads * hd, W = C + 2 * kv * hd;
  std::vector<float> c = randn(N * W, 8), y = randn(N * 3 * C, 9), e(N * 3 * C), r(N * W);
  be->expand_kv_f32(e.data(), c.data(), N, heads, kv, hd);
  be->reduce_kv_f32(r.data(), y.data(), N, heads, kv, hd);
  EXPECT_NEAR(dot(e, y), dot(c, r), 1e-4);
  // Query head h reads kv head h / (heads / kv): heads 0-2 kv head 0, 3-5 kv head 1.
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t j = h / (heads / kv);
    for (int64_t i = 0; i < hd; ++i) {
      EXPECT_EQ(e[C + h * hd + i], c[C + j * hd + i]);                     // k
      EXPECT_EQ(e[2 * C + h * hd + i], c[C + kv * hd + j * hd + i]);       // v
      EXPECT_EQ(e[h * hd + i], c[h * hd + i]);                             // q
    }
  }
}

// The exact GELU against x Phi(x) in double; its backward against central differences.
TEST(DecoderOps, ExactGeluForwardAndBackward) {
  auto be = make_cpu_backend();
  const int64_t n = 200;
  const std::vector<float> x = randn(n, 85, 2.0f), d = randn(n, 86);
  std::vector<float> y(n), dx(n), dx_alias = d;
  be->gelu_erf_forward_f32(y.data(), x.data(), n);
  be->gelu_erf_backward_f32(dx.data(), x.data(), d.data(), n);
  be->gelu_erf_backward_f32(dx_alias.data(), x.data(), dx_alias.data(), n);  // in place over the gradient
  EXPECT_EQ(dx_alias, dx);
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[i];
    const auto f = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
    EXPECT_NEAR(y[i], f(xi), 1e-6 * (1.0 + std::fabs(f(xi))));
    const double h = 1e-4, num = (f(xi + h) - f(xi - h)) / (2 * h) * d[i];
    EXPECT_NEAR(dx[i], num, 1e-5 * (1.0 + std::fabs(num)));
  }
  // Each element's value does not depend on its place (SIMD blocks, a padded last block): a
  // large array of the same values repeated gives the same bits; so does an odd-length tail.
  const int64_t big = 40 * n + 7;
  std::vector<float> xb(big), db(big), yb(big), dxb(big);
  for (int64_t i = 0; i < big; ++i) xb[i] = x[i % n], db[i] = d[i % n];
  be->gelu_erf_forward_f32(yb.data(), xb.data(), big);
  be->gelu_erf_backward_f32(dxb.data(), xb.data(), db.data(), big);
  for (int64_t i = 0; i < big; ++i) {
    ASSERT_EQ(yb[i], y[i % n]) << i;
    ASSERT_EQ(dxb[i], dx[i % n]) << i;
  }
  // It is not the tanh form: they part by about 1e-3 near |x| = 2.
  std::vector<float> t(n);
  be->gelu_forward_f32(t.data(), x.data(), n);
  double most = 0.0;
  for (int64_t i = 0; i < n; ++i) most = std::max(most, std::fabs(static_cast<double>(t[i]) - y[i]));
  EXPECT_GT(most, 1e-4);
}

// ALiBi: every probability row equals a double softmax of q.k / sqrt(hs) + slope (j - i) over
// keys j <= i (zeros above the diagonal), and the output its weighted sum of v; slopes of 0 give
// attention_forward's values.
TEST(DecoderOps, AlibiAttentionAddsTheSlopedBias) {
  auto be = make_cpu_backend();
  const int64_t B = 2, T = 7, NH = 3, hs = 4, C = NH * hs;
  const std::vector<float> qkv = randn(B * T * 3 * C, 81);
  const std::vector<float> slopes = {0.5f, 0.125f, 1.0f / 32};
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  be->attention_forward_alibi_f32(out.data(), att.data(), qkv.data(), slopes.data(), B, T, C, NH);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> p(static_cast<size_t>(i + 1));
        double mx = -1e300, sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int64_t d = 0; d < hs; ++d) {
            s += static_cast<double>(qkv[(b * T + i) * 3 * C + h * hs + d]) * qkv[(b * T + j) * 3 * C + C + h * hs + d];
          }
          p[j] = s / std::sqrt(static_cast<double>(hs)) + slopes[h] * static_cast<double>(j - i);
          mx = std::max(mx, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < T; ++j) {
          const double want = j <= i ? p[j] / sum : 0.0;
          EXPECT_NEAR(att[((b * NH + h) * T + i) * T + j], want, 1e-6) << b << " " << h << " " << i << " " << j;
        }
        for (int64_t d = 0; d < hs; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j <= i; ++j) o += p[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
          EXPECT_NEAR(out[(b * T + i) * C + h * hs + d], o, 1e-5);
        }
      }
    }
  }
  const std::vector<float> zero(NH, 0.0f);
  std::vector<float> out0(out.size()), att0(att.size()), out1(out.size()), att1(att.size());
  be->attention_forward_alibi_f32(out0.data(), att0.data(), qkv.data(), zero.data(), B, T, C, NH);
  be->attention_forward_f32(out1.data(), att1.data(), qkv.data(), B, T, C, NH);
  EXPECT_EQ(att0, att1);
  EXPECT_EQ(out0, out1);
}

}  // namespace
}  // namespace weft
