// The data-parallel store's settings on their own (parallel/dp/data_parallel.h has the store), for
// readers of a run's settings that do not run it (the engine's configuration, the planner).
#pragma once
#include <cstdint>

#include "parallel/dp/zeropp.h"

namespace weft {

struct DataParallelConfig {
  int zero = 0;                        // ZeRO stage 0..3
  int64_t bucket_bytes = 8ll << 20;    // zero 0/1: gradient bucket size
  int prefetch = 1;                    // zero 3: groups gathered ahead
  bool training = true;                // false: inference only (eval, generation): no gradient buffers
  ZeroPPConfig zeropp;                 // zero 3: ZeRO++ (parallel/dp/zeropp.h), resolved against the dp_shard group
  int dp_replicate = 1;                // HSDP: replicas of the dp_shard group (see data_parallel.h); divides the dp size
};

// Transient parameter buffers of ZeRO-3: the embedding's, the layer in use and the next, and
// `prefetch` more (DataParallel::param_slots; the communication model counts them too).
inline int zero3_param_slots(int prefetch) { return 1 + 2 + (prefetch > 0 ? prefetch : 0); }

}  // namespace weft
