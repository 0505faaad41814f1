// The data-parallel store's settings on their own (parallel/dp/data_parallel.h has the store), for
// readers of a run's settings that do not run it (the engine's configuration, the planner).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "parallel/dp/zeropp.h"

namespace weft {

// The store's settings that are not part of the parallel layout (parallel/layout.h): what a run
// (EngineConfig::data_parallel) adds to its layout's ZeRO stage and HSDP split.
struct DataParallelOptions {
  int64_t bucket_bytes = 8ll << 20;    // zero 0/1: gradient bucket size
  int prefetch = 1;                    // zero 3: groups gathered ahead
  // zero 3: ZeRO++ (parallel/dp/zeropp.h) resolved against the dp_shard group: its quantizers,
  // levels and error feedback (the layout holds the same knobs as the planner prices them).
  ZeroPPConfig zeropp;
};

// Everything the store takes: the options above plus what the layout and the run say.
struct DataParallelConfig : DataParallelOptions {
  int zero = 0;                        // ZeRO stage 0..3
  bool training = true;                // false: inference only (eval, generation): no gradient buffers
  int dp_replicate = 1;                // HSDP: replicas of the dp_shard group (see data_parallel.h); divides the dp size
  // The working parameters' storage: f32, or the 16-bit type of a bf16/fp16 run (the optimizer
  // keeps the fp32 master weights). Gathered and handed to the model in this dtype.
  DType param_dtype = DType::kF32;
};

// Transient parameter buffers of ZeRO-3: the embedding's, the layer in use and the next, and
// `prefetch` more (DataParallel::param_slots; the communication model counts them too).
inline int zero3_param_slots(int prefetch) { return 1 + 2 + (prefetch > 0 ? prefetch : 0); }

}  // namespace weft
