#include "plan/vit_compute.h"

#include "plan/kernel_model.h"
#include "plan/vit_shape.h"

namespace weft::plan {

namespace {

struct Gemm {
  double fwd = 0, dx = 0, dw = 0, flops = 0;
};

// A product (m x k) @ (k x n), `batch` times: its forward and the two backward products.
Gemm gemm(const Device& d, Precision p, double e, GemmShape g) {
  return {gemm_time(d, p, g, e), gemm_time(d, p, GemmShape{g.m, g.k, g.n, g.batch}, e),
          gemm_time(d, p, GemmShape{g.k, g.n, g.m, g.batch}, e), g.flops()};
}

}  // namespace

VitEndsCost vit_ends_cost(const ModelShape& m, const System& sys, const Layout& l, const Options& o) {
  const Device& d = sys.device;
  const Precision p = o.precision;
  const double e = elem_bytes(p), t = l.tp;
  const ClimaxDescription desc = describe_vit(m.config(), l);
  const double N = static_cast<double>(desc.tokens()), C = static_cast<double>(m.hidden), Cl = C / t;
  const ModelConfig& mc = desc.spec().model;
  const double V = static_cast<double>(mc.vars), P2 = static_cast<double>(mc.patch * mc.patch), K = V * P2;
  const double NHl = static_cast<double>(m.heads) / t, D = static_cast<double>(mc.decoder_depth);
  VitEndsCost r;

  // Front, forward: V patch embeddings (N, p^2) x (p^2, C) + the variable embedding; k|v of the
  // V N tokens (column-parallel), the query (one row); the query attention; the lead-time and
  // position base; out_proj (row-parallel) + its bias and the base.
  const Gemm patch = gemm(d, p, e, GemmShape{N, C, P2, V});
  const Gemm kv = gemm(d, p, e, GemmShape{V * N, 2 * Cl, C});
  const Gemm q = gemm(d, p, e, GemmShape{1, Cl, C});
  const Gemm out = gemm(d, p, e, GemmShape{N, C, Cl});
  const double att_bytes = (V * N * 2 * Cl + Cl + N * NHl * V + N * Cl) * e;
  r.front_fwd = patch.fwd + memory_time(d, 2 * V * N * C * e) + kv.fwd + q.fwd + memory_time(d, att_bytes) +
                memory_time(d, 2 * N * C * e) + out.fwd + memory_time(d, 3 * N * C * e);
  // Backward: out_proj's two products, the base's gradients (column sums), the attention's
  // backward (reads k|v, the probabilities and the output gradient, writes dk|v), k|v's and the
  // query's two products, the variable embedding's column sums and the patch embeddings' dW.
  r.front_bwd = out.dx + out.dw + memory_time(d, 2 * N * C * e) + memory_time(d, 2 * att_bytes) + kv.dx + kv.dw + q.dx +
                q.dw + memory_time(d, V * N * C * e) + patch.dw;
  const double att_flops = 4 * N * V * Cl;
  r.front_flops = patch.flops * 2 + (kv.flops + q.flops + out.flops) * 3 + att_flops * 3;

  // Back, replicated: final LayerNorm, decoder_depth x (Linear(C, C) + GELU), Linear(C, K), the
  // weighted MSE (reads the predictions, targets and weights; writes the gradient).
  const Gemm dec = gemm(d, p, e, GemmShape{N, C, C});
  const Gemm head = gemm(d, p, e, GemmShape{N, K, C});
  r.back_fwd = memory_time(d, 2 * N * C * e) + D * (dec.fwd + memory_time(d, 2 * N * C * e)) + head.fwd +
               memory_time(d, 4 * N * K * e);
  r.back_bwd = head.dx + head.dw + D * (dec.dx + dec.dw + memory_time(d, 3 * N * C * e)) + memory_time(d, 4 * N * C * e);
  r.back_flops = 3 * (D * dec.flops + head.flops);

  // Tensor parallelism: the aggregation's all-reduces (forward out_proj; backward the tokens'
  // V N C gradient and the query's C).
  if (l.tp > 1) {
    const VitAggregationComm a = vit_aggregation_comm(desc);
    const int64_t stride = axis_stride(l, o.rank_order, "tp");
    const CodecSpec& codec = l.compression.tp;
    auto ar = [&](const CodecSpec& c, int64_t elems) {
      return price_call(sys, c, Collective::kAllReduce, l.tp, stride, static_cast<double>(elems) * e, e);
    };
    r.tp_forward.emplace_back(ar(codec, a.forward), 1.0);
    r.tp_backward.emplace_back(ar(codec, a.token_grad), 1.0);
    r.tp_backward.emplace_back(ar(CodecSpec{}, a.query_grad), 1.0);
  }
  return r;
}

}  // namespace weft::plan
