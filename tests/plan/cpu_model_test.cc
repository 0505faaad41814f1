// The planner's CPU inputs measured by `weft calibrate` (issue 35 item 3): products by shape and
// layout (plan/gemm_table.h), memory-bound kernels by size, the optimizer's curve, the
// collectives' measured efficiency and the share of a dp collective compute hides.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "model/config.h"
#include "plan/gemm_table.h"
#include "plan/kernel_model.h"
#include "plan/plan_test_util.h"
#include "plan/predict.h"
#include "test_util.h"

namespace weft::plan {
namespace {

using plan_test::one_level;
using test::TempDir;

// A 2 x 2 x 2 grid whose rate is m n k-dependent in a known way: rate = 1e9 m (per layout a
// factor), so that log-linear interpolation in m is exact and n, k are flat.
GemmTable two_by_two() {
  GemmTable t;
  t.m = {16, 256};
  t.n = {64, 1024};
  t.k = {64, 1024};
  for (size_t tr = 0; tr < 3; ++tr) {
    for (double m : t.m) {
      for (size_t j = 0; j < 2; ++j) {
        for (size_t l = 0; l < 2; ++l) t.rates[tr].push_back(1e9 * m * (1.0 + static_cast<double>(tr)));
      }
    }
  }
  return t;
}

TEST(CpuModel, GemmTableInterpolatesInLogSpaceAndClamps) {
  const GemmTable t = two_by_two();
  EXPECT_DOUBLE_EQ(t.rate(GemmTrans::kNN, 16, 64, 64), 16e9);
  EXPECT_DOUBLE_EQ(t.rate(GemmTrans::kNN, 256, 1024, 1024), 256e9);
  // Geometric mean of 16 and 256 is 64: halfway in log m.
  EXPECT_NEAR(t.rate(GemmTrans::kNN, 64, 300, 200), 64e9, 1e-3 * 64e9);
  // Outside the grid: the edge's rate.
  EXPECT_NEAR(t.rate(GemmTrans::kNN, 4, 64, 64), 16e9, 1e-6 * 16e9);
  EXPECT_NEAR(t.rate(GemmTrans::kNN, 65536, 1e6, 8), 256e9, 1e-6 * 256e9);
  // Each layout has its own rates; an unmeasured layout takes nn's.
  EXPECT_NEAR(t.rate(GemmTrans::kNT, 16, 64, 64), 32e9, 1e-6 * 32e9);
  EXPECT_NEAR(t.rate(GemmTrans::kTN, 16, 64, 64), 48e9, 1e-6 * 48e9);
  GemmTable only_nn = t;
  only_nn.rates[1].clear();
  only_nn.rates[2].clear();
  EXPECT_NEAR(only_nn.rate(GemmTrans::kTN, 16, 64, 64), 16e9, 1e-6 * 16e9);
}

TEST(CpuModel, GemmTableRejectsBadGrids) {
  GemmTable t = two_by_two();
  t.rates[1].pop_back();
  EXPECT_THROW(t.validate("here"), InputError);
  t = two_by_two();
  t.m = {256, 16};
  EXPECT_THROW(t.validate("here"), InputError);
  t = two_by_two();
  t.rates[0][3] = -1;
  EXPECT_THROW(t.validate("here"), InputError);
}

// A device with a table prices a product by its shape and layout at the table's own rate (the
// fp32 peak only turns the rate into a fraction: a 16-bit product on a native bf16 CPU takes the
// fp32 table's shape at the 16-bit peak); without a table, by the square curve.
TEST(CpuModel, ProductsArePricedFromTheTableByLayout) {
  System s = one_level(1e10, 1e-6);
  s.device.gemm_table = two_by_two();
  s.device.kernel_latency = 0;
  s.device.memory_bandwidth = 1e15;  // compute-bound here
  const GemmShape nn{16, 64, 64, 1, GemmTrans::kNN}, nt{16, 64, 64, 1, GemmTrans::kNT};
  const GemmShape tn{256, 1024, 1024, 1, GemmTrans::kTN};
  EXPECT_NEAR(gemm_time(s.device, Precision::kFp32, nn, 4), nn.flops() / 16e9, 1e-12);
  EXPECT_NEAR(gemm_time(s.device, Precision::kFp32, nt, 4), nt.flops() / 32e9, 1e-12);
  EXPECT_NEAR(gemm_time(s.device, Precision::kFp32, tn, 4), tn.flops() / (3 * 256e9), 1e-12);
  // The square products' peak does not move a table's rates (a file whose table was measured
  // keeps them, whatever the squares measured) ...
  s.device.peak_flops_32 = 5e12;
  EXPECT_NEAR(gemm_time(s.device, Precision::kFp32, nn, 4), nn.flops() / 16e9, 1e-12);
  // ... and a 16-bit peak twice the fp32 one halves a product's time (the table's shape).
  s.device.peak_flops_16 = 1e13;
  EXPECT_NEAR(gemm_time(s.device, Precision::kBf16, nn, 2), nn.flops() / 32e9, 1e-12);
  // Without the table: the square curve at the product's FLOPs.
  s.device.gemm_table = {};
  s.device.matmul_curve = {{1e3, 0.25}, {1e12, 0.25}};
  EXPECT_NEAR(gemm_time(s.device, Precision::kFp32, nn, 4), nn.flops() / (5e12 * 0.25), 1e-12);
}

TEST(CpuModel, MemoryCurveSetsTheBandwidthBySize) {
  Device d;
  d.memory_bandwidth = 10e9;
  EXPECT_DOUBLE_EQ(memory_bandwidth_at(d, 1e6), 10e9);  // no curve
  d.memory_curve = {{1e5, 100e9}, {1e7, 40e9}, {1e9, 20e9}};
  EXPECT_DOUBLE_EQ(memory_bandwidth_at(d, 1e3), 100e9);
  EXPECT_DOUBLE_EQ(memory_bandwidth_at(d, 1e10), 20e9);
  EXPECT_NEAR(memory_bandwidth_at(d, 1e6), std::sqrt(100e9 * 40e9), 1e-6 * 63e9);
  d.kernel_latency = 0;
  EXPECT_NEAR(memory_time(d, 1e7), 1e7 / 40e9, 1e-15);
  // memory_efficiency: the share of that bandwidth a stack's memory-bound kernels reach.
  d.memory_efficiency = 0.5;
  EXPECT_NEAR(memory_time(d, 1e7), 2 * 1e7 / 40e9, 1e-15);
}

// memory_efficiency round-trips, defaults to 1 (not written then) and is refused outside (0, 1].
TEST(CpuModel, MemoryEfficiencyIsASystemKey) {
  System s = one_level(1e10, 1e-6);
  EXPECT_EQ(system_to_toml(s).find("memory_efficiency"), std::string::npos);
  s.device.memory_efficiency = 0.34;
  s.validate();
  TempDir tmp("plan");
  std::ofstream(tmp / "m.toml") << system_to_toml(s);
  EXPECT_NEAR(load_system(tmp / "m.toml").device.memory_efficiency, 0.34, 1e-6);
  s.device.memory_efficiency = 1.5;
  try {
    s.validate();
    FAIL() << "memory_efficiency 1.5 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("memory_efficiency must be in (0, 1], got 1.5"), std::string::npos) << e.what();
  }
}

TEST(CpuModel, CollectiveEfficiencyScalesTheBandwidthTerm) {
  System s = one_level(10e9, 0);
  const double full = collective_cost(s, Collective::kAllReduce, 2, 1, 1e9).bandwidth_s;
  s.levels[0].collective_efficiency["all_reduce"] = 0.25;
  EXPECT_NEAR(collective_cost(s, Collective::kAllReduce, 2, 1, 1e9).bandwidth_s, 4 * full, 1e-9 * full);
  // Other kinds keep the level's bandwidth.
  const double ag = collective_cost(s, Collective::kAllGather, 2, 1, 1e9).bandwidth_s;
  EXPECT_NEAR(ag, 1e9 / 2 / 10e9, 1e-12);
  s.levels[0].collective_efficiency["broadcast"] = 0.5;
  EXPECT_THROW(s.validate(), InputError);
}

// comm_overlap < 1 keeps that share of the dp all-reduce on the step even where the backward
// would hide it; ZeRO 2/3's local buffers are priced at dp 1 too.
TEST(CpuModel, CommOverlapAndZeroBuffers) {
  System s = one_level(1e9, 1e-6);
  s.device.memory_curve = {{1e5, 100e9}, {1e9, 20e9}};
  const ModelShape m = ModelShape::from_config(model_preset("tiny"), 64);
  Options o = Options::from_system(s, Precision::kFp32, 8);
  Layout l = plan_test::grid(1, 1, 2);
  l.micro_batch = 4;
  s.defaults.comm_overlap = 1.0;
  const Prediction hidden = predict(m, s, l, o);
  s.defaults.comm_overlap = 0.0;
  const Prediction exposed = predict(m, s, l, o);
  EXPECT_GT(exposed.time.dp_exposed, hidden.time.dp_exposed);
  const double ar = collective_time(s, Collective::kAllReduce, 2, 1, 4.0 * stage_params_per_rank(m, l, 0));
  EXPECT_NEAR(exposed.time.dp_exposed, ar, 1e-6 * ar);
  Layout z = plan_test::grid(1, 1, 1);
  z.micro_batch = 1;
  const Prediction z0 = predict(m, s, z, o);
  z.zero = 2;
  const Prediction z2 = predict(m, s, z, o);
  z.zero = 3;
  const Prediction z3 = predict(m, s, z, o);
  EXPECT_DOUBLE_EQ(z0.time.dp_exposed, 0.0);
  EXPECT_GT(z2.time.dp_exposed, 0.0);
  EXPECT_GT(z3.time.dp_exposed, z2.time.dp_exposed);
}

TEST(CpuModel, NewSystemKeysRoundTrip) {
  System s = one_level(1e10, 1e-6);
  s.device.gemm_table = two_by_two();
  s.device.memory_curve = {{1e5, 100e9}, {1e9, 20e9}};
  s.device.adamw_curve = {{65536, 4e-10}, {3.3e7, 1e-9}};
  s.device.norm_param_seconds = 1e-9;
  s.levels[0].collective_efficiency = {{"all_reduce", 0.21}, {"reduce_scatter", 0.17}};
  s.defaults.comm_overlap = 0.35;
  s.defaults.sync_jitter = {{4.4e-4, 0.146}, {5.06e-2, 0.099}};
  s.validate();
  TempDir tmp("plan");
  std::ofstream(tmp / "cpu.toml") << system_to_toml(s);
  const System b = load_system(tmp / "cpu.toml");
  ASSERT_EQ(b.device.gemm_table.rates[2].size(), 8u);
  EXPECT_NEAR(b.device.gemm_table.rate(GemmTrans::kTN, 64, 100, 100), s.device.gemm_table.rate(GemmTrans::kTN, 64, 100, 100),
              1e-5 * 1e11);
  ASSERT_EQ(b.device.memory_curve.size(), 2u);
  EXPECT_NEAR(b.device.memory_curve[1].second, 20e9, 1e3);
  ASSERT_EQ(b.device.adamw_curve.size(), 2u);
  EXPECT_NEAR(b.device.norm_param_seconds, 1e-9, 1e-14);
  EXPECT_NEAR(b.levels[0].collective_efficiency.at("all_reduce"), 0.21, 1e-4);
  EXPECT_NEAR(b.defaults.comm_overlap, 0.35, 1e-4);
  ASSERT_EQ(b.defaults.sync_jitter.size(), 2u);
  EXPECT_NEAR(b.defaults.sync_jitter[1].first, 5.06e-2, 1e-8);
  EXPECT_NEAR(b.defaults.sync_jitter[0].second, 0.146, 1e-8);
  // A grid without rates, or a rate list of the wrong length, is refused with the key's name.
  std::ofstream(tmp / "bad.toml") << system_to_toml(s) << "";
  std::string text = system_to_toml(s);
  const size_t at = text.find("gemm_rates_nt = [");
  text.insert(at + 17, "1, ");
  std::ofstream(tmp / "bad.toml") << text;
  try {
    load_system(tmp / "bad.toml");
    FAIL() << "a gemm_rates_nt of 9 values for a 2 x 2 x 2 grid was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gemm_rates_nt has 9 values"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft::plan
