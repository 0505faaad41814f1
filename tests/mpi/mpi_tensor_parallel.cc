// The tensor-parallel layers of src/parallel/tp (layers.h) on every rank count (2, 3, 4, 8),
// with and without sequence parallelism, against closed forms: a column-parallel linear
// followed by a row-parallel one with its residual (Megatron's MLP pattern) forward and
// backward, the LayerNorm region (its weight gradient summed over the ranks), the
// vocabulary-parallel embedding, and the vocabulary-parallel head (logits, cross-entropy and
// their backward, one row's whole logits). Every rank builds the whole tensors from formulas,
// keeps its part, and checks what it holds against plain loops in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "mpi_test_util.h"
#include "parallel/tp/layers.h"
#include "parallel/tp/tp_comm.h"

namespace weft {
namespace {

using Vec = std::vector<float>;

// The layers over the world: P ranks, N = 24 token rows (divisible by 2, 3, 4 and 8), of which
// rows [r0, r0 + Nl) are this rank's between the tensor-parallel blocks.
class TpLayers : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    world = test::fresh_world("tp");
    ops = std::make_unique<CommTensorParallel>(*world);
    P = ops->size(), r = ops->rank();
    be = make_cpu_backend();
    tp = std::make_unique<TensorParallel>(*be, P, r);
    tp->set_ops(ops.get(), GetParam());
    Nl = tp->local_rows(N);
    r0 = GetParam() ? r * Nl : 0;
    tp->reserve(N, kMaxC);
  }
  static constexpr int64_t N = 24, kMaxC = 8;
  std::unique_ptr<Communicator> world;
  std::unique_ptr<CommTensorParallel> ops;
  std::unique_ptr<Backend> be;
  std::unique_ptr<TensorParallel> tp;
  int P = 1, r = 0;
  int64_t Nl = N, r0 = 0;
};

TEST_P(TpLayers, ColumnThenRowParallelLinearWithResidual) {
  const int64_t C = 4, H = 6 * P, Hl = H / P;
  auto X = [](int64_t i, int64_t c) { return 0.1 * (i % 7 + 1) - 0.05 * c; };
  auto W1 = [](int64_t c, int64_t h) { return 0.01 * ((c * 7 + h * 3) % 11) - 0.05; };
  auto B1 = [](int64_t h) { return 0.02 * (h % 5) - 0.03; };
  auto W2 = [](int64_t h, int64_t c) { return 0.02 * ((h * 5 + c) % 7) - 0.06; };
  auto B2 = [](int64_t c) { return 0.01 * c - 0.02; };
  auto dZ = [](int64_t i, int64_t c) { return 0.3 - 0.02 * i + 0.05 * c; };
  Vec xl(Nl * C), x(N * C), w1(C * Hl), b1(Hl), w2(Hl * C), b2(C), dz(Nl * C);
  for (int64_t i = 0; i < Nl; ++i)
    for (int64_t c = 0; c < C; ++c) xl[i * C + c] = float(X(r0 + i, c)), dz[i * C + c] = float(dZ(r0 + i, c));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < Hl; ++h) w1[c * Hl + h] = float(W1(c, r * Hl + h));  // columns of rank r
  for (int64_t h = 0; h < Hl; ++h) {
    b1[h] = float(B1(r * Hl + h));
    for (int64_t c = 0; c < C; ++c) w2[h * C + c] = float(W2(r * Hl + h, c));  // rows of rank r
  }
  for (int64_t c = 0; c < C; ++c) b2[c] = float(B2(c));
  // The column-parallel input region's forward (the LayerNorm region runs it in the model).
  if (GetParam()) {
    tp->column_input_forward(xl.data(), x.data(), N, C);
  } else {
    x = xl;
  }
  ColumnParallelLinear col(*tp);
  RowParallelLinear row(*tp);
  Vec y(N * Hl), z(Nl * C);
  col.forward(y.data(), x.data(), w1.data(), b1.data(), N, C, Hl);
  row.forward(z.data(), xl.data(), y.data(), w2.data(), b2.data(), N, Hl, C);  // z = x + y W2 + b2
  Vec dy(N * Hl), dxp(N * C), dw1(C * Hl, 0.0f), db1(Hl, 0.0f), dw2(Hl * C, 0.0f), db2(C, 0.0f);
  row.backward(dy.data(), dw2.data(), db2.data(), dz.data(), y.data(), w2.data(), N, Hl, C);
  const float* dx = col.backward(dxp.data(), dw1.data(), db1.data(), dy.data(), x.data(), w1.data(), N, C, Hl).as_f32();
  auto Y = [&](int64_t i, int64_t h) {
    double s = B1(h);
    for (int64_t k = 0; k < C; ++k) s += X(i, k) * W1(k, h);
    return s;
  };
  auto dY = [&](int64_t i, int64_t h) {  // the row-parallel input gradient, over every row
    double s = 0;
    for (int64_t k = 0; k < C; ++k) s += dZ(i, k) * W2(h, k);
    return s;
  };
  for (int64_t il = 0; il < Nl; ++il) {
    const int64_t i = r0 + il;
    for (int64_t c = 0; c < C; ++c) {
      double zr = X(i, c) + B2(c), dxr = 0;
      for (int64_t h = 0; h < H; ++h) zr += Y(i, h) * W2(h, c), dxr += dY(i, h) * W1(c, h);
      EXPECT_NEAR(z[il * C + c], zr, 1e-5) << "Z " << i << "," << c;
      EXPECT_NEAR(dx[il * C + c], dxr, 1e-5) << "dX " << i << "," << c;
    }
  }
  // Weight gradients stay local: rank r's slice of the whole dW1 / dW2, over every row.
  for (int64_t hl = 0; hl < Hl; ++hl) {
    const int64_t h = r * Hl + hl;
    double gb1 = 0;
    for (int64_t i = 0; i < N; ++i) gb1 += dY(i, h);
    EXPECT_NEAR(db1[hl], gb1, 1e-5);
    for (int64_t c = 0; c < C; ++c) {
      double g1 = 0, g2 = 0;
      for (int64_t i = 0; i < N; ++i) g1 += X(i, c) * dY(i, h), g2 += Y(i, h) * dZ(i, c);
      EXPECT_NEAR(dw1[c * Hl + hl], g1, 1e-5);
      EXPECT_NEAR(dw2[hl * C + c], g2, 1e-5);
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    double g = 0;
    for (int64_t i = 0; i < N; ++i) g += dZ(i, c);
    EXPECT_NEAR(db2[c], g, 1e-5);  // the bias is replicated: the whole sum on every rank
  }
}

TEST_P(TpLayers, LayerNormRegionGathersRowsAndSumsItsWeightGradient) {
  const int64_t C = 5;
  const float eps = 1e-5f;
  auto X = [](int64_t i, int64_t c) { return std::sin(0.9 * i + 0.4 * c) + 0.1 * c; };
  auto W = [](int64_t c) { return 1.0 + 0.1 * c; };
  auto Bb = [](int64_t c) { return 0.05 * c; };
  auto dO = [](int64_t i, int64_t c) { return std::cos(0.3 * i - 0.7 * c); };
  Vec xl(Nl * C), w(C), b(C), out(N * C), mean(Nl), rstd(Nl), dout(Nl * C), dx(Nl * C, 0.0f), dw(C, 0.0f),
      db(C, 0.0f);
  for (int64_t i = 0; i < Nl; ++i)
    for (int64_t c = 0; c < C; ++c) xl[i * C + c] = float(X(r0 + i, c)), dout[i * C + c] = float(dO(r0 + i, c));
  for (int64_t c = 0; c < C; ++c) w[c] = float(W(c)), b[c] = float(Bb(c));
  SequenceParallelLayerNorm ln(*tp, eps);
  ln.forward(out.data(), mean.data(), rstd.data(), xl.data(), w.data(), b.data(), N, C);
  ln.backward(dx.data(), dw.data(), db.data(), dout.data(), xl.data(), w.data(), mean.data(), rstd.data(), N, C);
  std::vector<double> gw(C, 0.0), gb(C, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += X(i, c) / C;
    for (int64_t c = 0; c < C; ++c) v += (X(i, c) - m) * (X(i, c) - m) / C;
    const double rs = 1.0 / std::sqrt(v + eps);
    double a = 0, bsum = 0;  // means of dout*w and dout*w*xhat over the row
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (X(i, c) - m) * rs;
      EXPECT_NEAR(out[i * C + c], xh * W(c) + Bb(c), 1e-5) << "every row on every rank: " << i;
      gw[c] += dO(i, c) * xh, gb[c] += dO(i, c);
      a += dO(i, c) * W(c) / C, bsum += dO(i, c) * W(c) * xh / C;
    }
    if (i < r0 || i >= r0 + Nl) continue;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (X(i, c) - m) * rs;
      EXPECT_NEAR(dx[(i - r0) * C + c], rs * (dO(i, c) * W(c) - a - xh * bsum), 1e-4) << "dX " << i;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(dw[c], gw[c], 1e-4) << "summed over every row";
    EXPECT_NEAR(db[c], gb[c], 1e-4);
  }
}

TEST_P(TpLayers, VocabularyParallelEmbedding) {
  const int64_t B = 3, T = N / B, C = 4, Vl = 5, Vp = Vl * P;
  auto E = [](int64_t v, int64_t c) { return 0.1 * v - 0.03 * c; };
  auto Pe = [](int64_t t, int64_t c) { return 0.01 * t * (c + 1); };
  auto dO = [](int64_t i, int64_t c) { return 0.2 - 0.01 * i + 0.1 * c; };
  std::vector<int32_t> tok(N);
  for (int64_t i = 0; i < N; ++i) tok[i] = static_cast<int32_t>((i * 7 + 3) % (Vp - 2));
  VocabParallelEmbedding emb(*tp, Vp);
  ASSERT_EQ(emb.vocab_rows(), Vl);
  ASSERT_EQ(emb.v0(), r * Vl);
  Vec wte(Vl * C), wpe(T * C), out(Nl * C), dout(Nl * C), dwte(Vl * C, 0.0f), dwpe(T * C, 0.0f);
  for (int64_t v = 0; v < Vl; ++v)
    for (int64_t c = 0; c < C; ++c) wte[v * C + c] = float(E(r * Vl + v, c));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) wpe[t * C + c] = float(Pe(t, c));
  for (int64_t i = 0; i < Nl; ++i)
    for (int64_t c = 0; c < C; ++c) dout[i * C + c] = float(dO(r0 + i, c));
  emb.forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  const float* dy = emb.output_grad(dout.data(), N, C).as_f32();
  emb.backward(dwte.data(), dwpe.data(), dy, tok.data(), B, T, C);
  for (int64_t i = 0; i < Nl; ++i)
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(out[i * C + c], E(tok[r0 + i], c) + Pe((r0 + i) % T, c), 1e-6);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t v = 0; v < Vl; ++v) {
      double g = 0;
      for (int64_t i = 0; i < N; ++i) g += tok[i] == r * Vl + v ? dO(i, c) : 0.0;
      EXPECT_NEAR(dwte[v * C + c], g, 1e-5) << "row " << r * Vl + v;
    }
    for (int64_t t = 0; t < T; ++t) {
      double g = 0;
      for (int64_t b = 0; b < B; ++b) g += dO(b * T + t, c);
      EXPECT_NEAR(dwpe[t * C + c], g, 1e-5) << "position " << t;
    }
  }
}

TEST_P(TpLayers, VocabularyParallelHead) {
  const int64_t C = 3, Vl = 8, Vp = Vl * P, V = Vp - 3;  // the last 3 columns are padding
  auto X = [](int64_t i, int64_t c) { return std::sin(0.7 * i + 0.3 * c) * 2.0; };
  auto E = [](int64_t v, int64_t c) { return std::cos(0.5 * v - 0.9 * c); };
  auto L = [&](int64_t i, int64_t v) { return X(i, 0) * E(v, 0) + X(i, 1) * E(v, 1) + X(i, 2) * E(v, 2); };
  std::vector<int32_t> tgt(N);
  for (int64_t i = 0; i < N; ++i) tgt[i] = static_cast<int32_t>((i * 7 + 2) % V);
  const int64_t v0 = r * Vl;
  Vec x(N * C), wte(Vl * C), logits(N * Vl), losses(N), stats(3 * N), dx(N * C), dwte(Vl * C, 0.0f),
      row(Vp);  // row_logits writes Vp columns (the padding ones are scratch)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) x[i * C + c] = float(X(i, c));
  for (int64_t v = 0; v < Vl; ++v)  // padding rows are zero, as in the model
    for (int64_t c = 0; c < C; ++c) wte[v * C + c] = v0 + v < V ? float(E(v0 + v, c)) : 0.0f;
  VocabParallelHead head(*tp, V, Vp);
  ASSERT_EQ(head.vocab_rows(), Vl);
  const float dloss = 0.5f;
  const int64_t chunk = 10;  // the model's row chunks: the input gradient is reduced chunk by chunk
  for (int64_t c0 = 0; c0 < N; c0 += chunk) {
    const int64_t rows = std::min(chunk, N - c0);
    float* lg = logits.data() + c0 * Vl;
    head.logits(lg, x.data() + c0 * C, wte.data(), rows, C);
    head.cross_entropy(lg, losses.data() + c0, tgt.data() + c0, rows, dloss, stats.data());
    head.backward(dx.data() + c0 * C, dwte.data(), lg, x.data() + c0 * C, wte.data(), rows, C);
  }
  const float* dxl = head.input_grad(dx.data(), N, C).as_f32();  // this rank's rows
  head.row_logits(row.data(), x.data() + (N - 1) * C, wte.data(), C);
  std::vector<std::vector<double>> G(N, std::vector<double>(V));  // dlogits over the whole vocabulary
  for (int64_t i = 0; i < N; ++i) {
    double m = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, L(i, v));
    for (int64_t v = 0; v < V; ++v) z += std::exp(L(i, v) - m);
    EXPECT_NEAR(losses[i], std::log(z) + m - L(i, tgt[i]), 1e-5) << "loss " << i;
    for (int64_t v = 0; v < V; ++v) G[i][v] = (std::exp(L(i, v) - m) / z - (v == tgt[i])) * dloss;
    for (int64_t j = 0; j < Vl; ++j) {
      EXPECT_NEAR(logits[i * Vl + j], v0 + j < V ? G[i][v0 + j] : 0.0, 1e-6) << i << "," << v0 + j;
    }
  }
  for (int64_t il = 0; il < Nl; ++il) {
    for (int64_t c = 0; c < C; ++c) {
      double g = 0;
      for (int64_t v = 0; v < V; ++v) g += G[r0 + il][v] * E(v, c);
      EXPECT_NEAR(dxl[il * C + c], g, 1e-5) << "dX " << r0 + il << "," << c;
    }
  }
  for (int64_t j = 0; j < Vl && v0 + j < V; ++j) {
    for (int64_t c = 0; c < C; ++c) {
      double g = 0;
      for (int64_t i = 0; i < N; ++i) g += G[i][v0 + j] * X(i, c);
      EXPECT_NEAR(dwte[j * C + c], g, 1e-5) << "dwte " << v0 + j;
    }
  }
  for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(row[v], L(N - 1, v), 1e-5) << "whole row's logit " << v;
}

INSTANTIATE_TEST_SUITE_P(SequenceParallel, TpLayers, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "sp" : "nosp"; });

}  // namespace
}  // namespace weft
