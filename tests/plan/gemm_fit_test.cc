// Fitting a GPU's per-shape product model to a measured GEMM sweep (plan/gemm_fit.h): the fit
// recovers known constants from synthetic timings, the sweep reader refuses bad files naming
// the line, and `weft calibrate --gemm-sweep` writes a loadable system file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "plan/gemm_fit.h"
#include "test_util.h"

namespace weft::plan {
namespace {

Device h100_like(double eff, double k0) {
  Device d = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml").device;
  d.matmul_efficiency = eff;
  d.gemm_k_overhead = k0;
  return d;
}

// Timings the model itself predicts for (eff, k0), with a deterministic +-2% scatter.
std::vector<GemmSample> synthetic(const Device& truth) {
  std::vector<GemmSample> out;
  int i = 0;
  for (const GemmShape& g : gemm_sweep_shapes()) {
    const double noise = 1.0 + 0.02 * ((i++ % 5) - 2) / 2.0;
    out.push_back({g, Precision::kBf16, gemm_time(truth, Precision::kBf16, g, 2) * noise});
  }
  return out;
}

TEST(GemmFit, RecoversKnownConstants) {
  const Device truth = h100_like(0.78, 96);
  Device start = truth;
  start.matmul_efficiency = 0.5;
  start.gemm_k_overhead = 0;
  const GemmFit fit = fit_gemm_model(start, synthetic(truth));
  EXPECT_NEAR(fit.device.matmul_efficiency, 0.78, 0.02);
  EXPECT_NEAR(fit.device.gemm_k_overhead, 96, 24);
  EXPECT_LT(fit.mean_abs_error, 0.02);
  EXPECT_LT(fit.worst_abs_error, 0.03);
  EXPECT_EQ(fit.errors.size(), gemm_sweep_shapes().size());
  // A device without compute units has no per-shape model to fit.
  Device cpu = truth;
  cpu.compute_units = 0;
  EXPECT_THROW(fit_gemm_model(cpu, synthetic(truth)), InputError);
  EXPECT_THROW(fit_gemm_model(truth, {}), InputError);
}

TEST(GemmFit, SweepShapesCoverWavesSmallKAndThinProducts) {
  const auto shapes = gemm_sweep_shapes();
  EXPECT_GT(shapes.size(), 40u);
  bool small_k = false, thin = false, square = false;
  for (const GemmShape& g : shapes) {
    small_k |= g.k <= 128;
    thin |= g.m <= 16;
    square |= g.m == 16384 && g.n == 16384 && g.k == 16384;
  }
  EXPECT_TRUE(small_k && thin && square);
}

class GemmSweepFile : public ::testing::Test {
 protected:
  void SetUp() override { tmp = std::make_unique<test::TempDir>("gemm-fit"); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = *tmp / name;
    std::ofstream(p) << text;
    return p;
  }
  void refused(const std::string& text, const std::string& fragment) {
    const std::string p = write("bad.csv", text);
    try {
      read_gemm_sweep(p);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
  std::unique_ptr<test::TempDir> tmp;
};

TEST_F(GemmSweepFile, RoundTripAndBadInput) {
  GemmSweep s;
  s.device = "NVIDIA H100 80GB HBM3";
  s.date = "2026-11-24";
  s.samples = synthetic(h100_like(0.8, 64));
  const GemmSweep r = read_gemm_sweep(write("s.csv", gemm_sweep_csv(s)));
  EXPECT_EQ(r.device, s.device);
  EXPECT_EQ(r.date, s.date);
  ASSERT_EQ(r.samples.size(), s.samples.size());
  EXPECT_EQ(r.samples[3].shape.n, s.samples[3].shape.n);
  EXPECT_NEAR(r.samples[3].seconds / s.samples[3].seconds, 1.0, 1e-8);
  const std::string head = "m,n,k,batch,dtype,seconds\n";
  refused("m,n,k,dtype,seconds\n1,2,3,bf16,1e-3\n", ":1: expected the header");
  refused(head + "128,128,128,1,bf16\n", ":2: expected 6 columns");
  refused(head + "128,128,128,1,bf16,-1e-3\n", ":2: column 'seconds' = '-1e-3'");
  refused(head + "128,12x8,128,1,bf16,1e-3\n", ":2: column 'n' = '12x8'");
  refused(head + "128,128,128.5,1,bf16,1e-3\n", ":2: column 'k' = '128.5'");
  refused(head + "128,128,128,1,int8,1e-3\n", ":2: column 'dtype' = 'int8'");
  refused(head, "has no samples");
  EXPECT_THROW(read_gemm_sweep(*tmp / "missing.csv"), InputError);
}

TEST_F(GemmSweepFile, CalibrateWritesTheFittedSystem) {
  GemmSweep s;
  s.device = "test card";
  s.date = "2026-11-24";
  s.samples = synthetic(h100_like(0.74, 128));
  const std::string sweep = write("sweep.csv", gemm_sweep_csv(s));
  const std::string out = *tmp / "fitted.toml";
  const std::string base = std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml";
  const test::RunResult r =
      test::run_weft(fmt::format("calibrate --gemm-sweep {} --system {} --out {}", sweep, base, out), *tmp / "cmd");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fitted matmul_efficiency"), std::string::npos) << r.out;
  const System sys = load_system(out);
  EXPECT_NEAR(sys.device.matmul_efficiency, 0.74, 0.02);
  EXPECT_NEAR(sys.device.gemm_k_overhead, 128, 24);
  EXPECT_EQ(sys.device.compute_units, 132);
  // Refused with exit 2 and nothing written: no base system, a missing base, a bad sweep.
  const std::string out2 = *tmp / "not-written.toml";
  for (const std::string& args : {fmt::format("calibrate --gemm-sweep {} --out {}", sweep, out2),
                                  fmt::format("calibrate --gemm-sweep {} --system /nonexistent.toml --out {}", sweep, out2),
                                  fmt::format("calibrate --gemm-sweep {} --system {} --out {}", *tmp / "none.csv", base, out2)}) {
    const test::RunResult bad = test::run_weft(args, *tmp / "cmd-bad");
    EXPECT_EQ(bad.code, 2) << args << ": " << bad.err;
    EXPECT_FALSE(std::filesystem::exists(out2)) << args;
  }
}

}  // namespace
}  // namespace weft::plan
