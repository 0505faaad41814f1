// The search space of `weft tune`: the layouts the layout rules accept for a run on N ranks
// (plan/search.h for_each_valid_layout: exactly what `weft train` runs), their knobs encoded
// as numbers for the surrogate (tune/cbo.h) and the Shapley analysis (tune/shapley.h), and the
// planner's prediction of each when a system file is given.
//
// Knobs (kKnobNames, in this order): tp, pp, dp, micro_batch (log2: the sizes are powers of
// two or small divisors, and their effect is multiplicative), zero (0..3), recompute (0 none,
// 1 selective, 2 full), sequence_parallel (0/1), schedule (0 1f1b, 1 gpipe, 2 interleaved),
// virtual_stages, zeropp (0 none, 1 zero++, 2 3-level, 3 custom: plan/shape.h ZeroPP) and
// compression (an index into kCompressionKnobValues). ZeRO++ and compression change the numbers
// the model trains on (quantized weights and gradients, lossy codecs), so they stay off unless
// the search may try lossy layouts (--allow-lossy): then each ZeRO-3 layout is also tried as
// "zero++" and "3-level" (with a system file, which places the levels) and every layout under
// each compression preset of the system (compression_presets, the lossless ones among them),
// leaving out a preset that gives a layout the codecs of one already in the space. Pinned out
// of the space: every layer recomputed under full recompute (recompute_layers -1), plain dp
// (dp_replicate 1).
// The surrogate's features are the knobs plus, with a system file, log(predicted step time):
// the search starts where the model points and learns where it is wrong.
#pragma once
#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/predict.h"

namespace weft::tune {

inline constexpr int kNumKnobs = 11;
inline constexpr std::array<const char*, kNumKnobs> kKnobNames = {
    "tp", "pp", "dp", "micro_batch", "zero", "recompute", "sequence_parallel", "schedule", "virtual_stages",
    "zeropp", "compression"};
// The compression knob's values: the presets compression_presets can give, "custom" last.
inline constexpr std::array<const char*, 10> kCompressionKnobValues = {
    "none", "uniform-zstd", "hybrid", "uniform-bf16", "uniform-fp16", "uniform-int8", "uniform-int4", "hybrid-zfp",
    "uniform-zfp:8", "custom"};

// The knobs of a layout, encoded (above).
std::vector<double> encode_layout(const plan::Layout& l);
// A knob's value as a user reads it ("4", "full", "interleaved") from its encoded value, and
// back (InputError naming the knob and the text for one that is not a value of it).
std::string knob_value_text(int knob, double encoded);
double knob_value_from_text(int knob, const std::string& text);

struct LayoutSpace {
  std::vector<plan::Layout> layouts;   // the valid set, in the planner's search order
  std::vector<double> predicted_s;     // the planner's step time per layout (empty: no system)
  std::vector<std::vector<double>> knobs;  // encode_layout per layout

  bool has_prediction() const { return !predicted_s.empty(); }
  size_t size() const { return layouts.size(); }
  // The layout with these encoded knobs; none when it is not in the space.
  std::optional<size_t> find(const std::vector<double>& knobs) const;
  // The surrogate's features of layout i: its knobs, then log(predicted step time) if any.
  std::vector<double> features(size_t i) const;
  // Indices by predicted step time, fastest first (empty without a prediction).
  std::vector<size_t> by_prediction() const;

  std::map<std::vector<double>, size_t> index_;
};

// Every valid layout of `model` at sequence length `seq` and global batch `global_batch` on
// `world` ranks in rank order `order`, priced by `sys` when it is not null (opt: the planner's options for it);
// allow_lossy: with the ZeRO++ and compression variants (above). InputError naming the values
// when no layout is valid.
LayoutSpace layout_space(const ModelConfig& model, int64_t seq, int64_t global_batch, Precision precision,
                         int world, const plan::System* sys, const plan::Options& opt, const std::string& order,
                         bool allow_lossy = false);

}  // namespace weft::tune
