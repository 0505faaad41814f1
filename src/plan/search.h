// Layout search: enumerate every valid layout of a model on a number of devices (the layout
// rules of parallel/layout_rules.h decide), drop those that do not fit in memory, rank the
// rest by predicted step time; strong/weak scaling.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "plan/compression.h"
#include "plan/predict.h"

namespace weft::plan {

// Choices the user pinned; an empty optional is searched.
struct Pins {
  std::optional<int> tp, pp, dp, zero, virtual_stages, recompute_layers;
  // HSDP (parallel/grid.h): unpinned, the search tries every dp_replicate that divides dp and
  // leaves dp_shard >= 2, with ZeRO 1-3 (what it changes there: the shards' size and the
  // replicas' all-reduce); zero 0 runs with dp_replicate 1 unless pinned. A pinned dp_shard
  // fixes dp_replicate = dp / dp_shard.
  std::optional<int> dp_shard, dp_replicate;
  std::optional<int64_t> micro_batch;
  std::optional<Recompute> recompute;
  std::optional<bool> sequence_parallel;
  std::optional<PipeSchedule> schedule;
  // ZeRO++ (zero 3 only): a preset, and knobs that replace the preset's (any of them makes the
  // layout kCustom). Unpinned, the search tries every zero 3 layout plain, as "zero++" and as
  // "3-level" (the latter left out where it resolves to the same knobs as "zero++").
  std::optional<ZeroPP> zeropp;
  std::optional<bool> qwz, qgz;
  std::optional<int> hpz, quant_block;
  std::optional<std::vector<int>> hierarchy;
  bool zeropp_pinned() const { return zeropp || qwz || qgz || hpz || quant_block || hierarchy; }
  // Compressed collectives (plan/compression.h): a pinned policy (`--compression hybrid`,
  // `--compression dp=int4,tp=bf16`), priced on every layout whatever it risks; unpinned, the
  // search tries compression_presets(system, allow_lossy): none and the lossless presets, the
  // lossy ones only with allow_lossy (`--compression any`, `--allow-lossy`).
  std::optional<NamedPolicy> compression;
  bool allow_lossy = false;
  // The rank order every layout gets (not searched; weft's [parallel] order, `--order`).
  std::string order = "tp-dp-pp";
};

struct SearchResult {
  std::vector<Prediction> top;  // fitting layouts, fastest first (ties: less memory first)
  int64_t evaluated = 0;        // valid layouts priced
  int64_t fitting = 0;          // of those, the ones that fit in memory
  double seconds = 0;           // wall time of the search
  bool stopped = false;         // Options::search_seconds ran out: the ranking covers what was priced
  // When nothing fits: the layout that needs the least memory (fits = false).
  std::optional<Prediction> smallest;
};

// Every layout on `gpus` devices that matches the pins and that the layout rules accept
// (parallel/layout_rules.h: the rules the trainer applies, so the search lists exactly what
// `weft train` runs), in search order, unpriced: visit(l) for each; returns their number.
// InputError naming the values when there is none: the pins (if any) and the rule that
// refused the candidates that came closest (e.g. "zero 3 with pp 2: ZeRO-2/3 ...").
// With Options::search_seconds the walk stops when they have passed: *stopped (when given)
// becomes true and the count is of what was visited (InputError if nothing valid was).
int64_t for_each_valid_layout(const ModelShape& m, int64_t gpus, const Options& o, const Pins& pins,
                              const std::function<void(const Layout&)>& visit, bool* stopped = nullptr);
std::vector<Layout> valid_layouts(const ModelShape& m, int64_t gpus, const Options& o, const Pins& pins);

// Ranks the valid layouts (for_each_valid_layout) that fit in memory by predicted step time
// and keeps the `keep` fastest. Left out unless pinned, as they predict the same as a simpler
// layout: ZeRO > 0 with dp 1, selective recompute under FlashAttention, and a compression
// preset that leaves the layout the same codecs as one already priced (codecs on axes of size
// 1 compress nothing). `evaluated` counts the layouts priced (every valid one but those, once
// per ZeRO++ preset and compression policy). InputError naming the values for a pinned policy
// the system cannot run (zfp or zstd on a GPU), or one every layout refuses (a dp or params
// codec with pinned ZeRO++).
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
