// Each CPU op against a plain-loop double-precision reference. Backward passes are checked
// against central finite differences of the reference forward, so the reference gradient
// is never derived from the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <functional>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_math.h"
#include "optim/optim.h"

namespace weft {
namespace {

using Vec = std::vector<double>;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
Vec to_d(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// max |a-b| / max(|b|_inf, floor)
double rel_err(const std::vector<float>& a, const Vec& b, double floor = 1e-3) {
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

// Numerical gradient of sum(f(x) * w) with respect to x.
Vec numgrad(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& w, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double x0 = x[i];
    x[i] = x0 + h;
    Vec a = f(x);
    x[i] = x0 - h;
    Vec b = f(x);
    x[i] = x0;
    double s = 0;
    for (size_t j = 0; j < a.size(); ++j) s += (a[j] - b[j]) * w[j];
    g[i] = s / (2 * h);
  }
  return g;
}

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

// --- references (plain loops, double) ---
Vec ref_matmul(const Vec& x, const Vec& w, const Vec& b, int N, int IN, int OUT) {
  Vec y(N * OUT);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OUT; ++o) {
      double s = b.empty() ? 0.0 : b[o];
      for (int i = 0; i < IN; ++i) s += x[n * IN + i] * w[i * OUT + o];
      y[n * OUT + o] = s;
    }
  return y;
}

Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C, double eps) {
  Vec y(N * C);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    for (int c = 0; c < C; ++c) y[n * C + c] = (x[n * C + c] - m) / std::sqrt(v + eps) * w[c] + b[c];
  }
  return y;
}

double ref_gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// qkv (B,T,3C) -> out (B,T,C), causal.
Vec ref_attention(const Vec& qkv, int B, int T, int C, int NH) {
  int hs = C / NH;
  Vec out(B * T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int k = 0; k < hs; ++k)
            d += qkv[(b * T + t) * 3 * C + h * hs + k] * qkv[(b * T + j) * 3 * C + C + h * hs + k];
          s[j] = d / std::sqrt(double(hs));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j <= t; ++j) z += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j <= t; ++j)
          for (int k = 0; k < hs; ++k)
            out[(b * T + t) * C + h * hs + k] += s[j] / z * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + k];
      }
  return out;
}

TEST_F(CpuOps, MatmulForwardBackward) {
  const int N = 7, IN = 5, OUT = 6;
  auto x = randn(N * IN, 1), w = randn(IN * OUT, 2), b = randn(OUT, 3), dy = randn(N * OUT, 4);
  std::vector<float> y(N * OUT);
  be->matmul_forward(y.data(), x.data(), w.data(), b.data(), N, IN, OUT, false);
  EXPECT_LT(rel_err(y, ref_matmul(to_d(x), to_d(w), to_d(b), N, IN, OUT)), 1e-6);
  // accumulate: y += x @ w + b
  std::vector<float> y2 = y;
  be->matmul_forward(y2.data(), x.data(), w.data(), b.data(), N, IN, OUT, true);
  Vec ref2 = ref_matmul(to_d(x), to_d(w), to_d(b), N, IN, OUT);
  for (auto& v : ref2) v *= 2;
  EXPECT_LT(rel_err(y2, ref2), 1e-6);

  std::vector<float> dx(N * IN), dw(IN * OUT, 0.5f), db(OUT, 0.25f);
  be->matmul_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, IN, OUT);
  Vec ddy = to_d(dy);
  Vec gx = numgrad([&](const Vec& xx) { return ref_matmul(xx, to_d(w), to_d(b), N, IN, OUT); }, to_d(x), ddy);
  Vec gw = numgrad([&](const Vec& ww) { return ref_matmul(to_d(x), ww, to_d(b), N, IN, OUT); }, to_d(w), ddy);
  Vec gb = numgrad([&](const Vec& bb) { return ref_matmul(to_d(x), to_d(w), bb, N, IN, OUT); }, to_d(b), ddy);
  for (auto& v : gw) v += 0.5;   // accumulated onto the initial 0.5
  for (auto& v : gb) v += 0.25;
  EXPECT_LT(rel_err(dx, gx), 1e-5);
  EXPECT_LT(rel_err(dw, gw), 1e-5);
  EXPECT_LT(rel_err(db, gb), 1e-5);
}

TEST_F(CpuOps, GemmTransposes) {
  const int M = 4, N = 5, K = 3;
  auto a = randn(M * K, 5), b = randn(K * N, 6);
  // A^T stored (K,M), B^T stored (N,K)
  std::vector<float> at(K * M), bt(N * K);
  for (int i = 0; i < M; ++i)
    for (int k = 0; k < K; ++k) at[k * M + i] = a[i * K + k];
  for (int k = 0; k < K; ++k)
    for (int j = 0; j < N; ++j) bt[j * K + k] = b[k * N + j];
  Vec ref = ref_matmul(to_d(a), to_d(b), {}, M, K, N);
  std::vector<float> c(M * N);
  be->gemm(true, true, M, N, K, 1.0f, at.data(), M, bt.data(), K, 0.0f, c.data(), N);
  EXPECT_LT(rel_err(c, ref), 1e-6);
}

TEST_F(CpuOps, LayerNormForwardBackward) {
  const int N = 5, C = 16;
  const float eps = 1e-5f;
  auto x = randn(N * C, 7, 2.0f), w = randn(C, 8), b = randn(C, 9), dy = randn(N * C, 10);
  for (auto& v : x) v += 0.7f;  // non-zero mean
  std::vector<float> y(N * C), mean(N), rstd(N);
  be->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, eps);
  EXPECT_LT(rel_err(y, ref_layernorm(to_d(x), to_d(w), to_d(b), N, C, eps)), 1e-5);

  std::vector<float> dx(N * C, 1.0f), dw(C, 0.0f), db(C, 0.0f);
  be->layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  Vec ddy = to_d(dy);
  Vec gx = numgrad([&](const Vec& xx) { return ref_layernorm(xx, to_d(w), to_d(b), N, C, eps); }, to_d(x), ddy);
  Vec gw = numgrad([&](const Vec& ww) { return ref_layernorm(to_d(x), ww, to_d(b), N, C, eps); }, to_d(w), ddy);
  Vec gb = numgrad([&](const Vec& bb) { return ref_layernorm(to_d(x), to_d(w), bb, N, C, eps); }, to_d(b), ddy);
  for (auto& v : gx) v += 1.0;  // dinp accumulates
  EXPECT_LT(rel_err(dx, gx), 1e-4);
  EXPECT_LT(rel_err(dw, gw), 1e-4);
  EXPECT_LT(rel_err(db, gb), 1e-4);
}

TEST_F(CpuOps, GeluForwardBackward) {
  const int n = 300;
  auto x = randn(n, 11, 3.0f), dy = randn(n, 12);
  x[0] = 20.0f;
  x[1] = -20.0f;
  x[2] = 0.0f;
  std::vector<float> y(n), dx(n);
  be->gelu_forward(y.data(), x.data(), n);
  be->gelu_backward(dx.data(), x.data(), dy.data(), n);
  for (int i = 0; i < n; ++i) {
    double ref = ref_gelu(x[i]);
    EXPECT_NEAR(y[i], ref, 2e-6 * std::max(1.0, std::fabs(ref))) << "x=" << x[i];
    double h = 1e-5;
    double d = (ref_gelu(double(x[i]) + h) - ref_gelu(double(x[i]) - h)) / (2 * h) * dy[i];
    EXPECT_NEAR(dx[i], d, 1e-5 * std::max(1.0, std::fabs(d))) << "x=" << x[i];
  }
}

// The vectorised tanh GELU (backend/cpu/gelu_ops.cc) computes each element as the scalar
// formula of cpu_math.h does: the same bits, special values included, for any n (the loop's
// vector body, its remainder, several threads).
TEST_F(CpuOps, GeluIsBitwiseTheScalarFormula) {
  const int n = 1037;
  auto x = randn(n, 21, 4.0f), dy = randn(n, 22);
  const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 9.0f, -9.0f, 11.3f, -11.3f, 88.0f, -88.0f, 1e30f, -1e30f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(specials); ++i) x[3 * i + 1] = specials[i];
  std::vector<float> y(n), dx(n);
  be->gelu_forward(y.data(), x.data(), n);
  be->gelu_backward(dx.data(), x.data(), dy.data(), n);
  const auto same = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
  };
  for (int i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = cpu::kGeluScale * (v + 0.044715f * v * v * v);
    const float th = cpu::fast_tanh(u);
    const float ref = 0.5f * v * (1.0f + th);
    const float local = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * cpu::kGeluScale * (1.0f + 3.0f * 0.044715f * v * v);
    EXPECT_TRUE(same(y[i], ref)) << "x=" << v << ": " << y[i] << " vs " << ref;
    EXPECT_TRUE(same(dx[i], local * dy[i])) << "x=" << v << ": " << dx[i] << " vs " << local * dy[i];
  }
}

// The softmaxes' exp passes (backend/cpu/exp_ops.h, vectorised under -fno-trapping-math) give
// the bits of the scalar loops they replaced: each element vexp(x - shift) (times k), each sum
// added in index order, for special values too and for lengths around the block of 512.
TEST_F(CpuOps, ExpPassesAreBitwiseTheScalarLoops) {
  const auto same = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
  };
  const float specials[] = {0.0f, -0.0f, 1e-40f, -1e-40f, 87.5f, -87.5f, 100.0f, -100.0f, 1e30f, -1e30f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (const int n : {1, 7, 511, 512, 513, 1037, 50257}) {
    auto x = randn(n, 31 + n, 6.0f);
    if (n >= 64) {
      for (size_t i = 0; i < std::size(specials); ++i) x[3 * i + 1] = specials[i];
    }
    const float shift = 1.25f, k = -0.375f;
    std::vector<float> ref(n), scaled(n);
    float ref_sum = 0.0f;
    for (int j = 0; j < n; ++j) {  // the scalar loops as they were
      ref[j] = cpu::vexp(x[j] - shift);
      ref_sum += ref[j];
      scaled[j] = cpu::vexp(x[j] - shift) * k;
    }
    std::vector<float> a = x, c = x;
    const float sum = cpu::exp_shifted_sum(a.data(), n, shift);
    EXPECT_TRUE(same(sum, ref_sum)) << n << ": " << sum << " vs " << ref_sum;
    EXPECT_TRUE(same(cpu::sum_exp_shifted(x.data(), n, shift), ref_sum)) << n;
    cpu::exp_shifted_scaled(c.data(), n, shift, k);
    for (int j = 0; j < n; ++j) {
      ASSERT_TRUE(same(a[j], ref[j])) << n << " x=" << x[j] << ": " << a[j] << " vs " << ref[j];
      ASSERT_TRUE(same(c[j], scaled[j])) << n << " x=" << x[j] << ": " << c[j] << " vs " << scaled[j];
    }
  }
}

TEST_F(CpuOps, EmbeddingForwardBackward) {
  const int B = 2, T = 5, C = 6, V = 7;
  auto wte = randn(V * C, 13), wpe = randn(T * C, 14), dy = randn(B * T * C, 15);
  std::vector<int32_t> tok = {3, 1, 3, 0, 6, 6, 6, 2, 1, 3};
  std::vector<float> y(B * T * C);
  be->embedding_forward(y.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  be->embedding_backward(dwte.data(), dwpe.data(), dy.data(), tok.data(), B, T, C);
  Vec rdwte(V * C, 0.0), rdwpe(T * C, 0.0);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        int i = b * T + t;
        EXPECT_FLOAT_EQ(y[i * C + c], wte[tok[i] * C + c] + wpe[t * C + c]);
        rdwte[tok[i] * C + c] += dy[i * C + c];
        rdwpe[t * C + c] += dy[i * C + c];
      }
  EXPECT_LT(rel_err(dwte, rdwte), 1e-6);
  EXPECT_LT(rel_err(dwpe, rdwpe), 1e-6);
}

// T = 130 crosses the 64-row blocks of the CPU kernel, including a ragged last block.
TEST_F(CpuOps, AttentionForward) {
  const int B = 2, T = 130, C = 8, NH = 2;
  auto qkv = randn(B * T * 3 * C, 16);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  be->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  EXPECT_LT(rel_err(out, ref_attention(to_d(qkv), B, T, C, NH)), 1e-5);
  // probabilities: rows sum to one, zero above the diagonal
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t) {
      double s = 0;
      for (int j = 0; j < T; ++j) {
        double a = att[(bh * T + t) * T + j];
        if (j > t) {
          EXPECT_EQ(a, 0.0);
        }
        s += a;
      }
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
}

TEST_F(CpuOps, AttentionBackward) {
  for (int T : {5, 70}) {
    const int B = 1, C = 4, NH = 2;
    auto qkv = randn(B * T * 3 * C, 17 + T), dy = randn(B * T * C, 18 + T);
    std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(B * T * 3 * C, 123.0f);
    be->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    be->attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
    Vec g = numgrad([&](const Vec& x) { return ref_attention(x, B, T, C, NH); }, to_d(qkv), to_d(dy));
    EXPECT_LT(rel_err(dqkv, g), 1e-4) << "T=" << T;
  }
}

TEST_F(CpuOps, SoftmaxCrossEntropy) {
  const int N = 4, V = 37, Vp = 40;
  auto logits = randn(N * Vp, 19, 3.0f);
  std::vector<int32_t> tgt = {0, 36, 5, 17};
  auto work = logits;
  std::vector<float> losses(N), losses2(N);
  const float dloss = 0.125f;
  auto fwd_only = logits;
  be->softmax_cross_entropy(fwd_only.data(), losses2.data(), tgt.data(), N, V, Vp, 0.0f);
  EXPECT_EQ(fwd_only, logits);  // untouched without a gradient
  be->softmax_cross_entropy(work.data(), losses.data(), tgt.data(), N, V, Vp, dloss);
  for (int n = 0; n < N; ++n) {
    double mx = -1e300, z = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, double(logits[n * Vp + j]));
    for (int j = 0; j < V; ++j) z += std::exp(logits[n * Vp + j] - mx);
    double ref = std::log(z) + mx - logits[n * Vp + tgt[n]];
    EXPECT_NEAR(losses[n], ref, 1e-5 * ref);
    EXPECT_NEAR(losses2[n], ref, 1e-5 * ref);
    for (int j = 0; j < Vp; ++j) {
      double d = j < V ? (std::exp(logits[n * Vp + j] - mx) / z - (j == tgt[n])) * dloss : 0.0;
      EXPECT_NEAR(work[n * Vp + j], d, 1e-6) << n << "," << j;
    }
  }
}

TEST_F(CpuOps, AdamWMatchesFormula) {
  const int n = 50;
  auto p = randn(n, 20), g = randn(n, 21), m = randn(n, 22, 0.1f), v = randn(n, 23, 0.1f);
  for (auto& x : v) x = x * x;
  auto p0 = p, m0 = m, v0 = v;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  const int t = 3;
  const float gs = 0.75f;  // clipping coefficient applied on the fly
  be->adamw(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t, gs);
  for (int i = 0; i < n; ++i) {
    const double gi = double(g[i]) * gs;
    double pi = p0[i] * (1 - double(lr) * wd);
    double mi = b1 * double(m0[i]) + (1 - double(b1)) * gi;
    double vi = b2 * double(v0[i]) + (1 - double(b2)) * gi * gi;
    double denom = std::sqrt(vi) / std::sqrt(1 - std::pow(double(b2), t)) + eps;
    pi -= lr / (1 - std::pow(double(b1), t)) * mi / denom;
    EXPECT_NEAR(p[i], pi, 1e-6 * std::max(1.0, std::fabs(pi)));
    EXPECT_NEAR(m[i], mi, 1e-6);
    EXPECT_NEAR(v[i], vi, 1e-6);
  }
}

TEST_F(CpuOps, SumSquaresAndScale) {
  auto x = randn(1001, 24);
  double ref = 0;
  for (float v : x) ref += double(v) * v;
  EXPECT_NEAR(be->sum_squares(x.data(), 1001), ref, 1e-9 * ref);
  be->scale(x.data(), 0.5f, 1001);
  double ref2 = 0;
  for (float v : x) ref2 += double(v) * v;
  EXPECT_NEAR(ref2, ref / 4, 1e-9 * ref);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {
TEST(Optim, ClipCoefficientMatchesTorch) {
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (total_norm + 1e-6), clamped to 1.
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 1.0), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 0.0), 1.0f);  // off
}
TEST(Optim, LearningRateSchedule) {
  // warmup: (k+1)/warmup * lr; then cosine from lr to 0.1 lr at decay_steps
  EXPECT_FLOAT_EQ(lr_at(0, 1.0f, 10, 110, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(9, 1.0f, 10, 110, 0.1f), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(10, 1.0f, 10, 110, 0.1f), 1.0f);
  EXPECT_NEAR(lr_at(60, 1.0f, 10, 110, 0.1f), 0.55f, 1e-6);  // halfway: (1 + 0.1) / 2
  EXPECT_FLOAT_EQ(lr_at(110, 1.0f, 10, 110, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(500, 1.0f, 10, 110, 0.1f), 0.1f);
}
}  // namespace
}  // namespace weft
