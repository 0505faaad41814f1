#include "train/engine_config.h"

#include <algorithm>

#include "core/error.h"

namespace weft {

namespace {

// The layout, validated in one place.
GridSpec grid_spec(const RunConfig& cfg, const ModelConfig& mc, int world_size) {
  GridSpec spec;
  spec.tp = static_cast<int>(cfg.tp);
  spec.pp = static_cast<int>(cfg.pp);
  if (cfg.dp == 0 && world_size % (spec.tp * spec.pp) != 0) {
    throw_input("world size {} is not divisible by tp {} x pp {} = {} (dp is derived as world / (tp x pp))", world_size,
                spec.tp, spec.pp, spec.tp * spec.pp);
  }
  spec.dp = cfg.dp > 0 ? static_cast<int>(cfg.dp) : std::max(1, world_size / (spec.tp * spec.pp));
  spec.order = cfg.order;
  validate_layout(spec, world_size, LayoutChecks{mc.n_head, mc.n_layer, cfg.global_batch, cfg.micro_batch});
  return spec;
}

void check_pipeline(const RunConfig& cfg, const ModelConfig& mc, const GridSpec& spec, PipeSchedule schedule) {
  // Virtual stages: model chunks per pipeline stage (the interleaved schedule only).
  const int vs = static_cast<int>(cfg.virtual_stages);
  if (vs < 1) throw_input("virtual_stages must be >= 1, got {}", vs);
  if (vs > 1 && (spec.pp == 1 || schedule != PipeSchedule::kInterleaved)) {
    throw_input("virtual_stages {} needs the interleaved schedule and pp > 1 (got schedule '{}', pp {})", vs,
                cfg.schedule, spec.pp);
  }
  if (spec.pp > 1 && mc.n_layer < spec.pp * vs) {
    throw_input("pp {} x virtual_stages {} = {} model chunks need at least that many layers; the model has {}", spec.pp,
                vs, spec.pp * vs, mc.n_layer);
  }
  if (spec.pp > 1 && cfg.zero > 1) {
    throw_input("zero {} with pp {}: ZeRO-2/3 reduce gradients every micro-batch and gather parameters per use, which "
                "pipelining would multiply; use zero 0 or 1 with pipeline parallelism", cfg.zero, spec.pp);
  }
  if (spec.pp > 1) {
    // The schedule itself (interleaved needs m % p == 0): refused before anything is written.
    const int64_t accum = cfg.global_batch / spec.dp / cfg.micro_batch;
    stage_schedule(schedule, spec.pp, 0, static_cast<int>(accum), vs);
  }
}

}  // namespace

EngineConfig engine_config(const RunConfig& cfg, int world_size) {
  EngineConfig ec = engine_config(cfg, cfg.model_config(), world_size);
  ec.seq = cfg.seq();
  return ec;
}

EngineConfig engine_config(const RunConfig& cfg, const ModelConfig& model, int world_size) {
  EngineConfig ec;
  ec.model = model;
  ec.seq = cfg.seq_len > 0 ? cfg.seq_len : model.n_ctx;
  ec.micro_batch = cfg.micro_batch;
  ec.global_batch = cfg.global_batch;
  ec.grid = grid_spec(cfg, ec.model, world_size);
  ec.schedule = parse_schedule(cfg.schedule);
  check_pipeline(cfg, ec.model, ec.grid, ec.schedule);
  ec.virtual_stages = ec.grid.pp > 1 ? static_cast<int>(cfg.virtual_stages) : 1;
  ec.sequence_parallel = cfg.sequence_parallel;
  ec.data_parallel.zero = static_cast<int>(cfg.zero);
  ec.data_parallel.bucket_bytes = static_cast<int64_t>(cfg.bucket_mb * 1048576.0);
  ec.data_parallel.prefetch = static_cast<int>(cfg.prefetch);
  ec.recompute = parse_recompute(cfg.recompute);
  ec.recompute_layers = static_cast<int>(cfg.recompute_layers);
  ec.precision = parse_precision(cfg.precision);
  ec.head_chunk = cfg.head_chunk;
  ec.adamw.lr = static_cast<float>(cfg.lr);
  ec.adamw.beta1 = static_cast<float>(cfg.beta1);
  ec.adamw.beta2 = static_cast<float>(cfg.beta2);
  ec.adamw.eps = static_cast<float>(cfg.eps);
  ec.adamw.weight_decay = static_cast<float>(cfg.weight_decay);
  ec.loss_scale.loss_scale = cfg.loss_scale;
  ec.loss_scale.initial_scale = cfg.initial_loss_scale;
  ec.loss_scale.min_scale = cfg.min_loss_scale;
  ec.loss_scale.window = cfg.loss_scale_window;
  ec.grad_clip = cfg.grad_clip;
  return ec;
}

}  // namespace weft
