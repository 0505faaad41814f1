#include "plan/vit_shape.h"

#include <algorithm>

#include "core/error.h"
#include "model/climax/climax_config.h"
#include "plan/weft_memory.h"

namespace weft::plan {

ModelShape vit_shape(const ModelConfig& c) {
  ModelShape m;
  m.name = c.name;
  m.family = &climax_family();
  m.layers = c.n_layer;
  m.hidden = c.n_embd;
  m.heads = c.n_head;
  m.ffn = c.ffn;
  m.vars = c.vars;
  m.img_h = c.img_h;
  m.img_w = c.img_w;
  m.patch = c.patch;
  m.decoder_depth = c.decoder_depth;
  m.seq = m.context = c.num_patches();
  m.vocab = 0;
  return m;
}

ModelConfig vit_config(const ModelShape& m) {
  ModelConfig c;
  c.name = m.name;
  c.family = &climax_family();
  c.n_layer = static_cast<int>(m.layers);
  c.n_head = static_cast<int>(m.heads);
  c.n_embd = static_cast<int>(m.hidden);
  c.ffn = static_cast<int>(m.ffn);
  c.vars = static_cast<int>(m.vars);
  c.img_h = static_cast<int>(m.img_h);
  c.img_w = static_cast<int>(m.img_w);
  c.patch = static_cast<int>(m.patch);
  c.decoder_depth = static_cast<int>(m.decoder_depth);
  c.n_ctx = static_cast<int>(m.context);
  c.vocab_size = c.padded_vocab = 0;
  return c;
}

void validate_vit(const ModelShape& m) {
  vit_config(m).validate();  // sizes, hidden % heads, the grid in patches, n_ctx = the patches
  const int64_t L = vit_config(m).num_patches();
  if (m.seq != L) {
    throw_input("model '{}': a ClimaX model's sequence is its {} patches ({}x{} grid, patch {}), not {}", m.name, L,
                m.img_h, m.img_w, m.patch, m.seq);
  }
}

ClimaxDescription vit_whole_model(const ModelShape& m) {
  ClimaxRunSpec s;
  s.model = m.config();
  return ClimaxDescription(s);
}

ClimaxDescription describe_vit(const ModelConfig& mc, const Layout& l) {
  ClimaxRunSpec s;
  s.model = mc;
  s.B = l.micro_batch;
  s.tp = l.tp;
  s.recompute = l.recompute;
  s.recompute_layers = l.recompute_layers;
  s.training = true;
  return ClimaxDescription(s);
}

VitAggregationComm vit_aggregation_comm(const ClimaxDescription& d) {
  VitAggregationComm c;
  c.forward = d.tokens() * d.spec().model.n_embd;
  c.token_grad = d.aggregation_grad_elems();
  c.query_grad = d.spec().model.n_embd;
  return c;
}

VitStoreParts vit_store_parts(const ClimaxDescription& d) {
  const int t = d.spec().tp;
  VitStoreParts p;
  p.n = d.rank_params();
  p.front = d.front_params(t);
  p.max_other = std::max<int64_t>({1, d.spec().model.n_layer > 0 ? d.layer_params(t) : 0, d.back_params()});
  return p;
}

MemoryBreakdown vit_stage_memory(const ModelShape& m, const Layout& l, const MemoryOptions& o) {
  if (o.memory_model == "weft") {
    // weft's own buffers, exact for its CPU backend (plan/weft_memory.h, its ClimaX branch).
    WeftRunShape w;
    w.model = m.config();
    w.seq = m.seq;
    w.micro_batches = micro_batches(o.global_batch, l);
    w.layout = l;
    w.master_weights = o.precision != Precision::kFp32;
    return weft_rank_memory(w, 0, 0);
  }
  MemoryBreakdown r;
  const ClimaxDescription d = describe_vit(m.config(), l);
  const VitStoreParts parts = vit_store_parts(d);
  // ZeRO shards over dp_shard (HSDP; all of dp without replicas), as plan/memory.cc.
  const double e = elem_bytes(o.precision), dp = l.dp_shard(), n_params = static_cast<double>(parts.n);
  const BytesPerParam bpp = bytes_per_param(o);
  // ZeRO partitioning over the dp_shard ranks (Rajbhandari et al. 2020 sec. 5.1), as plan/memory.cc.
  r.params = n_params * bpp.params / (l.zero >= 3 ? dp : 1.0);
  r.grads = n_params * bpp.grads / (l.zero >= 2 ? dp : 1.0);
  r.optimizer = n_params * bpp.optimizer / (l.zero >= 1 ? dp : 1.0);

  // Activations and workspace: the model's own elements at e bytes. FlashAttention (Dao et al.
  // 2022) keeps a layer's fp32 log-sum-exp instead of its B NH/t L^2 probabilities, in the
  // stash of every layer that is not recomputed and in the rematerialised layer.
  const double L = static_cast<double>(m.seq), B = static_cast<double>(l.micro_batch);
  const double probs = B * static_cast<double>(m.heads / l.tp) * L * L, lse = B * static_cast<double>(m.heads / l.tp) * L;
  const double kept_layers = static_cast<double>(m.layers - d.recomputed_layers());
  double act = static_cast<double>(d.stash_elems()) * e, ws = static_cast<double>(d.workspace_elems()) * e;
  if (o.flash_attention) {
    act -= kept_layers * (probs * e - lse * 4);
    if (d.recomputed_layers() > 0) ws -= probs * e - lse * 4;
  }
  r.activations = act;
  r.workspace = ws;

  // Communication buffers, as plan/memory.cc's for one stage.
  double comm = 0;
  if (l.dp > 1 && l.zero <= 2 && o.dp_bucket_elements > 0) {
    const double grad_elem = (o.precision == Precision::kFp32 || o.fp32_grad_accumulation) ? 4 : 2;
    comm += std::min(o.dp_bucket_elements, n_params) * grad_elem;
  }
  if (l.dp_shard() > 1 && l.zero == 3) {
    // The front (group 0) stays gathered through the step; a block (or the back, whichever is
    // larger) in use and the prefetched one.
    const double slot = static_cast<double>(parts.max_other);
    comm += (static_cast<double>(parts.front) + 2 * slot) * bpp.params;
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
  if (l.dp > 1 && l.compression.error_feedback && !l.compression.dp.off()) comm += 4 * n_params;
  r.comm = comm;
  r.sum();
  return r;
}

}  // namespace weft::plan
