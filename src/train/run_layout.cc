#include "train/run_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/codec.h"

namespace weft {

LayoutCandidate run_layout_candidate(const RunConfig& cfg, int world_size) {
  return run_layout_candidate(cfg, cfg.model_config(), world_size);
}

Layout run_layout(const RunConfig& cfg) {
  auto i = [](int64_t v) { return static_cast<int>(v); };
  Layout l;
  l.tp = i(cfg.tp), l.pp = i(cfg.pp), l.dp = i(cfg.dp), l.dp_replicate = i(cfg.dp_replicate);
  l.order = cfg.order;
  l.micro_batch = cfg.micro_batch;
  l.zero = i(cfg.zero);
  l.recompute = parse_recompute(cfg.recompute);
  l.recompute_layers = i(cfg.recompute_layers);
  l.sequence_parallel = cfg.sequence_parallel;
  l.schedule = parse_schedule(cfg.schedule);
  l.virtual_stages = i(cfg.virtual_stages);
  l.qwz = cfg.quantized_weights;
  l.hpz = i(cfg.hpz_partition_size);
  l.qgz = cfg.quantized_gradients;
  for (int64_t h : cfg.hierarchy) l.hierarchy.push_back(i(h));
  l.quant_block = i(cfg.block_size);
  l.zeropp = l.zeropp_on() ? ZeroPP::kCustom : ZeroPP::kNone;
  const int64_t block = cfg.compression_block_size;
  l.compression.dp = parse_codec(cfg.compression_dp, "compression.dp", block);
  l.compression.params = parse_codec(cfg.compression_params, "compression.params", block);
  l.compression.tp = parse_codec(cfg.compression_tp, "compression.tp", block);
  l.compression.pp = parse_codec(cfg.compression_pp, "compression.pp", block);
  l.compression.error_feedback = cfg.compression_error_feedback;
  l.compression_name = l.compression.any() ? "custom" : "none";
  return l;
}

void set_run_layout(RunConfig& c, const Layout& l) {
  c.tp = l.tp;
  c.pp = l.pp;
  c.dp = l.dp;
  c.dp_shard = 0;  // dp / dp_replicate
  c.dp_replicate = l.dp_replicate;
  c.order = l.order;
  c.micro_batch = l.micro_batch;
  c.zero = l.zero;
  c.recompute = recompute_name(l.recompute);
  c.recompute_layers = l.recompute_layers;
  c.sequence_parallel = l.sequence_parallel;
  c.schedule = schedule_name(l.schedule);
  c.virtual_stages = l.virtual_stages;
  // ZeRO++ as the planner prices it: int8 weights, int4 gradient hops.
  c.quantized_weights = l.qwz;
  c.hpz_partition_size = l.hpz;
  c.quantized_gradients = l.qgz;
  c.hierarchy.assign(l.hierarchy.begin(), l.hierarchy.end());
  c.block_size = l.quant_block;
  if (l.qwz) c.weight_bits = 8;
  if (l.qgz) c.gradient_bits = 4;
  // Compressed collectives, the policy's codecs (int8/int4 blocks as the dp codec's, else the
  // params codec's).
  c.compression_dp = l.compression.dp.name();
  c.compression_params = l.compression.params.name();
  c.compression_tp = l.compression.tp.name();
  c.compression_pp = l.compression.pp.name();
  c.compression_error_feedback = l.compression.error_feedback;
  c.compression_block_size = l.compression.dp.off() ? l.compression.params.block : l.compression.dp.block;
}

const std::vector<std::string>& run_layout_keys() {
  static const std::vector<std::string> k = {
      "train.micro_batch", "train.recompute", "train.recompute_layers", "parallel.tp", "parallel.pp",
      "parallel.dp", "parallel.dp_shard", "parallel.dp_replicate", "parallel.order", "parallel.zero",
      "parallel.sequence_parallel", "parallel.schedule", "parallel.virtual_stages", "zero.quantized_weights",
      "zero.hpz_partition_size", "zero.quantized_gradients", "zero.hierarchy", "zero.block_size",
      "zero.weight_bits", "zero.gradient_bits", "zero.error_feedback", "compression.dp", "compression.params",
      "compression.tp", "compression.pp", "compression.error_feedback", "compression.block_size"};
  return k;
}

std::string layout_toml(const Layout& l) {
  std::string t = fmt::format(
      "[train]\nmicro_batch = {}\nrecompute = \"{}\"\nrecompute_layers = {}\n\n[parallel]\ntp = {}\npp = {}\ndp = {}\n"
      "zero = {}\nsequence_parallel = {}\nschedule = \"{}\"\nvirtual_stages = {}\n",
      l.micro_batch, recompute_name(l.recompute), l.recompute_layers, l.tp, l.pp, l.dp, l.zero,
      l.sequence_parallel ? "true" : "false", schedule_name(l.schedule), l.virtual_stages);
  if (l.dp_replicate > 1) t += fmt::format("dp_replicate = {}\n", l.dp_replicate);
  if (l.order != Layout{}.order) t += fmt::format("order = \"{}\"\n", l.order);
  if (l.zeropp_on()) {
    t += fmt::format("\n[zero]  # ZeRO++ {}\nquantized_weights = {}\nhpz_partition_size = {}\nquantized_gradients = {}\n"
                     "hierarchy = [{}]\nblock_size = {}\n",
                     zeropp_name(l.zeropp), l.qwz, l.hpz, l.qgz, fmt::join(l.hierarchy, ", "), l.quant_block);
  }
  if (l.compression.any()) {
    const CompressionPolicy& c = l.compression;
    t += fmt::format("\n[compression]  # {}\ndp = \"{}\"\nparams = \"{}\"\ntp = \"{}\"\npp = \"{}\"\nerror_feedback = {}\n",
                     l.compression_name, c.dp.name(), c.params.name(), c.tp.name(), c.pp.name(), c.error_feedback);
  }
  return t;
}

LayoutCandidate run_layout_candidate(const RunConfig& cfg, const ModelConfig& mc, int world_size) {
  LayoutCandidate c(run_layout(cfg));
  c.world = world_size;
  c.dp_shard_request = static_cast<int>(cfg.dp_shard);
  c.global_batch = cfg.global_batch;
  c.precision = parse_precision(cfg.precision);
  c.model = {mc.n_layer, mc.n_head, mc.n_embd, mc.ffn, mc.padded_vocab, cfg.seq(mc), mc.capabilities()};
  c.model.kv_heads = mc.kv_heads();
  return c;
}

LayoutCandidate validate_run_layout(const RunConfig& cfg, int world_size) {
  return validate_run_layout(cfg, cfg.model_config(), world_size);
}

LayoutCandidate validate_run_layout(const RunConfig& cfg, const ModelConfig& mc, int world_size) {
  LayoutCandidate l = run_layout_candidate(cfg, mc, world_size);
  check_layout(l);
  l.dp_shard_request = l.resolved_dp_shard();
  l.dp = l.resolved_dp();
  validate_layout(l.grid(), world_size);  // the rank order (sizes and world product passed above)
  return l;
}

}  // namespace weft
