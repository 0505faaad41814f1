#include "train/engine_config.h"

#include "train/run_layout.h"

namespace weft {

ZeroPPConfig run_zeropp(const RunConfig& cfg, const GridSpec& grid, const NodeMap* nodes) {
  ZeroPPConfig want;
  want.quantized_weights = cfg.quantized_weights;
  want.hpz = static_cast<int>(cfg.hpz_partition_size);
  want.quantized_gradients = cfg.quantized_gradients;
  want.weights = QuantSpec{static_cast<int>(cfg.weight_bits), cfg.block_size};
  want.gradients = QuantSpec{static_cast<int>(cfg.gradient_bits), cfg.block_size};
  want.error_feedback = cfg.error_feedback;
  int peers = 0;
  const GridLayout layout(grid);
  if (nodes != nullptr) {
    peers = dp_peers_per_node(layout, *nodes);
  } else if (cfg.ranks_per_node > 0) {
    peers = dp_peers_per_node(layout, emulated_node_map(layout.world_size(), static_cast<int>(cfg.ranks_per_node)));
  }
  std::vector<int> hierarchy;
  for (int64_t h : cfg.hierarchy) hierarchy.push_back(static_cast<int>(h));
  return resolve_zeropp(want, static_cast<int>(cfg.zero), grid.dp, peers, hierarchy);
}

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
  // The layout, validated in one place (parallel/layout_rules.h, shared with the planner).
  const RunLayout rl = validate_run_layout(cfg, model, world_size);
  ec.grid = rl.grid;
  ec.schedule = rl.layout.schedule;
  ec.virtual_stages = ec.grid.pp > 1 ? rl.layout.virtual_stages : 1;
  ec.sequence_parallel = cfg.sequence_parallel;
  ec.data_parallel.zero = static_cast<int>(cfg.zero);
  ec.data_parallel.bucket_bytes = static_cast<int64_t>(cfg.bucket_mb * 1048576.0);
  ec.data_parallel.prefetch = static_cast<int>(cfg.prefetch);
  ec.data_parallel.zeropp = run_zeropp(cfg, ec.grid, nullptr);
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
  ec.comm = cfg.comm;
  return ec;
}

}  // namespace weft
