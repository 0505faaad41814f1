// Tensor-parallel communication pairs on every rank count (2, 3, 4, 8), against closed forms:
// a column-parallel linear followed by a row-parallel one (Megatron's MLP pattern) forward and
// backward, and the vocabulary-parallel cross-entropy. Every rank builds the whole matrices
// from formulas, keeps its part, and checks the results against plain loops.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "mpi_test_util.h"
#include "parallel/tp/tp_comm.h"

namespace weft {
namespace {

TEST(MpiTensorParallel, ColumnThenRowParallelLinearForwardAndBackward) {
  auto world = test::fresh_world("tp");
  CommTensorParallel tp(*world);
  const int P = tp.size(), r = tp.rank();
  const int64_t N = 3, C = 4, H = 6 * P, Hl = H / P;
  auto X = [](int64_t i, int64_t c) { return 0.1 * (i + 1) - 0.05 * c; };
  auto W1 = [](int64_t c, int64_t h) { return 0.01 * ((c * 7 + h * 3) % 11) - 0.05; };
  auto W2 = [](int64_t h, int64_t c) { return 0.02 * ((h * 5 + c) % 7) - 0.06; };
  auto dZ = [](int64_t i, int64_t c) { return 0.3 - 0.1 * i + 0.05 * c; };
  std::vector<float> x(N * C), w1(C * Hl), w2(Hl * C), dz(N * C);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) x[i * C + c] = float(X(i, c)), dz[i * C + c] = float(dZ(i, c));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < Hl; ++h) w1[c * Hl + h] = float(W1(c, r * Hl + h));  // columns of rank r
  for (int64_t h = 0; h < Hl; ++h)
    for (int64_t c = 0; c < C; ++c) w2[h * C + c] = float(W2(r * Hl + h, c));  // rows of rank r
  auto be = make_cpu_backend();
  std::vector<float> y(N * Hl), z(N * C);
  be->matmul_forward(y.data(), x.data(), w1.data(), nullptr, N, C, Hl, false);  // identity in forward
  be->matmul_forward(z.data(), y.data(), w2.data(), nullptr, N, Hl, C, false);
  tp.all_reduce_sum(z.data(), N * C);                                             // all-reduce in forward
  // backward: identity for dZ, all-reduce of the input gradient
  std::vector<float> dy(N * Hl), dx(N * C), dw1(C * Hl, 0.0f), dw2(Hl * C, 0.0f);
  be->matmul_backward(dy.data(), dw2.data(), nullptr, dz.data(), y.data(), w2.data(), N, Hl, C);
  be->matmul_backward(dx.data(), dw1.data(), nullptr, dy.data(), x.data(), w1.data(), N, C, Hl);
  tp.all_reduce_sum(dx.data(), N * C);
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      double zr = 0, dxr = 0;
      for (int64_t h = 0; h < H; ++h) {
        double yh = 0, dyh = 0;
        for (int64_t k = 0; k < C; ++k) yh += X(i, k) * W1(k, h), dyh += dZ(i, k) * W2(h, k);
        zr += yh * W2(h, c);
        dxr += dyh * W1(c, h);
      }
      EXPECT_NEAR(z[i * C + c], zr, 1e-5) << "Z " << i << "," << c;
      EXPECT_NEAR(dx[i * C + c], dxr, 1e-5) << "dX " << i << "," << c;
    }
  }
  // Weight gradients stay local: rank r's slice of the whole dW1 / dW2.
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t hl = 0; hl < Hl; ++hl) {
      const int64_t h = r * Hl + hl;
      double g1 = 0, g2 = 0;
      for (int64_t i = 0; i < N; ++i) {
        double dyh = 0, yh = 0;
        for (int64_t k = 0; k < C; ++k) dyh += dZ(i, k) * W2(h, k), yh += X(i, k) * W1(k, h);
        g1 += X(i, c) * dyh;
        g2 += yh * dZ(i, c);
      }
      EXPECT_NEAR(dw1[c * Hl + hl], g1, 1e-5);
      EXPECT_NEAR(dw2[hl * C + c], g2, 1e-5);
    }
  }
}

TEST(MpiTensorParallel, VocabularyParallelCrossEntropy) {
  auto world = test::fresh_world("tp");
  CommTensorParallel tp(*world);
  const int P = tp.size(), r = tp.rank();
  const int64_t N = 5, Vl = 8, Vp = Vl * P, V = Vp - 3;  // the last 3 columns are padding
  auto L = [](int64_t i, int64_t v) { return std::sin(0.7 * i + 0.3 * v) * 3.0; };
  std::vector<int32_t> tgt(N);
  for (int64_t i = 0; i < N; ++i) tgt[i] = static_cast<int32_t>((i * 7 + 2) % V);
  const int64_t v0 = r * Vl, cols = std::clamp<int64_t>(V - v0, 0, Vl);
  std::vector<float> logits(N * Vl), mx(N), st(2 * N);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < Vl; ++j) logits[i * Vl + j] = float(L(i, v0 + j));
  auto be = make_cpu_backend();
  be->ce_row_max(logits.data(), N, Vl, cols, mx.data());
  tp.all_reduce_max(mx.data(), N);
  be->ce_row_sumexp(logits.data(), N, Vl, cols, mx.data(), st.data());
  be->ce_target_logit(logits.data(), N, Vl, cols, tgt.data(), v0, st.data() + N);
  tp.all_reduce_sum(st.data(), 2 * N);
  const float dloss = 0.5f;
  be->ce_grad(logits.data(), N, Vl, cols, mx.data(), st.data(), tgt.data(), v0, dloss);
  for (int64_t i = 0; i < N; ++i) {
    double m = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, L(i, v));
    for (int64_t v = 0; v < V; ++v) z += std::exp(L(i, v) - m);
    const double loss = std::log(z) + m - L(i, tgt[i]);
    EXPECT_NEAR(std::log(st[i]) + mx[i] - st[N + i], loss, 1e-5);
    for (int64_t j = 0; j < Vl; ++j) {
      const int64_t v = v0 + j;
      const double g = v < V ? (std::exp(L(i, v) - m) / z - (v == tgt[i])) * dloss : 0.0;
      EXPECT_NEAR(logits[i * Vl + j], g, 1e-6) << i << "," << v;
    }
  }
}

}  // namespace
}  // namespace weft
