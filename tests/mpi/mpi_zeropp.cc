// qgZ's quantized reduce-scatter (parallel/dp/qgz.h) on real ranks, against the plain
// reduce-scatter of the same gradients: every level split the world size allows (flat, 2 and 3
// levels), int4 and int8, uneven chunks (a range that starts and ends inside shards), and error
// feedback. Run under mpirun with 2, 3, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <vector>

#include "backend/registry.h"
#include "backend/device_buffer.h"
#include "comm/device_comm.h"
#include "core/block_quant.h"
#include "mpi_test_util.h"
#include "parallel/dp/qgz.h"

namespace weft {
namespace {

// Rank r's local gradient at flat element i: smooth plus a rank-dependent ripple, in [-1, 1].
float grad_value(int r, int64_t i, int step = 0) {
  return static_cast<float>(0.6 * std::sin(0.37 * static_cast<double>(i) + 0.5 * r + 0.1 * step) +
                            0.4 * std::cos(0.011 * static_cast<double>(i * (r + 1))));
}

// The level lists to try on P ranks.
std::vector<std::vector<int>> level_lists(int P) {
  std::vector<std::vector<int>> out = {{}};
  if (P % 2 == 0 && P > 2) out.push_back({2});
  if (P % 4 == 0 && P > 4) out.push_back({2, 4});
  if (P % 4 == 0 && P > 4) out.push_back({4});
  return out;
}

struct Case {
  int64_t n, b, e;  // flat size, reduced range
};

// Runs qgZ and the plain reduce-scatter over [b, e) and checks this rank's part element by
// element against the bound: each hop k quantizes values of at most (ranks summed so far) x
// max|x| with per-element error absmax / qmax / 2, and the hop's n_k summands each carry it.
void check_case(const Case& c, const std::vector<int>& levels, int bits, int64_t block) {
  auto world = test::fresh_world("dp");
  std::unique_ptr<Backend> bep = make_backend("cpu");  // device memory is host memory
  Backend& be = *bep;
  DeviceCommunicator dp(*world, be);
  const int P = dp.size(), me = dp.rank();
  const int64_t shard = (c.n + P - 1) / P;
  ZeroPPConfig z;
  z.quantized_gradients = true;
  z.levels = levels;
  for (size_t i = 0; i < levels.size(); ++i) z.level_names.push_back(fmt::format("l{}", levels[i]));
  z.gradients = QuantSpec{bits, block};
  QuantizedReduceScatter qgz(dp, z, be, c.n, shard, {{c.b, c.e}});
  const int64_t len = c.e - c.b;
  std::vector<float> g(static_cast<size_t>(len));
  for (int64_t i = 0; i < len; ++i) g[static_cast<size_t>(i)] = grad_value(me, c.b + i);
  const int64_t ob = std::clamp(me * shard, c.b, c.e), oe = std::clamp((me + 1) * shard, c.b, c.e);
  const int64_t mine = std::max<int64_t>(0, oe - ob);
  std::vector<float> out(static_cast<size_t>(std::max<int64_t>(1, mine)), 0.0f);
  qgz.reduce_add(g.data(), c.b, c.e, out.data());
  // The plain reduce-scatter of the same gradients.
  std::vector<int64_t> counts(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) {
    counts[static_cast<size_t>(q)] =
        std::max<int64_t>(0, std::clamp((q + 1) * shard, c.b, c.e) - std::clamp(q * shard, c.b, c.e));
  }
  std::vector<float> ref(static_cast<size_t>(std::max<int64_t>(1, mine)), 0.0f);
  dp.reduce_scatter_v(g.data(), ref.data(), counts, CommDType::kF32, ReduceOp::kSum);
  // The bound: hop k carries n_k summands, each a sum over the ranks reduced before it.
  std::vector<int> l = levels;
  l.push_back(P);
  // After hop k each summand is a sum over `before` ranks (|x| <= 1 each) carrying the error
  // bound of the hops before; quantizing it adds at most its absmax / qmax / 2.
  double bound = 0.0;
  int before = 1;
  for (size_t k = 0; k < l.size(); ++k) {
    const int nk = l[k] / before;
    bound = nk * bound + nk * (before + bound) / quant_qmax(bits) / 2.0;
    before = l[k];
  }
  double err2 = 0.0, ref2 = 0.0;
  for (int64_t i = 0; i < mine; ++i) {
    const double d = out[static_cast<size_t>(i)] - ref[static_cast<size_t>(i)];
    ASSERT_LE(std::fabs(d), bound * (1 + 1e-5)) << "element " << ob + i << " of rank " << me;
    err2 += d * d;
    ref2 += static_cast<double>(ref[static_cast<size_t>(i)]) * ref[static_cast<size_t>(i)];
  }
  // Far below the bound on average: int4 blocks of smooth data stay within ~20% RMS, int8 ~2%.
  if (ref2 > 0) {
    EXPECT_LT(std::sqrt(err2 / ref2), bits == 4 ? 0.35 : 0.03) << "relative RMS error";
  }
}

TEST(MpiQgz, MatchesThePlainReduceScatterWithinTheQuantizerBound) {
  const int P = test::mpi_world().size();
  for (const auto& levels : level_lists(P)) {
    for (int bits : {4, 8}) {
      SCOPED_TRACE(::testing::Message() << "P " << P << " levels " << ::testing::PrintToString(levels) << " int" << bits);
      check_case({1000, 0, 1000}, levels, bits, 64);
      check_case({1000, 137, 811}, levels, bits, 50);  // starts and ends inside shards, partial blocks
      check_case({7, 0, 7}, levels, bits, 4);          // fewer elements than ranks on 8
    }
  }
}

TEST(MpiQgz, ErrorFeedbackCancelsTheBiasOverSteps) {
  // The same gradient reduced 40 times over one level: without error feedback the same
  // rounding error repeats every step; with it the residual carries it into the next step, so
  // the mean of the results converges to the exact sum.
  auto world = test::fresh_world("dp");
  std::unique_ptr<Backend> bep = make_backend("cpu");
  Backend& be = *bep;
  DeviceCommunicator dp(*world, be);
  const int P = dp.size(), me = dp.rank();
  const int64_t n = 512, shard = (n + P - 1) / P;
  std::vector<float> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] = grad_value(me, i);
  const int64_t mine = std::max<int64_t>(0, std::min(n, (me + 1) * shard) - me * shard);
  std::vector<float> exact(static_cast<size_t>(std::max<int64_t>(1, mine)));
  std::vector<int64_t> counts(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) counts[static_cast<size_t>(q)] = std::max<int64_t>(0, std::min(n, (q + 1) * shard) - q * shard);
  dp.reduce_scatter_v(g.data(), exact.data(), counts, CommDType::kF32, ReduceOp::kSum);
  double mean_err[2] = {0, 0};
  for (int ef = 0; ef < 2; ++ef) {
    ZeroPPConfig z;
    z.quantized_gradients = true;
    z.error_feedback = ef == 1;
    z.gradients = QuantSpec{4, 128};
    QuantizedReduceScatter qgz(dp, z, be, n, shard, {{0, n}});
    ASSERT_EQ(qgz.residual() != nullptr, ef == 1);
    const int steps = 40;
    std::vector<float> sum(static_cast<size_t>(std::max<int64_t>(1, mine)), 0.0f);
    for (int t = 0; t < steps; ++t) qgz.reduce_add(g.data(), 0, n, sum.data());
    double e2 = 0, r2 = 0;
    for (int64_t i = 0; i < mine; ++i) {
      const double d = sum[static_cast<size_t>(i)] / steps - exact[static_cast<size_t>(i)];
      e2 += d * d;
      r2 += static_cast<double>(exact[static_cast<size_t>(i)]) * exact[static_cast<size_t>(i)];
    }
    mean_err[ef] = r2 > 0 ? std::sqrt(e2 / r2) : 0.0;
  }
  if (mine > 0) {
    EXPECT_GT(mean_err[0], 0.01) << "int4 without error feedback should be visibly off";
    EXPECT_LT(mean_err[1], mean_err[0] / 5) << "error feedback: " << mean_err[1] << " vs " << mean_err[0];
  }
}

}  // namespace
}  // namespace weft
