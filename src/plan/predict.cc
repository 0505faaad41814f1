#include "plan/predict.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.h"
#include "plan/comm_model.h"

namespace weft::plan {

Options Options::from_system(const System& s, Precision p, int64_t global_batch) {
  Options o;
  o.precision = p;
  o.global_batch = global_batch;
  o.flash_attention = s.defaults.flash_attention;
  o.dropout = s.defaults.dropout;
  o.fp32_grad_accumulation = s.defaults.fp32_grad_accumulation;
  o.overlap_dp = s.defaults.overlap_dp;
  o.pp_scatter_gather = s.defaults.pp_scatter_gather;
  o.memory_model = s.defaults.memory_model;
  return o;
}

MemoryOptions Options::memory() const {
  MemoryOptions m;
  m.precision = precision;
  m.global_batch = global_batch;
  m.fp32_grad_accumulation = fp32_grad_accumulation;
  m.dropout = dropout;
  m.flash_attention = flash_attention;
  m.dp_bucket_elements = dp_bucket_elements;
  m.memory_model = memory_model;
  return m;
}

namespace {

// Fraction of peak a matrix product of `flops` reaches: the measured curve (log-linear
// interpolation in FLOPs, clamped at its ends) or the device's constant efficiency.
double matmul_fraction(const Device& d, double flops) {
  const auto& c = d.matmul_curve;
  if (c.empty()) return d.matmul_efficiency;
  if (flops <= c.front().first) return c.front().second;
  if (flops >= c.back().first) return c.back().second;
  for (size_t i = 1; i < c.size(); ++i) {
    if (flops <= c[i].first) {
      const double x0 = std::log(c[i - 1].first), x1 = std::log(c[i].first), x = std::log(flops);
      const double w = (x - x0) / (x1 - x0);
      return c[i - 1].second + w * (c[i].second - c[i - 1].second);
    }
  }
  return c.back().second;
}

// Memory-bound operation: bytes over the memory bandwidth (roofline's slanted roof).
double memory_time(const Device& d, double bytes) { return bytes / d.memory_bandwidth + d.kernel_latency; }

// One (M x K) @ (K x N) product, `batch` times: 2 M N K FLOPs each; reads both operands and
// writes the result once (e bytes per element).
struct Gemm {
  double flops, bytes;
};
Gemm gemm(double batch, double M, double N, double K, double e) {
  return {2 * batch * M * N * K, e * batch * (M * K + K * N + M * N)};
}

// Per-layer costs for one micro-batch on one rank (independent of the stage).
struct LayerCost {
  double fwd = 0, bwd = 0;          // compute seconds
  double attn_core_fwd = 0;         // the part selective recompute redoes
  double flops_fwd = 0, flops_bwd = 0, flops_attn_core = 0;
  double tp_fwd = 0, tp_bwd = 0;    // tensor-parallel communication seconds
  double tp_recompute = 0;          // what a fully recomputed layer adds to tp_bwd
};

struct Context {
  const ModelShape& m;
  const System& sys;
  const Layout& l;
  const Options& o;
  double e = 2;
  LayerCost layer;
  double head_fwd = 0, head_bwd = 0, head_flops_fwd = 0, head_flops_bwd = 0, head_tp = 0;
  double emb_fwd = 0, emb_bwd = 0, emb_tp = 0;
  double p2p = 0;
};

void add_gemm(const Context& c, Gemm g, double& t, double& flops) {
  t += matmul_time(c.sys.device, c.o.precision, g.flops, g.bytes);
  flops += g.flops;
}

LayerCost layer_cost(Context& c) {
  const Device& d = c.sys.device;
  const ModelShape& m = c.m;
  const Layout& l = c.l;
  const double e = c.e, t = l.tp;
  const double s = static_cast<double>(m.seq), b = static_cast<double>(l.micro_batch);
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn), a = static_cast<double>(m.heads);
  const double N = s * b, dh = h / a, heads_local = a / t;
  const double rep = l.sequence_parallel ? t : 1.0;  // LayerNorm/residual regions: / t with sp
  LayerCost lc;
  // Matrix products of one layer (Megatron-LM column/row-parallel split: Shoeybi et al. 2019):
  // QKV (N x h) @ (h x 3h/t), attention projection (N x h/t) @ (h/t x h), MLP (N x h) @ (h x
  // f/t) and (N x f/t) @ (f/t x h).
  double tf = 0, ff = 0;
  add_gemm(c, gemm(1, N, 3 * h / t, h, e), tf, ff);
  add_gemm(c, gemm(1, N, h, h / t, e), tf, ff);
  add_gemm(c, gemm(1, N, f / t, h, e), tf, ff);
  add_gemm(c, gemm(1, N, h, f / t, e), tf, ff);
  // Attention core: scores Q K^T (b a/t products of (s x dh) @ (dh x s)) and the weighted
  // sum P V ((s x s) @ (s x dh)); 4 b s^2 h / t FLOPs forward (PaLM's 12 L h s per token
  // over forward + backward). Softmax reads and writes the scores.
  double tcore = 0, fcore = 0;
  if (c.o.flash_attention) {
    // FlashAttention (Dao et al. 2022): one fused kernel reading Q, K, V and writing O; the
    // scores never reach memory.
    Gemm g{4 * b * heads_local * s * s * dh, e * b * heads_local * 4 * s * dh};
    add_gemm(c, g, tcore, fcore);
  } else {
    add_gemm(c, gemm(b * heads_local, s, s, dh, e), tcore, fcore);
    add_gemm(c, gemm(b * heads_local, s, dh, s, e), tcore, fcore);
    tcore += memory_time(d, 2 * b * heads_local * s * s * e);  // softmax: read + write
    if (c.o.dropout) tcore += memory_time(d, b * heads_local * s * s * (2 * e + 1));
  }
  // Element-wise, memory-bound: two LayerNorms (read x, write y), GeLU (read, write), two
  // residual adds (read 2, write 1); with dropout, two dropouts (read, write, mask).
  double tew = 2 * memory_time(d, 2 * N * h * e / rep) + memory_time(d, 2 * N * f / t * e) +
               2 * memory_time(d, 3 * N * h * e / rep);
  if (c.o.dropout) tew += 2 * memory_time(d, N * h * (2 * e + 1) / rep);
  lc.fwd = tf + tcore + tew;
  lc.flops_fwd = ff + fcore;
  lc.attn_core_fwd = tcore;
  lc.flops_attn_core = fcore;
  // Backward: each product becomes two of the same size (input and weight gradients), twice
  // the forward FLOPs (Narayanan et al. 2021 sec. 3.5); FlashAttention's backward recomputes
  // the scores: 5 products instead of 4, 2.5x its forward (Dao 2023, FlashAttention-2).
  // Element-wise backward ops read the output gradient and the saved input: about 2x bytes.
  const double core_bwd_factor = c.o.flash_attention ? 2.5 : 2.0;
  lc.bwd = 2 * tf + core_bwd_factor * tcore + 2 * tew;
  lc.flops_bwd = 2 * ff + core_bwd_factor * fcore;

  // Tensor-parallel communication per layer: the calls of weft's layers, from the
  // communication model (plan/comm_model.h, tp_layer_comm: Shoeybi et al. 2019; Korthikanti
  // et al. 2022 sec. 4.2.2): forward 2 all-reduces of N h elements (sp: 2 all-gathers + 2
  // reduce-scatters of the same bytes), backward 2 more (sp: and the LayerNorm weights' 2
  // small all-reduces of 2h), a fully recomputed layer 1 more (sp: 2 all-gathers + 1
  // reduce-scatter). Priced at the storage precision's e bytes per element, as Megatron-LM
  // sends them (weft's own wires are fp32: see docs/communication.md).
  if (l.tp > 1) {
    const int64_t stride = axis_stride(l, c.o.rank_order, "tp");
    const double S = N * h * e;
    const TpLayerComm k = tp_layer_comm(l.sequence_parallel);
    auto time_of = [&](const TpLayerCalls& n) {
      return n.all_reduce * collective_time(c.sys, Collective::kAllReduce, l.tp, stride, S) +
             n.all_gather * collective_time(c.sys, Collective::kAllGather, l.tp, stride, S) +
             n.reduce_scatter * collective_time(c.sys, Collective::kReduceScatter, l.tp, stride, S) +
             n.small_all_reduce * collective_time(c.sys, Collective::kAllReduce, l.tp, stride, 2 * h * e);
    };
    lc.tp_fwd = time_of(k.forward);
    lc.tp_bwd = time_of(k.backward);
    lc.tp_recompute = time_of(k.recompute);
  }
  return lc;
}

struct StageCost {
  double comp_f = 0, comp_b = 0, tp_f = 0, tp_b = 0, flops = 0;
  double t_f() const { return comp_f + tp_f; }
  double t_b() const { return comp_b + tp_b; }
};

// One micro-batch on pipeline stage `stage`, which holds `layers` layers.
StageCost stage_cost(const Context& c, int stage, int64_t layers) {
  const Layout& l = c.l;
  const double n = static_cast<double>(layers);
  const LayerCost& lc = c.layer;
  StageCost sc;
  sc.comp_f = n * lc.fwd;
  sc.comp_b = n * lc.bwd;
  sc.tp_f = n * lc.tp_fwd;
  sc.tp_b = n * lc.tp_bwd;
  sc.flops = n * (lc.flops_fwd + lc.flops_bwd);
  // Recompute runs the forward again inside the backward (Chen et al. 2016; Korthikanti et
  // al. 2022 sec. 5): full recompute the whole layer (with its tp collectives), selective
  // only the attention core.
  if (l.recompute == Recompute::kFull) {
    const double r = l.recompute_layers < 0 ? n : std::min<double>(l.recompute_layers, n);
    sc.comp_b += r * lc.fwd;
    sc.tp_b += r * lc.tp_recompute;
    sc.flops += r * lc.flops_fwd;
  } else if (l.recompute == Recompute::kSelective && !c.o.flash_attention) {
    sc.comp_b += n * lc.attn_core_fwd;
    sc.flops += n * lc.flops_attn_core;
  }
  if (stage == 0) {
    sc.comp_f += c.emb_fwd;
    sc.comp_b += c.emb_bwd;
    sc.tp_f += c.emb_tp;
  }
  if (stage == l.pp - 1) {
    sc.comp_f += c.head_fwd;
    sc.comp_b += c.head_bwd;
    sc.tp_b += c.head_tp;
    sc.flops += c.head_flops_fwd + c.head_flops_bwd;
  }
  return sc;
}

}  // namespace

double matmul_time(const Device& d, Precision p, double flops, double bytes) {
  // Roofline (Williams et al. 2009): the larger of the compute time at the achievable rate
  // and the memory time, plus the kernel's fixed latency.
  const double rate = d.peak_flops(p) * matmul_fraction(d, flops);
  return std::max(flops / rate, bytes / d.memory_bandwidth) + d.kernel_latency;
}

int64_t axis_stride(const Layout& l, const std::string& order, const std::string& axis) {
  std::vector<std::string> names;
  std::stringstream ss(order);
  std::string tok;
  while (std::getline(ss, tok, '-')) names.push_back(tok);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<std::string>{"dp", "pp", "tp"}) {
    throw_input("rank order '{}' must be a permutation of tp, dp, pp joined by '-' (e.g. tp-dp-pp)", order);
  }
  int64_t stride = 1;
  for (const auto& n : names) {
    if (n == axis) return stride;
    stride *= n == "tp" ? l.tp : n == "dp" ? l.dp : l.pp;
  }
  throw_input("unknown axis '{}' (known: tp, dp, pp)", axis);
}

double collective_time(const System& sys, Collective c, int64_t n, int64_t stride, double bytes) {
  if (n <= 1 || bytes <= 0) return 0;
  // Ring algorithms (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009): all-reduce
  // takes 2(n-1) steps and sends 2(n-1)/n of the buffer per rank; reduce-scatter and
  // all-gather (n-1) steps and (n-1)/n; a send/receive one step and the whole buffer.
  const double nn = static_cast<double>(n);
  double steps = 1, traffic = bytes;
  switch (c) {
    case Collective::kAllReduce: steps = 2 * (nn - 1); traffic = 2 * (nn - 1) / nn * bytes; break;
    case Collective::kReduceScatter:
    case Collective::kAllGather: steps = nn - 1; traffic = (nn - 1) / nn * bytes; break;
    case Collective::kSendRecv: break;
  }
  // Members of the group per unit of each level: k_l = min(n, max(1, U_l / stride)). The group
  // crosses level l when k_l > k_{l-1}. A ring leaves each unit of level l-1 once, so the
  // k_{l-1} members there share one crossing, and every device of the unit (all groups of the
  // axis communicate at once) brings its own per-device bandwidth: the crossing runs at
  // bandwidth_l x k_{l-1}. The slowest crossing sets the time; each step pays the latency of
  // the slowest level used.
  double t_bw = 0, alpha = 0;
  int64_t k_prev = 1;
  for (size_t i = 0; i < sys.levels.size(); ++i) {
    const int64_t U = sys.unit_devices(i);
    const int64_t k = std::min<int64_t>(n, std::max<int64_t>(1, U / stride));
    const bool top = i + 1 == sys.levels.size();
    const int64_t k_here = top ? n : k;
    if (k_here > k_prev) {
      const double bw = sys.levels[i].bandwidth * (c == Collective::kSendRecv ? 1.0 : static_cast<double>(k_prev));
      t_bw = std::max(t_bw, traffic / bw);
      alpha = std::max(alpha, sys.levels[i].latency);
    }
    k_prev = k_here;
    if (k_prev >= n) break;
  }
  return steps * alpha + t_bw;
}

double pipeline_time(PipeSchedule s, int p, int64_t m, int v, double t_max, double t_sum, double t_p2p) {
  const double md = static_cast<double>(m), P = p, V = v;
  if (p <= 1) return md * t_max;
  // Narayanan et al. 2021 sec. 2.2 (bubble (p - 1)/m, interleaved (p - 1)/(v m)), with the
  // transfers of parallel/pp/schedule.h's simulator (the tests compare the two):
  // GPipe: (m - 1) t_max + sum_s t_s + 2 (p - 1) t_p2p: forwards stream, transfers overlap.
  // 1F1B: each steady-state round waits for a round trip to the neighbour stage, so every
  //   micro-batch also pays 2 t_p2p: (m - 1)(t_max + 2 t_p2p) + sum_s t_s + 2 (p - 1) t_p2p.
  // Interleaved: the fill/drain shrinks to 1/v: m t_max + (sum_s t_s - t_max)/v; the
  //   transfers hide in the steady state (a stage has other chunks' work queued), only the
  //   2 (p v - 1) hops of the first micro-batch's forward and last backward through the p v
  //   chunks remain.
  switch (s) {
    case PipeSchedule::kGpipe:
      return (md - 1) * t_max + t_sum + 2 * (P - 1) * t_p2p;
    case PipeSchedule::k1F1B:
      return (md - 1) * (t_max + 2 * t_p2p) + t_sum + 2 * (P - 1) * t_p2p;
    case PipeSchedule::kInterleaved:
      return md * t_max + (t_sum - t_max) / V + 2 * (P * V - 1) * t_p2p;
  }
  return 0;
}

Prediction predict(const ModelShape& m, const System& sys, const Layout& l, const Options& o) {
  m.validate();
  check_layout(layout_candidate(m, l, o.global_batch, o.precision));
  axis_stride(l, o.rank_order, "tp");  // validates the order
  return predict_unchecked(m, sys, l, o);
}

Prediction predict_unchecked(const ModelShape& m, const System& sys, const Layout& l, const Options& o) {
  Context c{m, sys, l, o, 2, {}, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  c.e = elem_bytes(o.precision);
  const Device& d = sys.device;
  const double e = c.e, t = l.tp;
  const double s = static_cast<double>(m.seq), b = static_cast<double>(l.micro_batch);
  const double h = static_cast<double>(m.hidden), N = s * b;
  const double rep = l.sequence_parallel ? t : 1.0;
  const double vocab_local = std::ceil(static_cast<double>(m.vocab) / t);
  c.layer = layer_cost(c);
  // Embedding (stage 0): gather rows + add positions (memory-bound); the vocab-parallel
  // embedding sums its partial rows over tp (one all-reduce of N h, Shoeybi et al. 2019).
  c.emb_fwd = memory_time(d, 3 * N * h * e);
  c.emb_bwd = memory_time(d, 3 * N * h * e);
  const int64_t tp_stride = l.tp > 1 ? axis_stride(l, o.rank_order, "tp") : 1;
  if (l.tp > 1) c.emb_tp = collective_time(sys, Collective::kAllReduce, l.tp, tp_stride, N * h * e);
  // Head (last stage): final LayerNorm, logits (N x h) @ (h x V/t), softmax cross-entropy
  // over the vocabulary shard in fp32 (read logits, write probabilities/gradients), and in
  // the backward the two products of the head; the vocab-parallel loss all-reduces 3 values
  // per token, the head's input gradient N h elements.
  {
    Gemm g = gemm(1, N, vocab_local, h, e);
    const double ce = memory_time(d, 3 * N * vocab_local * 4);
    c.head_fwd = memory_time(d, 2 * N * h * e / rep) + matmul_time(d, o.precision, g.flops, g.bytes) + ce;
    c.head_bwd = memory_time(d, 4 * N * h * e / rep) + 2 * matmul_time(d, o.precision, g.flops, g.bytes) + ce;
    c.head_flops_fwd = g.flops;
    c.head_flops_bwd = 2 * g.flops;
    if (l.tp > 1) {
      c.head_tp = collective_time(sys, Collective::kAllReduce, l.tp, tp_stride, 3 * N * 4) +
                  collective_time(sys, Collective::kAllReduce, l.tp, tp_stride, N * h * e);
    }
  }
  // Point-to-point between stages: the activations of one micro-batch, one send per
  // micro-batch per direction. Each tp rank sends its shard under sp; without sp, with the
  // scatter-gather (Narayanan et al. 2021 sec. 4.1; Megatron-LM and weft), its 1/t slice of
  // the replicated activations, all-gathered over tp by the receiver, else all of them.
  if (l.pp > 1) {
    const int64_t pp_stride = axis_stride(l, o.rank_order, "pp");
    const bool scatter = o.pp_scatter_gather && l.tp > 1 && !l.sequence_parallel;
    c.p2p = collective_time(sys, Collective::kSendRecv, l.pp, pp_stride, N * h * e / (scatter ? t : rep));
    if (scatter) {
      c.p2p += collective_time(sys, Collective::kAllGather, l.tp, axis_stride(l, o.rank_order, "tp"), N * h * e);
    }
  }

  Prediction p;
  p.layout = l;
  const int64_t mb = micro_batches(o.global_batch, l);
  p.micro_batches = mb;
  const double md = static_cast<double>(mb);

  // Every stage's cost, its layers from the trainer's partition (uneven when L % (p v) != 0
  // or the head is costly): the slowest sets t_max, all of them t_sum.
  const std::vector<int64_t> layers = stage_layer_counts(m, l);
  double sum_t = 0, max_t = 0, hw_flops = 0;
  StageCost slow;
  for (int s = 0; s < l.pp; ++s) {
    const StageCost sc = stage_cost(c, s, layers[static_cast<size_t>(s)]);
    sum_t += sc.t_f() + sc.t_b();
    hw_flops += sc.flops;
    if (sc.t_f() + sc.t_b() > max_t) {
      max_t = sc.t_f() + sc.t_b();
      slow = sc;
    }
  }
  p.t_forward = slow.t_f();
  p.t_backward = slow.t_b();
  p.t_p2p = c.p2p;

  const double pipe = pipeline_time(l.schedule, l.pp, mb, l.virtual_stages, max_t, sum_t, c.p2p);
  p.time.compute = md * (slow.comp_f + slow.comp_b);
  p.time.tp_comm = md * (slow.tp_f + slow.tp_b);
  p.time.pp_bubble = std::max(0.0, pipe - md * max_t);

  // Data parallel (Rajbhandari et al. 2020 sec. 7: ZeRO 1/2 move the same 2 Psi as an
  // all-reduce, ZeRO 3 1.5x that, per micro-batch when gradients accumulate), with weft's
  // calls from the communication model (dp_step_comm): ZeRO 0/1 reduce once per step (the
  // last micro-batch), ZeRO 2 reduce-scatters every micro-batch, ZeRO 3 gathers fewer than
  // twice per micro-batch (what its buffers still hold is not gathered again).
  const int stage_big = stage_params_per_rank(m, l, 0) >= stage_params_per_rank(m, l, l.pp - 1) ? 0 : l.pp - 1;
  const double psi = stage_params_per_rank(m, l, stage_big);
  if (l.dp > 1) {
    const int64_t dp_stride = axis_stride(l, o.rank_order, "dp");
    const double g = (o.precision == Precision::kFp32 || o.fp32_grad_accumulation) ? 4 : 2;
    const double window = o.overlap_dp ? slow.t_b() : 0.0;  // the last micro-batch's backward
    if (l.zero == 0) {
      p.time.dp_exposed = std::max(0.0, collective_time(sys, Collective::kAllReduce, l.dp, dp_stride, psi * g) - window);
    } else if (l.zero <= 2) {
      const double rs = collective_time(sys, Collective::kReduceScatter, l.dp, dp_stride, psi * g);
      const double ag = collective_time(sys, Collective::kAllGather, l.dp, dp_stride, psi * e);
      // ZeRO 2: every micro-batch's reduce-scatter against its own backward.
      const double reductions = l.zero == 2 ? md : 1.0;
      p.time.dp_exposed = reductions * std::max(0.0, rs - window) + ag;
    } else {
      // Every micro-batch gathers the parameters (forward, and again in the backward what
      // the buffers no longer hold) and reduce-scatters its gradients; prefetching hides them
      // behind that micro-batch.
      const DpStepComm k = dp_step_comm(3, static_cast<int>(m.layers) + 2, DataParallelConfig{}.prefetch);
      const double per_mb = k.all_gather * collective_time(sys, Collective::kAllGather, l.dp, dp_stride, psi * e) +
                            k.reduce_scatter * collective_time(sys, Collective::kReduceScatter, l.dp, dp_stride, psi * g);
      const double hide = o.overlap_dp ? slow.t_f() + slow.t_b() : 0.0;
      p.time.dp_exposed = md * std::max(0.0, per_mb - hide);
    }
  }
  // Optimizer: AdamW over this rank's shard, memory-bound. Mixed precision reads the fp32
  // gradient, master weight, m, v (16 bytes) and writes master, m, v and the 16-bit copy (14);
  // fp32 reads 16 and writes 12.
  const double shard = psi / (l.zero >= 1 ? static_cast<double>(l.dp) : 1.0);
  p.time.optimizer = shard * (o.precision == Precision::kFp32 ? 28.0 : 30.0) / d.memory_bandwidth;
  p.time.total = p.time.compute + p.time.tp_comm + p.time.pp_bubble + p.time.dp_exposed + p.time.optimizer;
  p.step_time_s = p.time.total;

  const double tokens = static_cast<double>(o.global_batch) * s;
  p.tokens_per_s = tokens / p.step_time_s;
  p.model_flops = m.model_flops_per_token() * tokens;
  p.hardware_flops = hw_flops * md * static_cast<double>(l.dp) * t;
  const double peak_all = d.peak_flops(o.precision) * static_cast<double>(l.world());
  p.mfu = p.model_flops / (p.step_time_s * peak_all);
  p.hfu = p.hardware_flops / (p.step_time_s * peak_all);
  p.memory = worst_stage_memory(m, l, o.memory());
  p.fits = p.memory.total <= d.memory_bytes;
  return p;
}

}  // namespace weft::plan
