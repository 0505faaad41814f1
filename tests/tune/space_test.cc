// weft tune's search space (tune/space.h): ZeRO++ and compression are knobs of it, off unless the
// search may try lossy layouts, and a trial carries every field of its layout into the run's
// config (tune/trial.h), ZeRO++ and compression among them.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "model/config.h"
#include "plan/system.h"
#include "train/config.h"
#include "train/engine_config.h"
#include "tune/space.h"
#include "tune/trial.h"

namespace weft::tune {
namespace {

plan::System frontier() { return plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml"); }

LayoutSpace space(bool allow_lossy, const plan::System* sys) {
  ModelConfig mc = model_preset("tiny");
  mc.n_layer = 2;
  plan::Options o;
  if (sys != nullptr) o = plan::Options::from_system(*sys, Precision::kFp32, 8);
  return layout_space(mc, 64, 8, Precision::kFp32, 4, sys, o, "tp-dp-pp", allow_lossy);
}

std::set<std::string> knob_values(const LayoutSpace& s, int knob) {
  std::set<std::string> v;
  for (const auto& k : s.knobs) v.insert(knob_value_text(knob, k[static_cast<size_t>(knob)]));
  return v;
}

TEST(TuneSpace, ZeroPPAndCompressionAreKnobsOffUnlessLossyIsAllowed) {
  const plan::System sys = frontier();
  const LayoutSpace plain = space(false, &sys), lossy = space(true, &sys);
  EXPECT_EQ(knob_values(plain, 9), std::set<std::string>{"none"});
  EXPECT_EQ(knob_values(plain, 10), std::set<std::string>{"none"});
  // Every plain layout is in the lossy space too, with more beside it.
  EXPECT_GT(lossy.size(), plain.size());
  for (const auto& k : plain.knobs) EXPECT_TRUE(lossy.find(k).has_value());
  const std::set<std::string> zpp = knob_values(lossy, 9), comp = knob_values(lossy, 10);
  EXPECT_TRUE(zpp.count("zero++")) << zpp.size();
  EXPECT_TRUE(comp.count("hybrid") && comp.count("uniform-int8")) << comp.size();
  // A GPU system's presets: no zfp or zstd.
  EXPECT_FALSE(comp.count("uniform-zstd") || comp.count("hybrid-zfp"));
  // The knobs identify a layout (the surrogate's features, the oracle's lookup).
  std::set<std::vector<double>> seen(lossy.knobs.begin(), lossy.knobs.end());
  EXPECT_EQ(seen.size(), lossy.size());
  // Without a system file: no ZeRO++ (its levels come from the system), a CPU's presets.
  const LayoutSpace local = space(true, nullptr);
  EXPECT_EQ(knob_values(local, 9), std::set<std::string>{"none"});
  EXPECT_TRUE(knob_values(local, 10).count("uniform-zstd"));
}

TEST(TuneSpace, NamedKnobValuesRoundTrip) {
  for (int knob : {5, 6, 7, 9, 10}) {
    for (double v = 0; knob_value_text(knob, v) != knob_value_text(knob, v + 1); ++v) {
      EXPECT_EQ(knob_value_from_text(knob, knob_value_text(knob, v)), v) << knob << " " << v;
    }
  }
  EXPECT_EQ(knob_value_text(10, 0), "none");
  EXPECT_EQ(knob_value_from_text(10, "uniform-zfp:8"), 8.0);
  EXPECT_THROW(knob_value_from_text(9, "zero+++"), InputError);
}

TEST(TuneSpace, TrialCarriesZeroPPAndCompressionIntoTheRun) {
  const plan::System sys = frontier();
  const LayoutSpace lossy = space(true, &sys);
  RunConfig base;
  base.model = "tiny";
  base.n_layer = 2;
  base.seq_len = 64;
  base.global_batch = 8;
  bool zeropp = false, compressed = false;
  for (const plan::Layout& l : lossy.layouts) {
    const RunConfig c = trial_config(base, l);
    EXPECT_EQ(c.quantized_weights, l.qwz);
    EXPECT_EQ(c.hpz_partition_size, l.hpz);
    EXPECT_EQ(c.quantized_gradients, l.qgz);
    EXPECT_EQ(c.compression_dp, l.compression.dp.name());
    EXPECT_EQ(c.compression_params, l.compression.params.name());
    EXPECT_EQ(c.compression_tp, l.compression.tp.name());
    EXPECT_EQ(c.compression_pp, l.compression.pp.name());
    if (!(l.zeropp_on() || l.compression.any()) || (zeropp && compressed)) continue;
    // The run's engine settings have them: what the trial trains with.
    const EngineConfig ec = engine_config(c, l.world());
    if (l.zeropp_on()) {
      zeropp = true;
      EXPECT_EQ(ec.data_parallel.zeropp.quantized_weights, l.qwz) << l.describe();
      EXPECT_EQ(ec.data_parallel.zeropp.hpz, l.hpz) << l.describe();
      EXPECT_EQ(ec.data_parallel.zeropp.quantized_gradients, l.qgz) << l.describe();
    }
    if (l.compression.any()) {
      compressed = true;
      EXPECT_EQ(ec.layout.compression.describe(), l.compression.describe()) << l.describe();
    }
  }
  EXPECT_TRUE(zeropp && compressed);
}

}  // namespace
}  // namespace weft::tune
