#include "plan/vit_shape.h"

#include <algorithm>

#include "core/error.h"
#include "model/family.h"

namespace weft::plan {

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

MemoryBreakdown vit_stage_memory(const ModelShape& m, const Layout& l, const MemoryOptions& o) {
  MemoryBreakdown r;
  const std::unique_ptr<ModelDescription> desc = m.family->describe(part_spec(m.config(), m.seq, l, StageSpec{}));
  const ModelDescription& d = *desc;
  const StoreGroups parts = d.store_groups();
  const double e = elem_bytes(o.precision), n_params = static_cast<double>(parts.n);
  add_zero_states(r, n_params, l, o);

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

  // Communication buffers (plan/memory.cc): the front (group 0) stays gathered through the step
  // under ZeRO-3; a block (or the back, whichever is larger) in use and the prefetched one.
  const double comm =
      comm_buffers(r, n_params, static_cast<double>(parts.g0), static_cast<double>(parts.max_other), 0.0, l, o);
  r.comm = comm;
  r.sum();
  return r;
}

}  // namespace weft::plan
