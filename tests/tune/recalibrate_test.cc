// --recalibrate's fit (tune/recalibrate.h) on closed-form "measurements": step times the
// planner itself predicts on a system whose device is 2.5x slower, whose links are 3x faster
// and which pays 4 ms more per step. The fit finds those factors back and the error vanishes;
// with measurements the planner already predicts, nothing changes.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "model/config.h"
#include "plan/search.h"
#include "tune/recalibrate.h"

namespace weft::tune {
namespace {

struct Case {
  plan::System sys;
  plan::ModelShape m;
  plan::Options o;
  std::vector<plan::Layout> layouts;
};

Case make_case() {
  Case c;
  c.sys = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb.toml");
  c.m = plan::ModelShape::from_config(model_preset("gpt2-350m"), 1024);
  c.o = plan::Options::from_system(c.sys, Precision::kBf16, 64);
  plan::Pins pins;
  pins.zeropp = plan::ZeroPP::kNone;
  pins.compression = plan::NamedPolicy{};
  pins.recompute_layers = -1;
  const std::vector<plan::Layout> all = plan::valid_layouts(c.m, 16, c.o, pins);
  // A spread of layouts: compute-heavy and communication-heavy ones.
  for (size_t i = 0; i < all.size() && c.layouts.size() < 24; i += std::max<size_t>(1, all.size() / 24)) {
    c.layouts.push_back(all[i]);
  }
  return c;
}

TEST(Recalibrate, FindsTheScalesThatMadeTheMeasurements) {
  const Case c = make_case();
  ASSERT_GE(c.layouts.size(), 8u);
  plan::System truth = scaled_system(c.sys, 1 / 2.5, 3.0);
  truth.defaults.step_overhead += 4e-3;
  std::vector<double> measured;
  for (const plan::Layout& l : c.layouts) measured.push_back(plan::predict(c.m, truth, l, c.o).step_time_s);
  const Recalibration r = recalibrate(c.sys, c.m, c.o, c.layouts, measured);
  EXPECT_GT(r.error_before, 0.3) << "the uncorrected planner should be far off";
  EXPECT_LT(r.error_after, 0.005);  // the grid refines to 1/256 of an octave: 0.3% in a factor
  EXPECT_NEAR(r.device_scale, 1 / 2.5, 0.01) << "link scale " << r.link_scale;
  EXPECT_NEAR(r.added_overhead_s, 4e-3, 1e-3);
  // The corrected system predicts the measurements it was fitted on.
  for (size_t i = 0; i < c.layouts.size(); ++i) {
    EXPECT_NEAR(plan::predict(c.m, r.system, c.layouts[i], c.o).step_time_s, measured[i], 0.01 * measured[i]) << i;
  }
}

TEST(Recalibrate, LeavesAnAccuratePlannerAlone) {
  const Case c = make_case();
  std::vector<double> measured;
  for (const plan::Layout& l : c.layouts) measured.push_back(plan::predict(c.m, c.sys, l, c.o).step_time_s);
  const Recalibration r = recalibrate(c.sys, c.m, c.o, c.layouts, measured);
  EXPECT_LT(r.error_before, 1e-12);
  EXPECT_LE(r.error_after, r.error_before);
  EXPECT_DOUBLE_EQ(r.device_scale, 1.0);
  EXPECT_DOUBLE_EQ(r.link_scale, 1.0);
  EXPECT_DOUBLE_EQ(r.added_overhead_s, 0.0);
}

TEST(Recalibrate, RefusesBadMeasurements) {
  const Case c = make_case();
  EXPECT_THROW(recalibrate(c.sys, c.m, c.o, c.layouts, {}), InputError);
  std::vector<double> measured(c.layouts.size(), 0.1);
  measured[1] = -1;
  EXPECT_THROW(recalibrate(c.sys, c.m, c.o, c.layouts, measured), InputError);
}

}  // namespace
}  // namespace weft::tune
