// The engine's settings on their own: what the planner's models (plan/comm_model.h) and the
// trainer read and write without the runtime (engine/engine.h).
#pragma once
#include <cstdint>
#include <string>

#include "comm/codec_spec.h"
#include "core/precision.h"
#include "model/config.h"
#include "parallel/recompute.h"
#include "optim/loss_scale.h"
#include "optim/optim_config.h"
#include "parallel/dp/dp_config.h"
#include "parallel/grid.h"
#include "parallel/pp/schedule.h"

namespace weft {

struct EngineConfig {
  ModelConfig model;
  int64_t seq = 0;             // T
  int64_t micro_batch = 1;     // B
  int64_t global_batch = 1;    // G sequences per step, over every dp rank
  GridSpec grid;               // tp, pp, dp and their rank order (validated by the layout rules)
  PipeSchedule schedule = PipeSchedule::k1F1B;
  int virtual_stages = 1;      // chunks per stage (interleaved)
  bool sequence_parallel = false;
  DataParallelConfig data_parallel;
  // [compression] (comm/codec_spec.h): the codec of each kind of traffic; all off: no
  // compressing communicator anywhere (the uncompressed run, bit for bit).
  CompressionPolicy compression;
  Recompute recompute = Recompute::kNone;
  int recompute_layers = -1;
  Precision precision = Precision::kFp32;
  int64_t head_chunk = 0;
  AdamWConfig adamw;
  LossScaleConfig loss_scale;
  double grad_clip = 1.0;      // 0: off
  // false: inference only (evaluate, generate): no optimizer state, no gradient scratch.
  bool training = true;
  // How device buffers move between ranks (comm/device_comm_registry.h): "mpi" (host-staged
  // where the backend refuses host access), "nccl" (cuda only); "": the backend's default.
  std::string comm;
};

}  // namespace weft
