// Layout search: enumerate every valid layout of a model on a number of devices, drop those
// that do not fit in memory, rank the rest by predicted step time; strong/weak scaling.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "plan/predict.h"

namespace weft::plan {

// Choices the user pinned; an empty optional is searched.
struct Pins {
  std::optional<int> tp, pp, dp, zero, virtual_stages, recompute_layers;
  std::optional<int64_t> micro_batch;
  std::optional<Recompute> recompute;
  std::optional<bool> sequence_parallel;
  std::optional<PipeSchedule> schedule;
};

struct SearchResult {
  std::vector<Prediction> top;  // fitting layouts, fastest first (ties: less memory first)
  int64_t evaluated = 0;        // valid layouts predicted
  int64_t fitting = 0;          // of those, the ones that fit in memory
  double seconds = 0;           // wall time of the search
  // When nothing fits: the layout that needs the least memory (fits = false).
  std::optional<Prediction> smallest;
};

// Every valid layout on `gpus` devices that matches the pins: tp dividing the heads and the
// MLP size, pp x v dividing the layers, dp = gpus / (tp pp), micro-batches dividing the
// global batch / dp, ZeRO 0..3 (only 0 when dp = 1), recompute none/selective/full,
// sequence parallel (only with tp > 1), schedules gpipe/1f1b/interleaved (only 1f1b when
// pp = 1; interleaved with v >= 2 and m % p == 0). Keeps the `keep` fastest that fit.
// InputError naming the values when no layout matches the pins (before memory).
SearchResult search_layouts(const ModelShape& m, const System& sys, int64_t gpus, const Options& o, const Pins& pins,
                            size_t keep);

// Words on why `best` beats `second`: the choices that differ and the time components that
// differ most.
std::string explain(const Prediction& best, const Prediction& second);

struct ScalingPoint {
  int64_t gpus = 0;
  int64_t global_batch = 0;
  bool found = false;  // some layout fits
  std::string note;    // why not: no valid layout matches the pins, or none fits in memory
  Prediction best;
  double efficiency = 0;  // strong: (T_base N_base) / (T N); weak: tokens/s per device vs base
};

// Strong scaling (fixed global batch) or weak scaling (global batch grows with the devices:
// batch x gpus / gpus[0]) over `gpu_counts`, each with its best layout under the pins.
// Efficiency is relative to the first count with a fitting layout.
std::vector<ScalingPoint> scaling(const ModelShape& m, const System& sys, const std::vector<int64_t>& gpu_counts,
                                  const Options& o, const Pins& pins, bool weak);

}  // namespace weft::plan
