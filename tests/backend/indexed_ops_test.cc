// The indexed-row ops of backend.h (graph networks, issue 33) on cpu and cpu-guarded: gather,
// segment sum / mean / max / min (with a permutation and empty segments), their backward
// (broadcast, arg scatter, and a gather's backward as a permuted segment sum), batch
// normalisation forward and backward. Against float64 references: forwards within float
// rounding, backwards by their adjoint identity or central differences; and bitwise the same
// results on 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/device_buffer.h"
#include "backend_test_util.h"

namespace weft {
namespace {

using Vec = std::vector<float>;
using test::randn;

struct Segments {
  std::vector<int32_t> offsets, perm;  // perm: a permutation of the rows
  int64_t rows = 0;
};

// S segments over `rows` rows (some empty), the rows taken in a random order.
Segments make_segments(int64_t S, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  Segments g;
  g.rows = rows;
  std::vector<int32_t> cuts(static_cast<size_t>(S - 1));
  for (int32_t& c : cuts) c = static_cast<int32_t>(rng() % static_cast<uint32_t>(rows + 1));
  std::sort(cuts.begin(), cuts.end());
  g.offsets.push_back(0);
  g.offsets.insert(g.offsets.end(), cuts.begin(), cuts.end());
  g.offsets.push_back(static_cast<int32_t>(rows));
  g.perm.resize(static_cast<size_t>(rows));
  std::iota(g.perm.begin(), g.perm.end(), 0);
  std::shuffle(g.perm.begin(), g.perm.end(), rng);
  return g;
}

class IndexedOps : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Backend> be_ = test::make_test_backend(GetParam());
  DeviceBuffer f(const Vec& v) { return to_device(*be_, v, DType::kF32); }
  DeviceBuffer i(const std::vector<int32_t>& v) { return to_device(*be_, v, DType::kI32); }
  Vec reduce(const Vec& x, const Segments& g, int64_t C, SegmentOp op, bool use_perm, std::vector<int32_t>* arg) {
    const int64_t S = static_cast<int64_t>(g.offsets.size()) - 1;
    DeviceBuffer dx = f(x), dout = f(Vec(static_cast<size_t>(S * C), 7.0f)), off = i(g.offsets), perm = i(g.perm),
                 a(*be_, DType::kI32, S * C);
    be_->segment_reduce_f32(dout.data<float>(), arg ? a.data<int32_t>() : nullptr, dx.data<float>(),
                            use_perm ? perm.data<int32_t>() : nullptr, off.data<int32_t>(), S, C, op, false);
    if (arg) *arg = a.download<int32_t>();
    return dout.download<float>();
  }
};

TEST_P(IndexedOps, GatherRowsAndItsBackward) {
  const int64_t rows = 23, C = 5, M = 60;
  const Vec x = randn(static_cast<size_t>(rows * C), 1);
  std::mt19937 rng(2);
  std::vector<int32_t> idx(M);
  for (int32_t& k : idx) k = static_cast<int32_t>(rng() % rows);
  DeviceBuffer dx = f(x), di = i(idx), out(*be_, DType::kF32, M * C);
  be_->gather_rows_f32(out.data<float>(), dx.data<float>(), di.data<int32_t>(), M, C);
  const Vec got = out.download<float>();
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t c = 0; c < C; ++c) ASSERT_EQ(got[static_cast<size_t>(m * C + c)], x[static_cast<size_t>(idx[m] * C + c)]);
  }
  // Backward: dx[idx[m]] += dout[m], as the segment sum over the gathered positions grouped by
  // source (a stable sort of the positions by idx; offsets by source row).
  std::vector<int32_t> order(M);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return idx[a] < idx[b]; });
  std::vector<int32_t> offsets(rows + 1, 0);
  for (int32_t k : idx) ++offsets[static_cast<size_t>(k + 1)];
  for (int64_t r = 0; r < rows; ++r) offsets[static_cast<size_t>(r + 1)] += offsets[static_cast<size_t>(r)];
  const Vec dout = randn(static_cast<size_t>(M * C), 3), base = randn(static_cast<size_t>(rows * C), 4);
  DeviceBuffer dd = f(dout), g = f(base), po = i(order), of = i(offsets);
  be_->segment_reduce_f32(g.data<float>(), nullptr, dd.data<float>(), po.data<int32_t>(), of.data<int32_t>(), rows, C,
                          SegmentOp::kSum, true);
  const Vec grad = g.download<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      float want = base[static_cast<size_t>(r * C + c)], add = 0.0f;
      for (int32_t k : order) {
        if (idx[k] == r) add += dout[static_cast<size_t>(k * C + c)];  // in position order
      }
      want += add;
      ASSERT_EQ(grad[static_cast<size_t>(r * C + c)], want) << r << "," << c;
    }
  }
}

TEST_P(IndexedOps, SegmentReductionsMatchTheReference) {
  const int64_t S = 17, rows = 90, C = 6;
  const Segments g = make_segments(S, rows, 5);
  const Vec x = randn(static_cast<size_t>(rows * C), 6);
  for (bool use_perm : {false, true}) {
    for (SegmentOp op : {SegmentOp::kSum, SegmentOp::kMean, SegmentOp::kMax, SegmentOp::kMin}) {
      std::vector<int32_t> arg;
      const bool with_arg = op == SegmentOp::kMax || op == SegmentOp::kMin;
      const Vec got = reduce(x, g, C, op, use_perm, with_arg ? &arg : nullptr);
      for (int64_t s = 0; s < S; ++s) {
        const int64_t k0 = g.offsets[static_cast<size_t>(s)], k1 = g.offsets[static_cast<size_t>(s + 1)];
        for (int64_t c = 0; c < C; ++c) {
          double sum = 0.0, best = 0.0;
          int64_t at = -1;
          for (int64_t k = k0; k < k1; ++k) {
            const int64_t r = use_perm ? g.perm[static_cast<size_t>(k)] : k;
            const double v = x[static_cast<size_t>(r * C + c)];
            sum += v;
            const bool better = op == SegmentOp::kMax ? v > best : v < best;
            if (at < 0 || better) best = v, at = r;
          }
          const double n = static_cast<double>(k1 - k0);
          const double want = op == SegmentOp::kSum ? sum : op == SegmentOp::kMean ? (n > 0 ? sum / n : 0.0) : best;
          EXPECT_NEAR(got[static_cast<size_t>(s * C + c)], want, 1e-5) << s << "," << c;
          if (with_arg) EXPECT_EQ(arg[static_cast<size_t>(s * C + c)], at) << s << "," << c;
        }
      }
    }
  }
}

TEST_P(IndexedOps, BackwardsAreTheAdjoints) {
  // <dout, op(x)> = <op^T(dout), x> for sum and mean; max and min scatter dout to their rows.
  const int64_t S = 13, rows = 70, C = 4;
  const Segments g = make_segments(S, rows, 9);
  const Vec x = randn(static_cast<size_t>(rows * C), 10), dout = randn(static_cast<size_t>(S * C), 11);
  DeviceBuffer dd = f(dout), perm = i(g.perm), off = i(g.offsets);
  for (bool mean : {false, true}) {
    const Vec y = reduce(x, g, C, mean ? SegmentOp::kMean : SegmentOp::kSum, true, nullptr);
    DeviceBuffer dx = f(Vec(static_cast<size_t>(rows * C), 0.5f));
    be_->segment_broadcast_f32(dx.data<float>(), dd.data<float>(), perm.data<int32_t>(), off.data<int32_t>(), S, C,
                               mean, true);
    const Vec gx = dx.download<float>();
    double lhs = 0.0, rhs = 0.0;
    for (size_t k = 0; k < y.size(); ++k) lhs += static_cast<double>(dout[k]) * y[k];
    for (size_t k = 0; k < x.size(); ++k) rhs += (static_cast<double>(gx[k]) - 0.5) * x[k];
    EXPECT_NEAR(lhs, rhs, 1e-4 * (std::fabs(lhs) + 1.0)) << (mean ? "mean" : "sum");
  }
  for (SegmentOp op : {SegmentOp::kMax, SegmentOp::kMin}) {
    std::vector<int32_t> arg;
    reduce(x, g, C, op, true, &arg);
    DeviceBuffer a = i(arg), dx = f(Vec(static_cast<size_t>(rows * C), 0.0f));
    be_->segment_arg_backward_f32(dx.data<float>(), dd.data<float>(), a.data<int32_t>(), S, C);
    const Vec gx = dx.download<float>();
    Vec want(static_cast<size_t>(rows * C), 0.0f);
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t c = 0; c < C; ++c) {
        const int32_t r = arg[static_cast<size_t>(s * C + c)];
        if (r >= 0) want[static_cast<size_t>(r * C + c)] += dout[static_cast<size_t>(s * C + c)];
      }
    }
    EXPECT_EQ(gx, want);
  }
}

// Batch normalisation: the float64 forward, and the backward by central differences of
// L = sum dout * out in float64 arithmetic on the same formula.
TEST_P(IndexedOps, BatchNormForwardAndBackward) {
  const int64_t N = 150, C = 5;  // three chunks of 64 rows
  const Vec x = randn(static_cast<size_t>(N * C), 12, 2.0f), w = randn(static_cast<size_t>(C), 13),
            b = randn(static_cast<size_t>(C), 14), dout = randn(static_cast<size_t>(N * C), 15);
  const float eps = 1e-5f;
  DeviceBuffer dx = f(x), dw = f(w), db = f(b), out(*be_, DType::kF32, N * C), mean(*be_, DType::kF32, C),
               rstd(*be_, DType::kF32, C);
  be_->batchnorm_forward_f32(out.data<float>(), mean.data<float>(), rstd.data<float>(), dx.data<float>(),
                             dw.data<float>(), db.data<float>(), N, C, eps);
  const auto loss64 = [&](const std::vector<double>& xs, int64_t c) {
    double m = 0.0, v = 0.0, l = 0.0;
    for (int64_t r = 0; r < N; ++r) m += xs[static_cast<size_t>(r * C + c)];
    m /= N;
    for (int64_t r = 0; r < N; ++r) v += (xs[static_cast<size_t>(r * C + c)] - m) * (xs[static_cast<size_t>(r * C + c)] - m);
    v /= N;
    for (int64_t r = 0; r < N; ++r) {
      l += dout[static_cast<size_t>(r * C + c)] * ((xs[static_cast<size_t>(r * C + c)] - m) / std::sqrt(v + eps) * w[c] + b[c]);
    }
    return l;
  };
  const Vec y = out.download<float>();
  std::vector<double> x64(x.begin(), x.end());
  for (int64_t c = 0; c < C; ++c) {
    double m = 0.0, v = 0.0;
    for (int64_t r = 0; r < N; ++r) m += x64[static_cast<size_t>(r * C + c)];
    m /= N;
    for (int64_t r = 0; r < N; ++r) v += (x64[static_cast<size_t>(r * C + c)] - m) * (x64[static_cast<size_t>(r * C + c)] - m);
    v /= N;
    for (int64_t r = 0; r < N; ++r) {
      const double want = (x64[static_cast<size_t>(r * C + c)] - m) / std::sqrt(v + eps) * w[c] + b[c];
      ASSERT_NEAR(y[static_cast<size_t>(r * C + c)], want, 1e-5 * (std::fabs(want) + 1.0));
    }
  }
  DeviceBuffer gx = f(Vec(static_cast<size_t>(N * C), 0.0f)), gw = f(Vec(static_cast<size_t>(C), 0.0f)),
               gb = f(Vec(static_cast<size_t>(C), 0.0f)), dd = f(dout);
  be_->batchnorm_backward_f32(gx.data<float>(), gw.data<float>(), gb.data<float>(), dd.data<float>(), dx.data<float>(),
                              dw.data<float>(), mean.data<float>(), rstd.data<float>(), N, C);
  const Vec ggx = gx.download<float>(), ggw = gw.download<float>(), ggb = gb.download<float>();
  for (int64_t k : {0L, 7L, 333L, 749L}) {
    const int64_t c = k % C;
    std::vector<double> p = x64, m = x64;
    const double h = 1e-4;
    p[static_cast<size_t>(k)] += h;
    m[static_cast<size_t>(k)] -= h;
    const double fd = (loss64(p, c) - loss64(m, c)) / (2 * h);
    EXPECT_NEAR(ggx[static_cast<size_t>(k)], fd, 1e-3 * (std::fabs(fd) + 0.1)) << k;
  }
  for (int64_t c = 0; c < C; ++c) {
    double sd = 0.0, sdx = 0.0;
    for (int64_t r = 0; r < N; ++r) {
      sd += dout[static_cast<size_t>(r * C + c)];
      sdx += dout[static_cast<size_t>(r * C + c)] * ((y[static_cast<size_t>(r * C + c)] - b[c]) / w[c]);
    }
    EXPECT_NEAR(ggb[static_cast<size_t>(c)], sd, 1e-4 * (std::fabs(sd) + 1.0));
    EXPECT_NEAR(ggw[static_cast<size_t>(c)], sdx, 1e-3 * (std::fabs(sdx) + 1.0));
  }
}

// PNA's std aggregator: the biased standard deviation per segment and column against float64
// (0 for an empty segment and where the variance is not above the floor: a one-row segment,
// constant columns); its backward by central differences of L = sum dout * std in float64.
TEST_P(IndexedOps, SegmentStdAndItsBackward) {
  const int64_t S = 12, rows = 70, C = 4;
  const Segments g = make_segments(S, rows, 41);
  Vec x = randn(static_cast<size_t>(rows * C), 42);
  for (int64_t r = 0; r < rows; ++r) x[static_cast<size_t>(r * C + 3)] = 0.25f;  // a constant column
  const Vec dout = randn(static_cast<size_t>(S * C), 43);
  const float floor = 1e-5f;
  const Vec mean = reduce(x, g, C, SegmentOp::kMean, true, nullptr);
  DeviceBuffer dx = f(x), dm = f(mean), off = i(g.offsets), perm = i(g.perm), out(*be_, DType::kF32, S * C);
  be_->segment_std_f32(out.data<float>(), dx.data<float>(), dm.data<float>(), perm.data<int32_t>(), off.data<int32_t>(),
                       S, C, floor);
  const Vec sd = out.download<float>();
  auto std64 = [&](const std::vector<double>& xs, int64_t s, int64_t c) {
    const int64_t k0 = g.offsets[static_cast<size_t>(s)], k1 = g.offsets[static_cast<size_t>(s + 1)];
    if (k1 == k0) return 0.0;
    double m = 0.0, v = 0.0;
    for (int64_t k = k0; k < k1; ++k) m += xs[static_cast<size_t>(g.perm[static_cast<size_t>(k)] * C + c)];
    m /= static_cast<double>(k1 - k0);
    for (int64_t k = k0; k < k1; ++k) {
      const double d = xs[static_cast<size_t>(g.perm[static_cast<size_t>(k)] * C + c)] - m;
      v += d * d;
    }
    v /= static_cast<double>(k1 - k0);
    return v > floor ? std::sqrt(v) : 0.0;
  };
  std::vector<double> x64(x.begin(), x.end());
  int nonzero = 0, zero = 0;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t c = 0; c < C; ++c) {
      const double want = std64(x64, s, c);
      ASSERT_NEAR(sd[static_cast<size_t>(s * C + c)], want, 1e-5 * (want + 1.0)) << s << " " << c;
      (want > 0.0 ? nonzero : zero) += 1;
    }
  }
  EXPECT_GT(nonzero, 0);
  EXPECT_GT(zero, S - 1);  // the constant column, and any empty or one-row segment
  DeviceBuffer gx = f(Vec(static_cast<size_t>(rows * C), 0.5f)), dd = f(dout);
  be_->segment_std_backward_f32(gx.data<float>(), dd.data<float>(), dx.data<float>(), dm.data<float>(),
                                out.data<float>(), perm.data<int32_t>(), off.data<int32_t>(), S, C);
  const Vec ggx = gx.download<float>();
  auto loss = [&](const std::vector<double>& xs) {
    double l = 0.0;
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t c = 0; c < C; ++c) l += dout[static_cast<size_t>(s * C + c)] * std64(xs, s, c);
    }
    return l;
  };
  for (int64_t k = 0; k < rows * C; ++k) {
    std::vector<double> p = x64, m = x64;
    const double h = 1e-6;
    p[static_cast<size_t>(k)] += h, m[static_cast<size_t>(k)] -= h;
    const double fd = (k % C == 3) ? 0.0 : (loss(p) - loss(m)) / (2 * h);
    ASSERT_NEAR(ggx[static_cast<size_t>(k)] - 0.5f, fd, 1e-3 * (std::fabs(fd) + 0.1)) << k;  // accumulated onto 0.5
  }
}

// Batch normalisation with given (running) statistics against its float64 formula, in place.
TEST_P(IndexedOps, BatchNormInferenceUsesTheGivenStatistics) {
  const int64_t N = 37, C = 6;
  const Vec x = randn(static_cast<size_t>(N * C), 51, 3.0f), mean = randn(static_cast<size_t>(C), 52),
            w = randn(static_cast<size_t>(C), 54), b = randn(static_cast<size_t>(C), 55);
  Vec var = randn(static_cast<size_t>(C), 53);
  for (float& v : var) v = v * v + 0.1f;
  DeviceBuffer dx = f(x), dm = f(mean), dv = f(var), dw = f(w), db = f(b);
  be_->batchnorm_inference_f32(dx.data<float>(), dx.data<float>(), dm.data<float>(), dv.data<float>(), dw.data<float>(),
                               db.data<float>(), N, C, 1e-5f);
  const Vec y = dx.download<float>();
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const double want = (static_cast<double>(x[static_cast<size_t>(r * C + c)]) - mean[c]) /
                              std::sqrt(static_cast<double>(var[c]) + 1e-5) * w[c] + b[c];
      ASSERT_NEAR(y[static_cast<size_t>(r * C + c)], want, 2e-6 * (std::fabs(want) + 1.0));
    }
  }
}

TEST_P(IndexedOps, ResultsDoNotDependOnTheThreadCount) {
  const int64_t S = 40, rows = 500, C = 8;
  const Segments g = make_segments(S, rows, 21);
  const Vec x = randn(static_cast<size_t>(rows * C), 22), w = randn(static_cast<size_t>(C), 23),
            b = randn(static_cast<size_t>(C), 24);
  const int before = omp_get_max_threads();
  std::vector<Vec> runs;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Vec all = reduce(x, g, C, SegmentOp::kMean, true, nullptr);
    DeviceBuffer dx = f(x), dw = f(w), db = f(b), out(*be_, DType::kF32, rows * C), mean(*be_, DType::kF32, C),
                 rstd(*be_, DType::kF32, C);
    be_->batchnorm_forward_f32(out.data<float>(), mean.data<float>(), rstd.data<float>(), dx.data<float>(),
                               dw.data<float>(), db.data<float>(), rows, C, 1e-5f);
    const Vec o = out.download<float>();
    all.insert(all.end(), o.begin(), o.end());
    runs.push_back(all);
  }
  omp_set_num_threads(before);
  EXPECT_EQ(runs[0], runs[1]);
}

// The pointwise ops: each activation against its float64 formula, its derivative against central
// differences of the float64 formula; products and row scaling exactly, writing and accumulating.
TEST_P(IndexedOps, PointwiseOpsMatchTheirFormulas) {
  const int64_t n = 301;
  Vec x = randn(static_cast<size_t>(n), 31);
  for (size_t k = 0; k < 8; ++k) x[k] = static_cast<float>(k) * 4.0f - 14.0f;  // tails, both signs
  x[8] = 0.0f;
  const Vec dout = randn(static_cast<size_t>(n), 32), base = randn(static_cast<size_t>(n), 33);
  auto value = [](double v, Activation a) {
    switch (a) {
      case Activation::kRelu: return v > 0 ? v : 0.0;
      case Activation::kSilu: return v / (1.0 + std::exp(-v));
      case Activation::kShiftedSoftplus: return std::log1p(std::exp(v)) - std::log(2.0);
    }
    return v;
  };
  for (Activation a : {Activation::kRelu, Activation::kSilu, Activation::kShiftedSoftplus}) {
    DeviceBuffer dx = f(x), out(*be_, DType::kF32, n), dd = f(dout), g = f(base);
    be_->activation_forward_f32(out.data<float>(), dx.data<float>(), n, a);
    be_->activation_backward_f32(g.data<float>(), dx.data<float>(), dd.data<float>(), n, a, true);
    const Vec y = out.download<float>(), grad = g.download<float>();
    for (int64_t k = 0; k < n; ++k) {
      const auto i = static_cast<size_t>(k);
      const double v = x[i], want = value(v, a);
      ASSERT_NEAR(y[i], want, 2e-7 * std::max(1.0, std::abs(want))) << static_cast<int>(a) << " at " << v;
      if (a == Activation::kRelu && v == 0.0) continue;  // not differentiable there
      const double h = 1e-4, deriv = (value(v + h, a) - value(v - h, a)) / (2 * h);
      ASSERT_NEAR(grad[i] - base[i], deriv * dout[i], 1e-5 * std::max(1.0, std::abs(deriv * dout[i])))
          << static_cast<int>(a) << " at " << v;
    }
    be_->activation_backward_f32(g.data<float>(), dx.data<float>(), dd.data<float>(), n, a, false);  // writes
    const Vec written = g.download<float>();
    for (size_t i = 0; i < written.size(); ++i) {  // the accumulation may fuse (one rounding)
      ASSERT_NEAR(written[i] + base[i], grad[i], 1e-6f * std::max(1.0f, std::abs(grad[i])));
    }
  }
  const int64_t N = 7, C = 43;  // n = N C
  DeviceBuffer da = f(x), db = f(dout), out = f(base), rows = f(Vec(x.begin(), x.begin() + N));
  be_->mul_f32(out.data<float>(), da.data<float>(), db.data<float>(), n, true);
  Vec got = out.download<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], base[i] + x[i] * dout[i], 1e-6f * std::max(1.0f, std::abs(got[i])));
  be_->mul_f32(out.data<float>(), da.data<float>(), db.data<float>(), n, false);
  got = out.download<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], x[i] * dout[i]);
  be_->scale_rows_f32(out.data<float>(), db.data<float>(), rows.data<float>(), N, C, false);
  got = out.download<float>();
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t c = 0; c < C; ++c) {
      const auto i = static_cast<size_t>(r * C + c);
      ASSERT_EQ(got[i], dout[i] * x[static_cast<size_t>(r)]);
    }
  }
  be_->scale_rows_f32(out.data<float>(), db.data<float>(), rows.data<float>(), N, C, true);
  const Vec twice = out.download<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(twice[i], got[i] + got[i], 1e-6f * std::max(1.0f, std::abs(twice[i])));
}

// The activations run on SIMD blocks (cpu/activation_simd.h): an element's value does not depend
// on where it lies in the array (a whole block or the padded last one) nor on the thread count.
TEST_P(IndexedOps, ActivationsAreBitwiseWhateverTheirPlaceAndThreads) {
  const int64_t n = 40000, shift = 7;  // threaded (> 16384); the shifted copy moves every block edge
  Vec x = randn(static_cast<size_t>(n), 41);
  for (float& v : x) v *= 6.0f;
  const Vec dout = randn(static_cast<size_t>(n), 42);
  const int before = omp_get_max_threads();
  for (Activation a : {Activation::kSilu, Activation::kShiftedSoftplus}) {
    std::vector<Vec> fwd, bwd;
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (int64_t off : {int64_t{0}, shift}) {
        const Vec xs(x.begin() + off, x.end()), ds(dout.begin() + off, dout.end());
        const int64_t m = n - off;
        DeviceBuffer dx = f(xs), dd = f(ds), out(*be_, DType::kF32, m), g(*be_, DType::kF32, m);
        be_->activation_forward_f32(out.data<float>(), dx.data<float>(), m, a);
        be_->activation_backward_f32(g.data<float>(), dx.data<float>(), dd.data<float>(), m, a, false);
        Vec y = out.download<float>(), gr = g.download<float>();
        if (off == 0) y.erase(y.begin(), y.begin() + shift), gr.erase(gr.begin(), gr.begin() + shift);
        fwd.push_back(y);
        bwd.push_back(gr);
      }
    }
    for (size_t r = 1; r < fwd.size(); ++r) {
      EXPECT_EQ(fwd[r], fwd[0]) << static_cast<int>(a) << " run " << r;
      EXPECT_EQ(bwd[r], bwd[0]) << static_cast<int>(a) << " run " << r;
    }
  }
  omp_set_num_threads(before);
}

INSTANTIATE_TEST_SUITE_P(Backends, IndexedOps, ::testing::Values("cpu", "cpu-guarded"),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace weft
