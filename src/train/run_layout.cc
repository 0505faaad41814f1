#include "train/run_layout.h"

namespace weft {

LayoutCandidate run_layout_candidate(const RunConfig& cfg, int world_size) {
  return run_layout_candidate(cfg, cfg.model_config(), world_size);
}

LayoutCandidate run_layout_candidate(const RunConfig& cfg, const ModelConfig& mc, int world_size) {
  const int64_t seq = cfg.seq(mc);
  auto i = [](int64_t v) { return static_cast<int>(v); };
  return {.world = world_size, .tp = i(cfg.tp), .pp = i(cfg.pp), .dp = i(cfg.dp),
          .dp_shard = i(cfg.dp_shard), .dp_replicate = i(cfg.dp_replicate),
          .virtual_stages = i(cfg.virtual_stages), .micro_batch = cfg.micro_batch,
          .global_batch = cfg.global_batch, .zero = i(cfg.zero), .sequence_parallel = cfg.sequence_parallel,
          .schedule = parse_schedule(cfg.schedule), .recompute = parse_recompute(cfg.recompute),
          .recompute_layers = i(cfg.recompute_layers), .precision = parse_precision(cfg.precision),
          .model = {mc.n_layer, mc.n_head, mc.n_embd, mc.ffn, mc.padded_vocab, seq, mc.capabilities()}};
}

RunLayout validate_run_layout(const RunConfig& cfg, int world_size) {
  return validate_run_layout(cfg, cfg.model_config(), world_size);
}

RunLayout validate_run_layout(const RunConfig& cfg, const ModelConfig& mc, int world_size) {
  RunLayout r;
  r.layout = run_layout_candidate(cfg, mc, world_size);
  check_layout(r.layout);
  r.layout.dp = r.layout.resolved_dp();
  r.layout.dp_shard = r.layout.resolved_dp_shard();
  r.grid = GridSpec{r.layout.tp, r.layout.pp, r.layout.dp, cfg.order, r.layout.dp_replicate};
  validate_layout(r.grid, world_size);  // the rank order (sizes and world product passed above)
  return r;
}

}  // namespace weft
