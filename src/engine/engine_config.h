// The engine's settings on their own: what the planner's models (plan/comm_model.h) and the
// trainer read and write without the runtime (engine/engine.h).
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "core/precision.h"
#include "model/config.h"
#include "optim/loss_scale.h"
#include "optim/optim_config.h"
#include "parallel/dp/dp_config.h"
#include "parallel/layout.h"

namespace weft {

struct EngineConfig {
  ModelConfig model;
  int64_t seq = 0;             // T
  int64_t global_batch = 1;    // G sequences per step, over every dp rank
  // The parallel layout (parallel/layout.h; validated by the layout rules): tp, pp, dp and the
  // rank order, the micro-batch, ZeRO and HSDP, sp, recompute, the schedule, ZeRO++ (its knobs as
  // resolved into data_parallel.zeropp) and [compression] (all off: no compressing communicator
  // anywhere, the uncompressed run bit for bit). The planner prices this very value.
  Layout layout;
  // The data-parallel store's settings beyond the layout (buckets, prefetch, ZeRO++'s quantizers).
  DataParallelOptions data_parallel;
  Precision precision = Precision::kFp32;
  // How the model's products compute (core/precision.h), set on the backend by the engine.
  MatmulMode matmul = MatmulMode::kExact;
  std::string fp32_kernel;  // "": the backend's default fp32 product
  int64_t head_chunk = 0;
  AdamWConfig adamw;
  LossScaleConfig loss_scale;
  double grad_clip = 1.0;      // 0: off
  // false: inference only (evaluate, generate): no optimizer state, no gradient scratch.
  bool training = true;
  // How device buffers move between ranks (comm/device_comm_registry.h): "mpi" (host-staged
  // where the backend refuses host access), "nccl" (cuda only); "": the backend's default.
  std::string comm;

  // ZeRO++ as resolved against the dp_shard group and the nodes (parallel/dp/zeropp.h
  // resolve_zeropp): the store's settings, and the layout's knobs that the planner prices
  // (zeropp "custom" when any is on; the layout's defaults when none is).
  void set_zeropp(ZeroPPConfig z) {
    Layout& l = layout;
    const Layout none;
    l.zeropp = z.active() ? ZeroPP::kCustom : none.zeropp;
    l.qwz = z.active() ? z.quantized_weights : none.qwz;
    l.hpz = z.active() ? z.hpz : none.hpz;
    l.qgz = z.active() ? z.quantized_gradients : none.qgz;
    l.hierarchy = z.active() ? z.levels : none.hierarchy;
    l.quant_block = z.active() ? static_cast<int>(z.gradients.block) : none.quant_block;
    data_parallel.zeropp = std::move(z);
  }

  // What the data-parallel store of this run takes (the options with the layout's ZeRO stage
  // and HSDP split).
  DataParallelConfig store_config() const {
    DataParallelConfig c;
    static_cast<DataParallelOptions&>(c) = data_parallel;
    c.zero = layout.zero;
    c.dp_replicate = layout.dp_replicate;
    c.training = training;
    c.param_dtype = dtype_of(precision);
    return c;
  }
};

}  // namespace weft
