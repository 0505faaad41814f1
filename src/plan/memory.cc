#include "plan/memory.h"

#include "plan/vit_shape.h"
#include "plan/weft_memory.h"

#include <algorithm>
#include <cmath>

namespace weft::plan {

namespace {

// The model's description (model/gpt_description.h) of one rank of pipeline stage `stage`
// holding `layers` layers: stage 0 the embedding group (wte/t, wpe), the last stage ln_f and
// the tied head's copy of the embedding group, as weft's StageSpec keeps it (Megatron-LM keeps
// only wte there); LayerNorms and row-parallel biases replicated over tp.
GptDescription stage_description(const ModelShape& m, const Layout& l, int stage, int64_t layers) {
  const StageSpec part{0, static_cast<int>(layers), stage == 0, stage == l.pp - 1};
  return describe_part(m.config(), m.seq, l, part);
}

}  // namespace

double stage_params_per_rank(const ModelShape& m, const Layout& l, int stage) {
  const StageSpec part{0, static_cast<int>(stage_layers(m, l, stage)), stage == 0, stage == l.pp - 1};
  return static_cast<double>(m.family->describe(part_spec(m.config(), m.seq, l, part))->rank_params());
}

BytesPerParam bytes_per_param(const MemoryOptions& o) {
  if (o.precision == Precision::kFp32) return {4, 4, 8};  // p, g, Adam m + v
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
  const BytesPerParam bpp = bytes_per_param(o);
  double comm = 0;
  if (l.dp > 1 && l.zero <= 2 && o.dp_bucket_elements > 0) {
    const double grad_elem = (o.precision == Precision::kFp32 || o.fp32_grad_accumulation) ? 4 : 2;
    comm += std::min(o.dp_bucket_elements, n_params) * grad_elem;
  }
  if (l.dp_shard() > 1 && l.zero == 3) {
    comm += (front + 2 * slot) * bpp.params;
    const double G = l.quant_block;
    if (l.qwz) comm += 2 * slot * (1 + 4 / G);  // their int8 wires
    if (l.qgz) {
      const double n1 = l.hierarchy.empty() ? dp : l.hierarchy.front();
      comm += slot * (2 * (0.5 + 4 / G) + 4 / n1);  // int4 send + receive, fp32 partial sum
    }
    if (l.hpz > 1) {
      r.hpz_secondary = n_params * bpp.params / l.hpz;
      r.params += r.hpz_secondary;
    }
  }
  if (l.pp > 1) comm += pipeline;
  // Compressed collectives' error feedback: an fp32 residual per gradient element of the rank
  // (what the dp codec left out last step, added to the next step's gradient).
  if (l.dp > 1 && l.compression.error_feedback && !l.compression.dp.off()) comm += 4 * n_params;
  return comm;
}

double layer_stash_bytes(const ModelShape& m, const Layout& l, const MemoryOptions& o) {
  // Korthikanti et al. 2022 sec. 4.1, in elements of e bytes (their 2-byte activations) and
  // 1-byte dropout masks. sbh = s b h, t = tp.
  const double e = elem_bytes(o.precision), t = l.tp;
  const double sb = static_cast<double>(m.seq) * static_cast<double>(l.micro_batch);
  const double sbh = sb * static_cast<double>(m.hidden), sbf = sb * static_cast<double>(m.ffn);
  const double as2b = static_cast<double>(m.heads) * static_cast<double>(m.seq) * sb;
  const double rep = l.sequence_parallel ? t : 1.0;  // replicated terms: / t only with sp
  // Replicated over tp (unless sp): the two LayerNorm inputs (2 sbh), the QKV product input
  // and the first MLP product input (the LayerNorm outputs, 2 sbh): Korthikanti's 10 sbh
  // minus the two dropout masks.
  double bytes = 4 * sbh * e / rep;
  // Split over tp: Q and K (2 sbh), V (sbh), the attention-projection input (sbh), the GeLU
  // input and output (2 sbf; Korthikanti's 16 sbh at f = 4h): their 24 sbh bytes.
  bytes += (4 * sbh + 2 * sbf) * e / t;
  if (o.dropout) {
    // Dropout masks (1 byte): after the attention projection and after the MLP (replicated
    // unless sp), on the attention probabilities (split).
    bytes += 2 * sbh / rep;
  }
  const bool keep_scores = l.recompute == Recompute::kNone && !o.flash_attention;
  if (keep_scores) {
    bytes += as2b * e / t;                       // softmax output (2 a s^2 b bytes)
    if (o.dropout) bytes += as2b * (1 + e) / t;  // its dropout mask + dropout output
  }
  return bytes;
}

double layer_checkpoint_bytes(const ModelShape& m, const Layout& l, const MemoryOptions& o) {
  // Korthikanti et al. 2022 sec. 5: full recompute stores the layer input, 2 s b h bytes;
  // with sequence parallelism the input is sharded over tp.
  const double sbh = static_cast<double>(m.seq) * static_cast<double>(l.micro_batch) * static_cast<double>(m.hidden);
  return sbh * elem_bytes(o.precision) / (l.sequence_parallel ? l.tp : 1.0);
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
    return weft_rank_memory(w, stage, 0);
  }
  if (m.climax()) return vit_stage_memory(m, l, o);  // one stage (plan/vit_shape.h)
  MemoryBreakdown r;
  r.stage = stage;
  const double e = elem_bytes(o.precision), t = l.tp;
  const GptDescription desc = stage_description(m, l, stage, n_layers);
  const double n_params = static_cast<double>(desc.rank_params().part);
  add_zero_states(r, n_params, l, o);

  // Activations: per layer-micro-batch stash, times the layer-micro-batches in flight.
  const double layers = static_cast<double>(n_layers);
  const double full = layer_stash_bytes(m, l, o);
  double per_layer = full;
  if (l.recompute == Recompute::kFull) {
    const double rec = l.recompute_layers < 0 ? layers : std::min<double>(l.recompute_layers, layers);
    Layout none = l;
    none.recompute = Recompute::kNone;
    const double kept = layer_stash_bytes(m, none, o);  // layers not recomputed keep everything
    per_layer = (rec * layer_checkpoint_bytes(m, l, o) + (layers - rec) * kept) / std::max(1.0, layers);
  }
  const int64_t mb = micro_batches(o.global_batch, l);
  r.activations = per_layer * in_flight(l, mb, stage, n_layers);
  const double sb = static_cast<double>(m.seq) * static_cast<double>(l.micro_batch);
  const double sbh = sb * static_cast<double>(m.hidden), sbf = sb * static_cast<double>(m.ffn);
  const double as2b = static_cast<double>(m.heads) * static_cast<double>(m.seq) * sb;
  const double rep = l.sequence_parallel ? t : 1.0;
  if (stage == l.pp - 1) {
    // The final LayerNorm input and output (kept for the head's backward), per micro-batch
    // in flight on this stage (Korthikanti et al. 2022 sec. 4.3: the output layer).
    const double in_flight_mb = in_flight(l, mb, stage, n_layers) / std::max(1.0, layers);
    r.activations += 2 * sbh * e / rep * in_flight_mb;
  }

  // Workspace: gradients of one layer's activations (residual stream, attention output,
  // QKV, MLP hidden: 3 sbh + 3 sbh/t + sbf/t elements, weft's Activations scratch), the
  // attention-score gradient when scores are materialised, the all-gathered input under sp.
  double ws = (3 * sbh / rep + 3 * sbh / t + sbf / t) * e;
  if (!o.flash_attention) ws += as2b * e / t;
  if (l.sequence_parallel) ws += sbh * e;
  if (l.recompute == Recompute::kFull) {
    Layout none = l;
    none.recompute = Recompute::kNone;
    ws += layer_stash_bytes(m, none, o);  // the layer being rematerialised
  } else if (l.recompute == Recompute::kSelective && !o.flash_attention) {
    ws += as2b * e / t;  // the recomputed attention scores of one layer
  }
  if (stage == l.pp - 1) {
    // Head logits of one micro-batch, s b V/t, in fp32 for the softmax cross-entropy
    // (Megatron-LM's vocab-parallel cross-entropy upcasts them).
    ws += sb * std::ceil(static_cast<double>(m.vocab) / t) * 4;
  }
  r.workspace = ws;

  // Communication buffers: two layers gathered at once under ZeRO-3 (the layer in use + the
  // prefetched one); the pipeline's send + receive, activations + their gradients.
  const double layer = static_cast<double>(desc.rank_params().layer);
  const double comm = comm_buffers(r, n_params, 0.0, layer, l.pp > 1 ? 4 * sbh * e / rep : 0.0, l, o);
  r.comm = comm;
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
