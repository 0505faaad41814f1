#include "train/engine_config.h"

#include <fmt/format.h>

#include <functional>

#include "comm/codec.h"
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
  // ZeRO++ works inside ZeRO's group: the dp_shard group under HSDP (the dp group without it).
  if (nodes != nullptr) {
    peers = dp_peers_per_node(layout, *nodes);
  } else if (cfg.ranks_per_node > 0) {
    peers = dp_peers_per_node(layout, emulated_node_map(layout.world_size(), static_cast<int>(cfg.ranks_per_node)));
  }
  std::vector<int> hierarchy;
  for (int64_t h : cfg.hierarchy) hierarchy.push_back(static_cast<int>(h));
  return resolve_zeropp(want, static_cast<int>(cfg.zero), grid.dp_shard(), peers, hierarchy);
}

namespace {

// [precision] wires = "storage": the traffic whose payload is stored in 16 bits and that no
// [compression] codec handles carries the storage type (the bf16/fp16 codec, whose rounding
// leaves a 16-bit value unchanged): pipeline sends with pp > 1 of a family whose residual stream
// is fp32 (ClimaX). GPT's messages are 16-bit tensors, sent as stored or through a [compression]
// pp codec. The ZeRO 1-3 parameter all-gathers need no codec: the working parameters are 16-bit
// buffers, gathered as stored.
void storage_wires(const RunConfig& cfg, const GridSpec& grid, CompressionPolicy& p,
                   const std::function<void(std::string)>& note) {
  const Precision prec = parse_precision(cfg.precision);
  if (prec == Precision::kFp32 || grid.pp <= 1) return;
  const ModelConfig mc = cfg.model_config();
  if (residual_stream_dtype(mc.capabilities(), prec) != DType::kF32) {
    // The messages are the residual stream, stored in 16 bits and sent as stored (PipelineRuntime),
    // or through a [compression] pp codec, which reads them widened to fp32 (CompressedComm).
    if (cfg.wires == "fp32") {
      note(fmt::format("[precision] wires = \"fp32\" has no effect on the pipeline sends: {}'s residual stream is stored "
                       "in {} and sent as stored",
                       mc.capabilities().family, precision_name(prec)));
    }
    return;
  }
  if (cfg.wires != "storage") return;
  const CodecSpec wire = parse_codec(precision_name(prec), "precision.wires");
  if (p.pp.off()) {
    p.pp = wire;
    note(fmt::format("pipeline sends carry {} (their payload is stored in {}: lossless; [precision] wires = \"fp32\" "
                     "sends fp32)",
                     wire.name(), precision_name(prec)));
  }
}

// [precision] reduce_dtype = "bf16": the gradient reduction through the bf16 codec (blocks sent in
// bf16, summed in fp32 by the receiver), where nothing else codes it.
void reduce_wire(const RunConfig& cfg, const GridSpec& grid, const ZeroPPConfig& zeropp, CompressionPolicy& p) {
  if (cfg.reduce_dtype != "bf16") return;
  if (!p.dp.off()) {
    throw_input("reduce_dtype = \"bf16\" and compression.dp = \"{}\" both set the gradient reduction's wire; choose one",
                p.dp.name());
  }
  if (zeropp.quantized_gradients) {
    throw_input("reduce_dtype = \"bf16\" and zero.quantized_gradients both set the gradient reduction's wire; choose one");
  }
  if (grid.dp_replicate > 1) {
    throw_input("reduce_dtype = \"bf16\" with dp_replicate {}: the bf16 gradient wire runs over the whole dp group, not "
                "yet over dp_shard {} x dp_replicate {}; set reduce_dtype = \"fp32\" or dp_replicate = 1",
                grid.dp_replicate, grid.dp_shard(), grid.dp_replicate);
  }
  p.dp = parse_codec("bf16", "precision.reduce_dtype");
}

}  // namespace

CompressionPolicy run_compression(const RunConfig& cfg, const GridSpec& grid, const ZeroPPConfig& zeropp,
                                  std::vector<std::string>* notes) {
  CompressionPolicy p = run_layout(cfg).compression;  // the [compression] codecs (train/run_layout.h)
  auto note = [&](std::string s) {
    if (notes) notes->push_back(std::move(s));
  };
  const struct {
    const char* key;
    const CodecSpec& codec;
    int axis_size;
    const char* axis;
  } uses[] = {{"dp", p.dp, grid.dp, "dp"}, {"params", p.params, grid.dp, "dp"}, {"tp", p.tp, grid.tp, "tp"},
              {"pp", p.pp, grid.pp, "pp"}};
  for (const auto& u : uses) {
    if (u.codec.off()) continue;
    check_codec_on_backend(u.codec, cfg.backend, std::string("compression.") + u.key);
    if (u.axis_size == 1) {
      note(fmt::format("compression.{} = \"{}\" has no effect: {} = 1 (nothing crosses that axis)", u.key,
                       u.codec.name(), u.axis));
    }
  }
  if (!p.params.off() && cfg.zero == 0) {
    note(fmt::format("compression.params = \"{}\" has no effect with zero 0 (no parameter all-gather)", p.params.name()));
  }
  if (!p.dp.off() && zeropp.quantized_gradients) {
    throw_input("compression.dp = \"{}\" and zero.quantized_gradients both code the gradient reduction; choose one",
                p.dp.name());
  }
  if (!p.params.off() && (zeropp.quantized_weights || zeropp.hpz > 1)) {
    throw_input("compression.params = \"{}\" and ZeRO++'s weight gathers (zero.quantized_weights {}, "
                "zero.hpz_partition_size {}) both handle the parameter all-gathers; choose one",
                p.params.name(), zeropp.quantized_weights, zeropp.hpz);
  }
  if (p.error_feedback && p.dp.kind == CodecKind::kZfp && p.dp.rate < 8) {
    note(fmt::format("compression.error_feedback with compression.dp = \"{}\": zfp's fixed-rate error is not bounded "
                     "by the values under about 8 bits per value, so the residual can grow step after step "
                     "(docs/compression.md)",
                     p.dp.name()));
  }
  if (p.error_feedback && grid.dp == 1) note("compression.error_feedback has no effect: dp = 1");
  // HSDP: the compressing communicators wrap the whole dp group (engine.cc), where the store's
  // reductions and gathers run inside dp_shard and across dp_replicate (data_parallel.h).
  for (const auto& [key, codec] : {std::pair<const char*, const CodecSpec*>{"dp", &p.dp}, {"params", &p.params}}) {
    if (!codec->off() && grid.dp_replicate > 1) {
      throw_input("compression.{} = \"{}\" with dp_replicate {}: compressed data-parallel collectives run over the "
                  "whole dp group, not yet over dp_shard {} x dp_replicate {}; set compression.{} = \"off\" or "
                  "dp_replicate = 1",
                  key, codec->name(), grid.dp_replicate, grid.dp_shard(), grid.dp_replicate, key);
    }
  }
  // A 16-bit run's working parameters are 16-bit buffers, all-gathered as stored; ZeRO++'s qwZ
  // (zero.quantized_weights) quantizes them on the way (Zero3Gather), a compression.params codec
  // does not (its comm buffers are not in the memory model).
  if (!p.params.off() && parse_precision(cfg.precision) != Precision::kFp32) {
    throw_input("compression.params = \"{}\" with precision {}: the working parameters are stored in {} and "
                "all-gathered as stored (half the fp32 bytes); to quantize them use ZeRO++'s zero.quantized_weights "
                "(qwZ) with zero 3; set compression.params = \"off\" or precision = \"fp32\"",
                p.params.name(), cfg.precision, cfg.precision);
  }
  storage_wires(cfg, grid, p, note);
  reduce_wire(cfg, grid, zeropp, p);
  return p;
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
  ec.global_batch = cfg.global_batch;
  // The layout, validated in one place (parallel/layout_rules.h, shared with the planner).
  ec.layout = validate_run_layout(cfg, model, world_size);
  ec.layout.virtual_stages = ec.layout.chunks();
  ec.data_parallel.bucket_bytes = static_cast<int64_t>(cfg.bucket_mb * 1048576.0);
  ec.data_parallel.prefetch = static_cast<int>(cfg.prefetch);
  ec.set_zeropp(run_zeropp(cfg, ec.layout.grid(), nullptr));
  ec.layout.compression = run_compression(cfg, ec.layout.grid(), ec.data_parallel.zeropp, nullptr);
  ec.precision = parse_precision(cfg.precision);
  ec.matmul = parse_matmul_mode(cfg.matmul);
  ec.fp32_kernel = cfg.fp32_kernel;
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
