#include "plan/memory.h"

#include "model/block_memory.h"
#include "plan/weft_memory.h"

#include <algorithm>
#include <cmath>

namespace weft::plan {

double stage_params_per_rank(const ModelShape& m, const Layout& l, int stage) {
  const StageSpec part{0, static_cast<int>(stage_layers(m, l, stage)), stage == 0, stage == l.pp - 1};
  return static_cast<double>(m.family->describe(part_spec(m.config(), m.seq, l, part))->rank_params());
}

BytesPerParam bytes_per_param(const MemoryOptions& o) {
  if (o.precision == Precision::kFp32) return {4, 4, 8};  // p, g, Adam m + v
  // PyTorch FSDP's mixed precision (16-bit param_dtype): the sharded parameters are the fp32
  // masters and their gradients fp32; the 16-bit copies exist only gathered (the comm buffers).
  if (o.memory_model == "fsdp") return {4, 4, 8};
  // 16-bit parameters and gradients, fp32 master + m + v (Rajbhandari et al. 2020, K = 12),
  // + the fp32 gradient accumulation buffer (Megatron-LM main_grad; the seeds' 20 bytes).
  return {2, o.fp32_grad_accumulation ? 6.0 : 2.0, 12};
}

void add_zero_states(MemoryBreakdown& r, double n_params, const Layout& l, const MemoryOptions& o) {
  const double dp = l.dp_shard();
  const BytesPerParam bpp = bytes_per_param(o);
  r.params = n_params * bpp.params / (l.zero >= 3 ? dp : 1.0);
  r.grads = n_params * bpp.grads / (l.zero >= 2 ? dp : 1.0);
  r.optimizer = n_params * bpp.optimizer / (l.zero >= 1 ? dp : 1.0);
}

double comm_buffers(MemoryBreakdown& r, double n_params, double front, double slot, double pipeline, const Layout& l,
                    const MemoryOptions& o) {
  const double dp = l.dp_shard();
  const double e = elem_bytes(o.precision);  // a gathered parameter: the compute precision's
  double comm = 0;
  if (l.dp > 1 && l.zero <= 2 && o.dp_bucket_elements > 0) {
    const double grad_elem = (o.precision == Precision::kFp32 || o.fp32_grad_accumulation) ? 4 : 2;
    comm += std::min(o.dp_bucket_elements, n_params) * grad_elem;
  }
  if (l.dp_shard() > 1 && l.zero == 3) {
    comm += (front + 2 * slot) * e;
    const double G = l.quant_block;
    if (l.qwz) comm += 2 * slot * (1 + 4 / G);  // their int8 wires
    if (l.qgz) {
      const double n1 = l.hierarchy.empty() ? dp : l.hierarchy.front();
      comm += slot * (2 * (0.5 + 4 / G) + 4 / n1);  // int4 send + receive, fp32 partial sum
    }
    if (l.hpz > 1) {
      r.hpz_secondary = n_params * e / l.hpz;
      r.params += r.hpz_secondary;
    }
  }
  if (l.pp > 1) comm += pipeline;
  // Compressed collectives' error feedback: an fp32 residual per gradient element of the rank
  // (what the dp codec left out last step, added to the next step's gradient).
  if (l.dp > 1 && l.compression.error_feedback && !l.compression.dp.off()) comm += 4 * n_params;
  return comm;
}

namespace {

BlockShape block_shape(const ModelShape& m, const Layout& l) {
  BlockShape k{static_cast<double>(m.seq), static_cast<double>(l.micro_batch), static_cast<double>(m.hidden),
               static_cast<double>(m.ffn), static_cast<double>(m.heads), static_cast<double>(l.tp), l.sequence_parallel};
  // The decoder variants (model/config.h's BlockOptions): k and v at the kv width, SwiGLU's gate and up.
  const ModelConfig c = m.config();
  // (block_stash_bytes divides it by t: with fewer kv heads than ranks each rank keeps one.)
  k.kv = static_cast<double>(c.kv_heads_local(static_cast<int>(l.tp))) * c.head_dim() * static_cast<double>(l.tp);
  k.gated = c.block.mlp == MlpKind::kSwiglu;
  return k;
}

}  // namespace

double layer_stash_bytes(const ModelShape& m, const Layout& l, const MemoryOptions& o) {
  const bool keep_scores = l.recompute == Recompute::kNone && !o.flash_attention;
  return block_stash_bytes(block_shape(m, l), elem_bytes(o.precision), keep_scores, o.dropout);
}

double layer_checkpoint_bytes(const ModelShape& m, const Layout& l, const MemoryOptions& o) {
  return block_checkpoint_bytes(block_shape(m, l), elem_bytes(o.precision));
}

namespace {

// in_flight_layers for a stage of `n_layers` layers.
double in_flight(const Layout& l, int64_t mb, int stage, int64_t n_layers) {
  const double layers = static_cast<double>(n_layers);
  const int64_t p = l.pp;
  switch (l.schedule) {
    case PipeSchedule::kGpipe:
      return static_cast<double>(mb) * layers;
    case PipeSchedule::k1F1B:
      return static_cast<double>(std::min<int64_t>(p - stage, mb)) * layers;
    case PipeSchedule::kInterleaved: {
      const int64_t v = l.virtual_stages;
      int64_t chunks = mb * v;  // m == p: Megatron runs every forward first
      if (mb != p) chunks = std::min<int64_t>(2 * (p - stage - 1) + (v - 1) * p + 1, mb * v);
      return static_cast<double>(chunks) * layers / static_cast<double>(v);
    }
  }
  return 0;
}

// stage_memory for a stage of `n_layers` layers (the partition computed once by the caller).
MemoryBreakdown stage_memory_of(const ModelShape& m, const Layout& l, const MemoryOptions& o, int stage,
                                int64_t n_layers) {
  if (o.memory_model == "weft") {
    // weft's own buffers, exact for its CPU backend, any family (plan/weft_memory.h).
    WeftRunShape w;
    w.model = m.config();
    w.seq = m.seq;
    w.micro_batches = micro_batches(o.global_batch, l);
    w.layout = l;
    w.master_weights = o.precision != Precision::kFp32;
    w.precision = o.precision;
    w.native_products = o.native_products;
    return weft_rank_memory(w, stage, 0);
  }
  MemoryBreakdown r;
  r.stage = stage;
  const StageSpec part{0, static_cast<int>(n_layers), stage == 0, stage == l.pp - 1};
  const std::unique_ptr<ModelDescription> desc = m.family->describe(part_spec(m.config(), m.seq, l, part));
  const double n_params = static_cast<double>(desc->rank_params());
  add_zero_states(r, n_params, l, o);

  // Activations: per layer-micro-batch stash, times the layer-micro-batches in flight, and what
  // the part keeps outside its blocks per micro-batch in flight; the workspace and buffers as
  // the family describes them (model/description.h's accelerator model).
  AcceleratorOptions ao;
  ao.e = elem_bytes(o.precision);
  ao.dropout = o.dropout;
  ao.flash_attention = o.flash_attention;
  const AcceleratorMemory a = desc->accelerator_memory(ao);
  const int64_t mb = micro_batches(o.global_batch, l);
  const double layers = static_cast<double>(n_layers), flight = in_flight(l, mb, stage, n_layers);
  r.activations = a.layer * flight;
  r.activations += a.per_micro_batch * (flight / std::max(1.0, layers));
  r.workspace = a.workspace;
  r.comm = comm_buffers(r, n_params, a.front_gathered, a.slot, l.pp > 1 ? a.pipeline : 0.0, l, o);
  r.sum();
  return r;
}

}  // namespace

double in_flight_layers(const ModelShape& m, const Layout& l, int64_t mb, int stage) {
  return in_flight(l, mb, stage, stage_layers(m, l, stage));
}

MemoryBreakdown stage_memory(const ModelShape& m, const Layout& l, const MemoryOptions& o, int stage) {
  return stage_memory_of(m, l, o, stage, stage_layers(m, l, stage));
}

MemoryBreakdown worst_stage_memory(const ModelShape& m, const Layout& l, const MemoryOptions& o) {
  // Stage 0 holds the embedding, the most layers (the partition puts the extra layers on the
  // first chunks) and the most micro-batches in flight, the last stage the head; middle
  // stages are dominated by one of those two, so check all when there are few and the ends
  // (plus stage 1) otherwise.
  const std::vector<int64_t> layers = stage_layer_counts(m, l);
  MemoryBreakdown best = stage_memory_of(m, l, o, 0, layers[0]);
  auto consider = [&](int s) {
    MemoryBreakdown b = stage_memory_of(m, l, o, s, layers[static_cast<size_t>(s)]);
    if (b.total > best.total) best = b;
  };
  if (l.pp <= 8) {
    for (int s = 1; s < l.pp; ++s) consider(s);
  } else {
    consider(1);
    consider(l.pp - 1);
  }
  return best;
}

}  // namespace weft::plan
