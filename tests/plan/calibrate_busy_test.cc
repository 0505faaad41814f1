// weft calibrate on a busy machine (issue 35, item 1): a competing process that keeps a core busy
// while it measures is detected (the other processes' CPU time, the samples' spread) and named in
// a warning, and the figures, the best of many short samples, stay close to a quiet machine's
// (and the step time each file predicts for README's default job is printed).
// Registered apart from the other tests (tests/CMakeLists.txt: RUN_SERIAL, calibrate_busy), since
// the "quiet" calibration needs no other test beside it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "comm/self_comm.h"
#include "model/config.h"
#include "plan/calibrate.h"
#include "plan/predict.h"

namespace weft {
namespace {

TEST(CalibrateBusy, ACompetingProcessIsDetectedAndTheFiguresHold) {
  auto self = make_self_communicator();
  plan::CalibrationOptions o;
  o.quick = true;
  o.threads = 2;
  plan::calibrate(o, *self);  // warms the libraries (oneDNN's JIT kernels, pages) and the CPU's clock
  const plan::Calibration quiet = plan::calibrate(o, *self);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the competitor: one core kept busy until killed
    volatile uint64_t x = 0;
    for (;;) x = x + 1;
  }
  const plan::Calibration busy = plan::calibrate(o, *self);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // A quiet calibration after as well: this VM's own speed drifts by up to 30% within minutes
  // (docs/planner.md), so the busy figures are compared with the quiet ones on either side.
  const plan::Calibration after = plan::calibrate(o, *self);
  std::printf("quiet: other load %.2f, spread %.2f, %.2f GFLOP/s, %.2f GB/s, fork/join %.2f us\n", quiet.other_load,
              quiet.spread, quiet.system.device.peak_flops_32 / 1e9, quiet.system.device.memory_bandwidth / 1e9,
              quiet.system.device.kernel_latency * 1e6);
  std::printf("busy:  other load %.2f, spread %.2f, %.2f GFLOP/s, %.2f GB/s, fork/join %.2f us\n", busy.other_load,
              busy.spread, busy.system.device.peak_flops_32 / 1e9, busy.system.device.memory_bandwidth / 1e9,
              busy.system.device.kernel_latency * 1e6);
  EXPECT_GT(busy.other_load, 0.5) << "a process spinning on one core was not seen";
  EXPECT_GT(busy.other_load, quiet.other_load);
  EXPECT_NE(busy.warning.find("the machine was busy while calibrating"), std::string::npos) << busy.warning;
  EXPECT_GT(busy.system.machine.other_load, 0.5);
  const plan::Device &q = quiet.system.device, &q2 = after.system.device, &b = busy.system.device;
  std::printf("after: other load %.2f, spread %.2f, %.2f GFLOP/s, %.2f GB/s, fork/join %.2f us\n", after.other_load,
              after.spread, q2.peak_flops_32 / 1e9, q2.memory_bandwidth / 1e9, q2.kernel_latency * 1e6);
  // Within 30% of the quiet calibration before or of the one after.
  const auto near_either = [](double v, double a, double c) {
    return std::abs(v - a) <= 0.3 * a || std::abs(v - c) <= 0.3 * c;
  };
  EXPECT_TRUE(near_either(b.peak_flops_32, q.peak_flops_32, q2.peak_flops_32))
      << b.peak_flops_32 << " against " << q.peak_flops_32 << " and " << q2.peak_flops_32;
  EXPECT_TRUE(near_either(b.memory_bandwidth, q.memory_bandwidth, q2.memory_bandwidth))
      << b.memory_bandwidth << " against " << q.memory_bandwidth << " and " << q2.memory_bandwidth;
  EXPECT_LT(b.kernel_latency, 3.0 * std::max(q.kernel_latency, q2.kernel_latency) + 2e-6);
  // What a few samples a point cannot measure on a busy machine is not kept: the products by
  // shape and the optimizer's curve (the planner falls back to the square curve and traffic).
  EXPECT_FALSE(q.gemm_table.empty());
  EXPECT_TRUE(b.gemm_table.empty());
  EXPECT_TRUE(b.adamw_curve.empty());
  // The step time the busy file predicts for README's default job (configs/tiny.toml: the tiny
  // preset, sequence 256, one micro-batch of 8, fp32, one rank) beside what the quiet files
  // predict: printed, not asserted. Issue 35 item 1 asks for 15% against a measured run; the busy
  // file drops the products by shape and prices from the square curve, whose largest squares run
  // below the GPT head's narrow products (docs/planner.md, "Stop 62"), and this VM's speed moves
  // by more than that between calibrations minutes apart.
  const plan::ModelShape tiny = plan::ModelShape::from_config(model_preset("tiny"), 256);
  plan::Layout l;
  l.tp = l.pp = l.dp = 1;
  l.micro_batch = 8;
  const auto step = [&](const plan::System& s) {
    return plan::predict(tiny, s, l, plan::Options::from_system(s, plan::Precision::kFp32, 8)).step_time_s;
  };
  const double tq = step(quiet.system), tb = step(busy.system), ta = step(after.system);
  EXPECT_GT(tb, 0.0);
  std::printf("README's default job predicted: quiet %.1f ms, busy %.1f ms (%+.1f%%), after %.1f ms (%+.1f%%)\n", tq * 1e3,
              tb * 1e3, 100 * (tb / tq - 1), ta * 1e3, 100 * (tb / ta - 1));
}

}  // namespace
}  // namespace weft
