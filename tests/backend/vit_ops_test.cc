// The Vision Transformer's ops on the CPU backend (bidir_attention_*, query_attention_*,
// weighted_mse) against plain double-precision loops written here: the forward values, the
// backward against an analytic reference derived by hand (not from the code under test), and
// that analytic reference and the op's backward against central finite differences of the
// reference forward on tiny cases.
//
// Errors are max |x - ref| / max(max |ref|, 1e-3) over a tensor. Tolerances: 1e-5 for the fp32
// attention outputs, probabilities and gradients against the double references (float sums of
// at most a few hundred terms and a vectorised exp of ~2e-7 relative error; measured up to
// ~5e-7), and for an op's backward against finite differences (step 1e-5 on the double
// reference: truncation and cancellation near 1e-11, far below the fp32 error); 1e-7 for the
// analytic reference against finite differences (both double). weighted_mse: the row losses
// are summed in double and rounded once to float, 2e-7 relative to each value; its gradient is
// three float operations per element, 1e-6 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace weft {
namespace {

using Vec = std::vector<double>;

constexpr double kTolF32 = 1e-5;
constexpr double kTolFd = 1e-5;
constexpr double kTolRefFd = 1e-7;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
Vec to_d(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// max |a - b| / max(max |b|, floor)
template <typename A>
double rel_err(const A& a, const Vec& b, double floor = 1e-3) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

// Numerical gradient of sum_j f(x)[j] * w[j] with respect to x (central differences).
Vec numgrad(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& w, double h = 1e-5) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const Vec a = f(x);
    x[i] = x0 - h;
    const Vec b = f(x);
    x[i] = x0;
    double s = 0;
    for (size_t j = 0; j < a.size(); ++j) s += (a[j] - b[j]) * w[j];
    g[i] = s / (2 * h);
  }
  return g;
}

// =========================================================================================
// bidirectional attention: qkv (B,T,3C), q | k | v, head h at columns [h hs, (h+1) hs) of each

struct AttRef {
  Vec out;  // (B,T,C)
  Vec att;  // (B,NH,T,T)
};

AttRef ref_bidir_forward(const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  AttRef r{Vec(size_t(B) * T * C, 0.0), Vec(size_t(B) * NH * T * T, 0.0)};
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        Vec s(T);
        double mx = -1e300;
        for (int j = 0; j < T; ++j) {
          double d = 0;
          for (int c = 0; c < hs; ++c) d += qkv[(b * T + i) * C3 + h * hs + c] * qkv[(b * T + j) * C3 + C + h * hs + c];
          s[j] = d / std::sqrt(double(hs));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j < T; ++j) z += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j < T; ++j) {
          const double p = s[j] / z;
          r.att[((size_t(b) * NH + h) * T + i) * T + j] = p;
          for (int c = 0; c < hs; ++c)
            r.out[(b * T + i) * C + h * hs + c] += p * qkv[(b * T + j) * C3 + 2 * C + h * hs + c];
        }
      }
  return r;
}

// By hand: o_i = sum_j P_ij v_j, P_ij = softmax_j(s_ij), s_ij = q_i . k_j / sqrt(hs).
// dv_j = sum_i P_ij dO_i; dP_ij = dO_i . v_j; ds_ij = P_ij (dP_ij - sum_l P_il dP_il);
// dq_i = sum_j ds_ij k_j / sqrt(hs); dk_j = sum_i ds_ij q_i / sqrt(hs).
Vec ref_bidir_backward(const Vec& qkv, const Vec& dout, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const double sc = 1.0 / std::sqrt(double(hs));
  const AttRef f = ref_bidir_forward(qkv, B, T, C, NH);
  Vec d(qkv.size(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const double* P = &f.att[((size_t(b) * NH + h) * T + i) * T];
        const double* dO = &dout[(b * T + i) * C + h * hs];
        Vec dP(T);
        double dot = 0;
        for (int j = 0; j < T; ++j) {
          double s = 0;
          for (int c = 0; c < hs; ++c) s += dO[c] * qkv[(b * T + j) * C3 + 2 * C + h * hs + c];
          dP[j] = s;
          dot += P[j] * s;
        }
        for (int j = 0; j < T; ++j) {
          const double ds = P[j] * (dP[j] - dot) * sc;
          for (int c = 0; c < hs; ++c) {
            d[(b * T + j) * C3 + 2 * C + h * hs + c] += P[j] * dO[c];                                 // dv_j
            d[(b * T + i) * C3 + h * hs + c] += ds * qkv[(b * T + j) * C3 + C + h * hs + c];         // dq_i
            d[(b * T + j) * C3 + C + h * hs + c] += ds * qkv[(b * T + i) * C3 + h * hs + c];         // dk_j
          }
        }
      }
  return d;
}

class VitOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

struct AttShape {
  int B, T, C, NH;
};

// T = 130 crosses the CPU kernel's 64-row blocks with a ragged last block; hs 4, 5, 12, 1.
TEST_F(VitOps, BidirAttentionForwardBackwardAgainstReference) {
  for (const AttShape s : {AttShape{2, 130, 12, 3}, AttShape{3, 7, 10, 2}, AttShape{1, 65, 12, 1},
                           AttShape{2, 9, 3, 3}}) {
    const int B = s.B, T = s.T, C = s.C, NH = s.NH;
    auto qkv = randn(size_t(B) * T * 3 * C, 100 + T, 1.5f), dy = randn(size_t(B) * T * C, 200 + T);
    std::vector<float> out(size_t(B) * T * C, 7.0f), att(size_t(B) * NH * T * T, 7.0f);
    std::vector<float> dqkv(qkv.size(), 123.0f);  // written, not accumulated
    be->bidir_attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    be->bidir_attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
    const AttRef ref = ref_bidir_forward(to_d(qkv), B, T, C, NH);
    const double e_out = rel_err(out, ref.out), e_att = rel_err(att, ref.att);
    const double e_d = rel_err(dqkv, ref_bidir_backward(to_d(qkv), to_d(dy), B, T, C, NH));
    EXPECT_LT(e_out, kTolF32) << "B " << B << " T " << T << " C " << C << " NH " << NH;
    EXPECT_LT(e_att, kTolF32) << "B " << B << " T " << T << " C " << C << " NH " << NH;
    EXPECT_LT(e_d, kTolF32) << "B " << B << " T " << T << " C " << C << " NH " << NH;
    std::printf("bidir B %d T %d C %d NH %d: out %.2e att %.2e dqkv %.2e\n", B, T, C, NH, e_out, e_att, e_d);
    // every row is a full distribution: no masked zeros, sums to one
    for (size_t r = 0; r < size_t(B) * NH * T; ++r) {
      double sum = 0, mn = 1;
      for (int j = 0; j < T; ++j) {
        sum += att[r * T + j];
        mn = std::min(mn, double(att[r * T + j]));
      }
      ASSERT_NEAR(sum, 1.0, 1e-5) << "row " << r;
      ASSERT_GT(mn, 0.0) << "row " << r;
    }
  }
}

TEST_F(VitOps, BidirAttentionBackwardFiniteDifferences) {
  const int B = 2, T = 3, C = 4, NH = 2;
  auto qkv = randn(size_t(B) * T * 3 * C, 7), dy = randn(size_t(B) * T * C, 8);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(qkv.size(), -5.0f);
  be->bidir_attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  be->bidir_attention_backward(dqkv.data(), dy.data(), qkv.data(), att.data(), B, T, C, NH);
  const Vec fd = numgrad([&](const Vec& x) { return ref_bidir_forward(x, B, T, C, NH).out; }, to_d(qkv), to_d(dy));
  const double e_ref = rel_err(ref_bidir_backward(to_d(qkv), to_d(dy), B, T, C, NH), fd);
  const double e_op = rel_err(dqkv, fd);
  EXPECT_LT(e_ref, kTolRefFd);
  EXPECT_LT(e_op, kTolFd);
  std::printf("bidir finite differences: reference %.2e, op %.2e\n", e_ref, e_op);
}

// =========================================================================================
// query attention: q (C), kv (S,N,2C) (token s of position n: key (C) then value (C)),
// out (N,C), att (N,NH,S)

AttRef ref_query_forward(const Vec& q, const Vec& kv, int N, int S, int C, int NH) {
  const int hs = C / NH;
  AttRef r{Vec(size_t(N) * C, 0.0), Vec(size_t(N) * NH * S, 0.0)};
  auto key = [&](int s, int n, int c) { return kv[(size_t(s) * N + n) * 2 * C + c]; };
  auto val = [&](int s, int n, int c) { return kv[(size_t(s) * N + n) * 2 * C + C + c]; };
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < NH; ++h) {
      Vec e(S);
      double mx = -1e300;
      for (int s = 0; s < S; ++s) {
        double d = 0;
        for (int c = h * hs; c < (h + 1) * hs; ++c) d += q[c] * key(s, n, c);
        e[s] = d / std::sqrt(double(hs));
        mx = std::max(mx, e[s]);
      }
      double z = 0;
      for (int s = 0; s < S; ++s) z += (e[s] = std::exp(e[s] - mx));
      for (int s = 0; s < S; ++s) {
        const double p = e[s] / z;
        r.att[(size_t(n) * NH + h) * S + s] = p;
        for (int c = h * hs; c < (h + 1) * hs; ++c) r.out[size_t(n) * C + c] += p * val(s, n, c);
      }
    }
  return r;
}

struct QueryGrads {
  Vec dq;   // (C): the sum over positions (what the op adds to dq)
  Vec dkv;  // (S,N,2C)
};

// By hand, per (n, h): o = sum_s a_s v_s, a = softmax(e), e_s = q_h . k_s / sqrt(hs).
// dv_s = a_s dO; da_s = dO . v_s; de_s = a_s (da_s - sum_t a_t da_t);
// dk_s = de_s q_h / sqrt(hs); dq_h += de_s k_s / sqrt(hs), summed over s and n.
QueryGrads ref_query_backward(const Vec& q, const Vec& kv, const Vec& dout, int N, int S, int C, int NH) {
  const int hs = C / NH;
  const double sc = 1.0 / std::sqrt(double(hs));
  const AttRef f = ref_query_forward(q, kv, N, S, C, NH);
  QueryGrads g{Vec(C, 0.0), Vec(kv.size(), 0.0)};
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < NH; ++h) {
      const double* a = &f.att[(size_t(n) * NH + h) * S];
      Vec da(S);
      double dot = 0;
      for (int s = 0; s < S; ++s) {
        double d = 0;
        for (int c = h * hs; c < (h + 1) * hs; ++c)
          d += dout[size_t(n) * C + c] * kv[(size_t(s) * N + n) * 2 * C + C + c];
        da[s] = d;
        dot += a[s] * d;
      }
      for (int s = 0; s < S; ++s) {
        const double de = a[s] * (da[s] - dot) * sc;
        const size_t base = (size_t(s) * N + n) * 2 * C;
        for (int c = h * hs; c < (h + 1) * hs; ++c) {
          g.dkv[base + c] = de * q[c];
          g.dkv[base + C + c] = a[s] * dout[size_t(n) * C + c];
          g.dq[c] += de * kv[base + c];
        }
      }
    }
  return g;
}

struct QShape {
  int N, S, C, NH;
};

// NH 3, 8, 1, 2; S = 1 (a single variable: a = 1, out = v, no gradient to keys or query);
// non-power-of-two sizes throughout (hs 4, 5, 6, 3).
TEST_F(VitOps, QueryAttentionForwardBackwardAgainstReference) {
  for (const QShape s : {QShape{7, 5, 12, 3}, QShape{33, 13, 40, 8}, QShape{4, 3, 6, 1}, QShape{5, 1, 6, 2}}) {
    const int N = s.N, S = s.S, C = s.C, NH = s.NH;
    auto q = randn(C, 300 + N, 1.5f), kv = randn(size_t(S) * N * 2 * C, 400 + N, 1.5f);
    auto dy = randn(size_t(N) * C, 500 + N);
    const auto dq0 = randn(C, 600 + N);  // dq accumulates onto this
    std::vector<float> out(size_t(N) * C, 7.0f), att(size_t(N) * NH * S, 7.0f), dq = dq0;
    std::vector<float> dkv(kv.size(), 123.0f);  // written, not accumulated
    be->query_attention_forward(out.data(), att.data(), q.data(), kv.data(), N, S, C, NH);
    be->query_attention_backward(dq.data(), dkv.data(), dy.data(), q.data(), kv.data(), att.data(), N, S, C, NH);
    const AttRef ref = ref_query_forward(to_d(q), to_d(kv), N, S, C, NH);
    QueryGrads g = ref_query_backward(to_d(q), to_d(kv), to_d(dy), N, S, C, NH);
    for (int c = 0; c < C; ++c) g.dq[c] += dq0[c];
    const double e_out = rel_err(out, ref.out), e_att = rel_err(att, ref.att);
    const double e_dq = rel_err(dq, g.dq), e_dkv = rel_err(dkv, g.dkv);
    EXPECT_LT(e_out, kTolF32) << "N " << N << " S " << S << " C " << C << " NH " << NH;
    EXPECT_LT(e_att, kTolF32) << "N " << N << " S " << S << " C " << C << " NH " << NH;
    EXPECT_LT(e_dq, kTolF32) << "N " << N << " S " << S << " C " << C << " NH " << NH;
    EXPECT_LT(e_dkv, kTolF32) << "N " << N << " S " << S << " C " << C << " NH " << NH;
    std::printf("query N %d S %d C %d NH %d: out %.2e att %.2e dq %.2e dkv %.2e\n", N, S, C, NH, e_out, e_att, e_dq,
                e_dkv);
    for (size_t r = 0; r < size_t(N) * NH; ++r) {
      double sum = 0;
      for (int j = 0; j < S; ++j) sum += att[r * S + j];
      ASSERT_NEAR(sum, 1.0, 1e-6) << "row " << r;
    }
    if (S == 1) {  // closed form: the one token's value, probability 1, no key or query gradient
      for (size_t i = 0; i < att.size(); ++i) EXPECT_EQ(att[i], 1.0f);
      for (int n = 0; n < N; ++n)
        for (int c = 0; c < C; ++c) {
          EXPECT_EQ(out[size_t(n) * C + c], kv[size_t(n) * 2 * C + C + c]);
          EXPECT_EQ(dkv[size_t(n) * 2 * C + c], 0.0f);
          EXPECT_EQ(dkv[size_t(n) * 2 * C + C + c], dy[size_t(n) * C + c]);
        }
      for (int c = 0; c < C; ++c) EXPECT_EQ(dq[c], dq0[c]);
    }
  }
}

// dq accumulates: a second backward adds the same sum again (dkv is rewritten, unchanged).
TEST_F(VitOps, QueryAttentionBackwardAccumulatesDq) {
  const int N = 6, S = 4, C = 9, NH = 3;
  auto q = randn(C, 1), kv = randn(size_t(S) * N * 2 * C, 2), dy = randn(size_t(N) * C, 3);
  std::vector<float> out(N * C), att(N * NH * S), dq(C, 0.0f), dkv(kv.size());
  be->query_attention_forward(out.data(), att.data(), q.data(), kv.data(), N, S, C, NH);
  be->query_attention_backward(dq.data(), dkv.data(), dy.data(), q.data(), kv.data(), att.data(), N, S, C, NH);
  const std::vector<float> once = dq, dkv_once = dkv;
  be->query_attention_backward(dq.data(), dkv.data(), dy.data(), q.data(), kv.data(), att.data(), N, S, C, NH);
  EXPECT_EQ(dkv, dkv_once);
  const QueryGrads g = ref_query_backward(to_d(q), to_d(kv), to_d(dy), N, S, C, NH);
  Vec twice(C);
  for (int c = 0; c < C; ++c) {
    twice[c] = 2 * g.dq[c];
    EXPECT_FLOAT_EQ(dq[c], once[c] + once[c]);
  }
  EXPECT_LT(rel_err(dq, twice), kTolF32);
}

TEST_F(VitOps, QueryAttentionBackwardFiniteDifferences) {
  const int N = 3, S = 3, C = 4, NH = 2;
  auto q = randn(C, 11), kv = randn(size_t(S) * N * 2 * C, 12), dy = randn(size_t(N) * C, 13);
  std::vector<float> out(N * C), att(N * NH * S), dq(C, 0.0f), dkv(kv.size());
  be->query_attention_forward(out.data(), att.data(), q.data(), kv.data(), N, S, C, NH);
  be->query_attention_backward(dq.data(), dkv.data(), dy.data(), q.data(), kv.data(), att.data(), N, S, C, NH);
  const Vec fd_q =
      numgrad([&](const Vec& x) { return ref_query_forward(x, to_d(kv), N, S, C, NH).out; }, to_d(q), to_d(dy));
  const Vec fd_kv =
      numgrad([&](const Vec& x) { return ref_query_forward(to_d(q), x, N, S, C, NH).out; }, to_d(kv), to_d(dy));
  const QueryGrads g = ref_query_backward(to_d(q), to_d(kv), to_d(dy), N, S, C, NH);
  const double e_ref_q = rel_err(g.dq, fd_q), e_ref_kv = rel_err(g.dkv, fd_kv);
  const double e_q = rel_err(dq, fd_q), e_kv = rel_err(dkv, fd_kv);
  EXPECT_LT(e_ref_q, kTolRefFd);
  EXPECT_LT(e_ref_kv, kTolRefFd);
  EXPECT_LT(e_q, kTolFd);
  EXPECT_LT(e_kv, kTolFd);
  std::printf("query finite differences: reference dq %.2e dkv %.2e, op dq %.2e dkv %.2e\n", e_ref_q, e_ref_kv, e_q,
              e_kv);
}

// =========================================================================================
// weighted squared error: pred, target (R,K), w (K)

Vec ref_row_loss(const Vec& p, const Vec& t, const Vec& w, int R, int K) {
  Vec l(R, 0.0);
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) {
      const double d = p[size_t(r) * K + k] - t[size_t(r) * K + k];
      l[r] += w[k] * d * d;
    }
  return l;
}

struct MseShape {
  int R, K;
};

TEST_F(VitOps, WeightedMseAgainstReference) {
  const float dloss = 0.37f;
  for (const MseShape s : {MseShape{5, 37}, MseShape{1, 1}, MseShape{64, 129}, MseShape{3, 1}}) {
    const int R = s.R, K = s.K;
    auto pred = randn(size_t(R) * K, 700 + K), target = randn(size_t(R) * K, 800 + K), w = randn(K, 900 + K);
    for (auto& x : w) x = std::fabs(x) + 0.1f;  // latitude weights are positive
    std::vector<float> loss(R, 7.0f), grad(pred.size(), 7.0f);
    be->weighted_mse(loss.data(), grad.data(), pred.data(), target.data(), w.data(), R, K, dloss);
    const Vec rl = ref_row_loss(to_d(pred), to_d(target), to_d(w), R, K);
    double e_loss = 0, e_grad = 0;
    for (int r = 0; r < R; ++r) {
      e_loss = std::max(e_loss, std::fabs(loss[r] - rl[r]) / std::max(rl[r], 1e-30));
      for (int k = 0; k < K; ++k) {
        const size_t i = size_t(r) * K + k;
        const double g = 2.0 * dloss * w[k] * (double(pred[i]) - double(target[i]));
        e_grad = std::max(e_grad, std::fabs(grad[i] - g) / std::max(std::fabs(g), 1e-30));
      }
    }
    EXPECT_LT(e_loss, 2e-7) << "R " << R << " K " << K;
    EXPECT_LT(e_grad, 1e-6) << "R " << R << " K " << K;
    std::printf("weighted_mse R %d K %d: row loss %.2e, grad %.2e (relative, elementwise)\n", R, K, e_loss, e_grad);

    // grad null: losses only
    std::vector<float> loss2(R, 7.0f);
    be->weighted_mse(loss2.data(), nullptr, pred.data(), target.data(), w.data(), R, K, dloss);
    EXPECT_EQ(loss2, loss);
    // grad aliasing pred: the same losses, and pred overwritten by the same gradient
    std::vector<float> inplace = pred, loss3(R, 7.0f);
    be->weighted_mse(loss3.data(), inplace.data(), inplace.data(), target.data(), w.data(), R, K, dloss);
    EXPECT_EQ(loss3, loss);
    EXPECT_EQ(inplace, grad);
  }
}

// The gradient is d(dloss * sum_r row_loss[r]) / d pred.
TEST_F(VitOps, WeightedMseGradientFiniteDifferences) {
  const int R = 3, K = 5;
  const float dloss = 0.5f;
  auto pred = randn(R * K, 21), target = randn(R * K, 22), w = randn(K, 23);
  for (auto& x : w) x = std::fabs(x) + 0.1f;
  std::vector<float> loss(R), grad(R * K);
  be->weighted_mse(loss.data(), grad.data(), pred.data(), target.data(), w.data(), R, K, dloss);
  const Vec fd = numgrad(
      [&](const Vec& p) {
        const Vec l = ref_row_loss(p, to_d(target), to_d(w), R, K);
        return Vec{std::accumulate(l.begin(), l.end(), 0.0)};
      },
      to_d(pred), Vec{double(dloss)});
  const double e = rel_err(grad, fd);
  EXPECT_LT(e, kTolFd);
  std::printf("weighted_mse finite differences: %.2e\n", e);
}

}  // namespace
}  // namespace weft
