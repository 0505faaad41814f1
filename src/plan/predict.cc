#include "plan/predict.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/model_capabilities.h"
#include "model/family.h"
#include "model/params.h"
#include "plan/comm_model.h"
#include "plan/compression.h"
#include "plan/kernel_model.h"
#include "plan/scale_model.h"
#include "plan/zeropp.h"

namespace weft::plan {

Options Options::from_system(const System& s, Precision p, int64_t global_batch) {
  Options o;
  o.precision = p;
  o.global_batch = global_batch;
  o.flash_attention = s.defaults.flash_attention;
  o.dropout = s.defaults.dropout;
  o.attention_16 = s.defaults.attention_16;
  o.native_bf16 = s.device.native_bf16;
  o.fp32_grad_accumulation = s.defaults.fp32_grad_accumulation;
  o.overlap_dp = s.defaults.overlap_dp;
  o.pp_scatter_gather = s.defaults.pp_scatter_gather;
  o.memory_model = s.defaults.memory_model;
  o.tp_comm = s.defaults.tp_comm;
  o.pp_p2p_overlap = s.defaults.pp_p2p_overlap;
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
  // weft's backends read bf16 tensors in place only with --matmul fast and native products.
  m.native_products = native_bf16 && matmul == MatmulMode::kFast && precision == Precision::kBf16;
  return m;
}

namespace {

// Compute classes of `weft plan --explain`.
enum OpClass { kMatmul, kAttention, kElementwise, kRecompute, kEmbedding, kHead, kOpClasses };
constexpr const char* kOpClassName[kOpClasses] = {
    "matrix products (QKV, projection, MLP)", "attention core", "element-wise (LayerNorm, GELU, residual, dropout)",
    "recomputed forward", "", ""};  // the front and back: the family's words (ModelCapabilities)

// Bytes and codec seconds of some collectives of one kind of traffic (AxisTraffic without its
// name, for the per-layer and per-stage sums).
struct Flow {
  double raw = 0, wire = 0, codec_s = 0;
  double calls = 0;  // collectives (each a synchronisation of its group)
  void add(double raw_bytes, double wire_bytes, double codec_seconds, double n) {
    raw += n * raw_bytes;
    wire += n * wire_bytes;
    codec_s += n * codec_seconds;
    calls += n;
  }
  void add(const PricedCall& c, double n) { add(c.raw_bytes, c.wire_bytes, c.codec_s, n); }
  void add(const Flow& f, double times) {
    raw += times * f.raw;
    wire += times * f.wire;
    codec_s += times * f.codec_s;
    calls += times * f.calls;
  }
};

AxisTraffic traffic(const CodecSpec& c, const Flow& f) { return AxisTraffic{c.name(), f.raw, f.wire, f.codec_s}; }

// Per-layer costs for one micro-batch on one rank (independent of the stage).
struct LayerCost {
  double gemm_f = 0, gemm_b = 0;    // the four products; backward: input + weight gradients
  double core_f = 0, core_b = 0;    // attention core
  double ew_f = 0, ew_b = 0;        // memory-bound element-wise
  double flops_fwd = 0, flops_bwd = 0, flops_attn_core = 0;
  double tp_fwd = 0, tp_bwd = 0;    // tensor-parallel communication seconds
  double tp_recompute = 0;          // what a fully recomputed layer adds to tp_bwd
  Flow tp_flow_f, tp_flow_b, tp_flow_r;  // their tp traffic (forward, backward, recompute)
  double fwd() const { return gemm_f + core_f + ew_f; }
  double bwd() const { return gemm_b + core_b + ew_b; }
};

struct Context {
  const ModelShape& m;
  const System& sys;
  const Layout& l;
  const Options& o;
  double e = 2;
  // Bytes per element of the tensor-parallel sums (all-reduces, reduce-scatters): the storage
  // precision's, as Megatron-LM sends them ([defaults] tp_comm = "megatron"), or where weft's own
  // calls are priced (tp_comm = "weft") the residual stream's (weft's sums are of its dtype,
  // parallel/tp/mappings.h: 16-bit for GPT, fp32 for ClimaX). The all-gathers (sequence-parallel
  // LayerNorm rows and gradient rows, the pipeline's scatter-gather) move the tensors as
  // stored (e).
  double tp_e = 2;
  // Columns of the fused q, k, v product and of the MLP's first (model/config.h: 3h and f for
  // GPT-2's block; h + 2 kv with grouped-query attention, 2f with SwiGLU).
  int64_t qkv_width = 0, fc_width = 0;
  // This rank's columns of that product (qkv_width / t, or with fewer kv heads than tp ranks
  // h / t + 2 head sizes: ModelConfig::qkv_width_local), and the elements of the all-reduce of
  // those replicated kv columns' gradients each layer's backward makes (0: none).
  double qkv_local = 0, kv_sum = 0;
  double norm_weights = 2;  // a norm's weights and bias per hidden element (RMSNorm: 1, no bias)
  // The MLP's activation as the device's measured function rates name it (model/config.h's
  // mlp_name: "gelu", "gelu_exact"; its backward + "_backward"); a name without a rate (a GPU's,
  // SwiGLU's) is priced by its bytes.
  std::string mlp_function = "gelu";
  bool tied_head = true;    // ModelConfig::tied_head: the order of ZeRO-3's gathers
  LayerCost layer{};
  // The front's and the back's seconds of one micro-batch (forward, backward), their FLOPs
  // (both passes), their tp collectives' seconds (forward, backward) and traffic.
  double emb_fwd = 0, emb_bwd = 0, emb_flops = 0, emb_tp = 0, emb_tp_b = 0;
  double head_fwd = 0, head_bwd = 0, head_flops = 0, head_tp = 0, head_tp_b = 0;
  Flow emb_flow{}, head_flow{};
  double p2p = 0;
  Flow p2p_send{}, p2p_gather{};
  double positions_per_sample = 0;  // ModelDescription::mean_positions of a micro-batch / its samples  // one transfer: the send (pp codec); with scatter-gather the tp all-gather
};

// A product's forward, and its backward as the two products of the same FLOPs with their own
// shapes: dX = dY W^T (m x k, inner n) and dW = X^T dY (k x n, inner m).
struct GemmCost {
  double fwd = 0, bwd = 0, flops = 0;
};
GemmCost gemm_cost(const Context& c, GemmShape g, Precision p) {
  const Device& d = c.sys.device;
  GemmCost r;
  r.fwd = gemm_time(d, p, g, c.e);
  r.bwd = gemm_time(d, p, GemmShape{g.m, g.k, g.n, g.batch, GemmTrans::kNT}, c.e) +
          gemm_time(d, p, GemmShape{g.k, g.n, g.m, g.batch, GemmTrans::kTN}, c.e);
  r.flops = g.flops();
  return r;
}

void add(LayerCost& lc, const GemmCost& g, double& f, double& b) {
  f += g.fwd;
  b += g.bwd;
  lc.flops_fwd += g.flops;
}

// The attention core of one layer: forward and backward seconds; FLOPs into lc.
void attention_core(const Context& c, LayerCost& lc) {
  const Device& d = c.sys.device;
  const double e = c.e, s = static_cast<double>(c.m.seq), b = static_cast<double>(c.l.micro_batch);
  const double h = static_cast<double>(c.m.hidden), a = static_cast<double>(c.m.heads);
  const double dh = h / a, heads_local = a / c.l.tp;
  // Scores Q K^T (b a/t products of (s x dh) @ (dh x s)) and the weighted sum P V; 4 b s^2 h/t
  // FLOPs forward (PaLM's 12 L h s per token over forward + backward), as Megatron counts.
  const double flops = 4 * b * heads_local * s * s * dh;
  lc.flops_attn_core = flops;
  lc.flops_fwd += flops;
  if (c.o.flash_attention) {
    // FlashAttention (Dao et al. 2022, Dao 2023): one fused kernel each way; the scores never
    // reach memory; the backward recomputes them (2.5x the forward's FLOPs).
    // A ClimaX block's attention is bidirectional: no masked half to skip.
    const bool causal = c.m.family->capabilities().causal_attention;
    lc.core_f = flash_attention_time(d, c.o.attention_precision(), flops, false, causal);
    lc.core_b = flash_attention_time(d, c.o.attention_precision(), flops, true, causal);
    return;
  }
  const GemmCost qk = gemm_cost(c, GemmShape{s, s, dh, b * heads_local}, c.o.attention_precision());
  const GemmCost pv = gemm_cost(c, GemmShape{s, dh, s, b * heads_local}, c.o.attention_precision());
  double soft = memory_time(d, 2 * b * heads_local * s * s * e);  // softmax: read + write
  if (c.o.dropout) soft += memory_time(d, b * heads_local * s * s * (2 * e + 1));
  lc.core_f = qk.fwd + pv.fwd + soft;
  lc.core_b = qk.bwd + pv.bwd + 2 * soft;
}

LayerCost layer_cost(Context& c) {
  const Device& d = c.sys.device;
  const ModelShape& m = c.m;
  const Layout& l = c.l;
  const double e = c.e, t = l.tp;
  const double s = static_cast<double>(m.seq), b = static_cast<double>(l.micro_batch);
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn);
  const double N = s * b;
  const double rep = l.sequence_parallel ? t : 1.0;  // LayerNorm/residual regions: / t with sp
  LayerCost lc;
  // Matrix products of one layer (Megatron-LM column/row-parallel split: Shoeybi et al. 2019):
  // QKV (N x h) @ (h x 3h/t), attention projection (N x h/t) @ (h/t x h), MLP (N x h) @ (h x
  // f/t) and (N x f/t) @ (f/t x h).
  // The decoder variants widen the products (model/config.h's BlockOptions): QKV = h + 2 kv
  // (grouped-query attention), the MLP's first product 2f (SwiGLU's gate and up).
  const double qkv = static_cast<double>(c.qkv_width), fc = static_cast<double>(c.fc_width);
  add(lc, gemm_cost(c, GemmShape{N, c.qkv_local > 0 ? c.qkv_local : qkv / t, h}, c.o.product_precision()), lc.gemm_f,
      lc.gemm_b);
  add(lc, gemm_cost(c, GemmShape{N, h, h / t}, c.o.product_precision()), lc.gemm_f, lc.gemm_b);
  add(lc, gemm_cost(c, GemmShape{N, fc / t, h}, c.o.product_precision()), lc.gemm_f, lc.gemm_b);
  add(lc, gemm_cost(c, GemmShape{N, h, f / t}, c.o.product_precision()), lc.gemm_f, lc.gemm_b);
  attention_core(c, lc);
  // Element-wise, memory-bound: two LayerNorms (read x, write y), GeLU (read, write), two
  // residual adds (read 2, write 1); with dropout, two dropouts (read, write, mask). Their
  // backward reads the output gradient and the saved input: about 2x the bytes.
  // The GELU costs its function where the device has a rate for it (a CPU: weft calibrate
  // measures the cpu backend's), else its bytes; its backward at least twice its bytes.
  const double act_elems = N * f / t, act_bytes = 2 * act_elems * e, act_mem = memory_time(d, act_bytes);
  const double act_f = elementwise_time(d, act_bytes, c.mlp_function, act_elems);
  const double act_b = std::max(2 * act_mem, elementwise_time(d, act_bytes, c.mlp_function + "_backward", act_elems));
  double rest = 2 * memory_time(d, 2 * N * h * e / rep) + 2 * memory_time(d, 3 * N * h * e / rep);
  if (c.o.dropout) rest += 2 * memory_time(d, N * h * (2 * e + 1) / rep);
  lc.ew_f = rest + act_f;
  lc.ew_b = 2 * rest + act_b;
  // Backward FLOPs: each product twice (Narayanan et al. 2021 sec. 3.5); FlashAttention's
  // backward 2.5x its forward.
  lc.flops_bwd = 2 * (lc.flops_fwd - lc.flops_attn_core) + (c.o.flash_attention ? 2.5 : 2.0) * lc.flops_attn_core;

  // Tensor-parallel communication per layer: the calls of weft's layers, from the
  // communication model (plan/comm_model.h, tp_layer_comm: Shoeybi et al. 2019; Korthikanti
  // et al. 2022 sec. 4.2.2): forward 2 all-reduces of N h elements (sp: 2 all-gathers + 2
  // reduce-scatters of the same bytes), backward 2 more (sp: and the LayerNorm weights' 2
  // small all-reduces of 2h), a fully recomputed layer 1 more (sp: 2 all-gathers + 1
  // reduce-scatter). The sums priced at c.tp_e bytes per element, the gathers at the storage
  // precision's (c.e). The activation collectives carry the policy's tp codec
  // (plan/compression.h; weft's codecs read 16-bit payloads widened); the LayerNorm weights'
  // small all-reduces are gradients of weights, not activations, and stay uncompressed (fp32 in
  // weft, c.tp_e as Megatron-LM's).
  if (l.tp > 1) {
    const int64_t stride = axis_stride(l, "tp");
    const double te = c.tp_e;
    const double S = N * h * te;
    const CodecSpec& codec = l.compression.tp;
    const TpLayerComm k = c.o.tp_comm == "weft" ? tp_layer_comm(l.sequence_parallel) : megatron_tp_layer_comm(l.sequence_parallel);
    const PricedCall ar = price_call(c.sys, codec, Collective::kAllReduce, l.tp, stride, S, te);
    const PricedCall ag = price_call(c.sys, codec, Collective::kAllGather, l.tp, stride, N * h * c.e, c.e);
    const PricedCall rs = price_call(c.sys, codec, Collective::kReduceScatter, l.tp, stride, S, te);
    const double se = c.o.tp_comm == "weft" ? 4.0 : te;  // weft sums the LayerNorm weights' gradients in fp32
    const PricedCall small =
        price_call(c.sys, CodecSpec{}, Collective::kAllReduce, l.tp, stride, c.norm_weights * h * se, se);
    auto time_of = [&](const TpLayerCalls& n) {
      return n.all_reduce * ar.seconds() + n.all_gather * ag.seconds() + n.reduce_scatter * rs.seconds() +
             n.small_all_reduce * small.seconds();
    };
    auto flow_of = [&](const TpLayerCalls& n) {
      Flow f;
      f.add(ar, n.all_reduce);
      f.add(ag, n.all_gather);
      f.add(rs, n.reduce_scatter);
      f.add(small, n.small_all_reduce);
      return f;
    };
    lc.tp_fwd = time_of(k.forward);
    lc.tp_bwd = time_of(k.backward);
    lc.tp_recompute = time_of(k.recompute);
    lc.tp_flow_f = flow_of(k.forward);
    lc.tp_flow_b = flow_of(k.backward);
    lc.tp_flow_r = flow_of(k.recompute);
    if (c.kv_sum > 0) {  // the replicated kv heads' gradient sum (fp32, uncompressed)
      const PricedCall kv = price_call(c.sys, CodecSpec{}, Collective::kAllReduce, l.tp, stride, c.kv_sum * 4.0, 4.0);
      lc.tp_bwd += kv.seconds();
      lc.tp_flow_b.add(kv, 1);
    }
  }
  return lc;
}

struct StageCost {
  double comp_f = 0, comp_b = 0, tp_f = 0, tp_b = 0, flops = 0;
  Flow tp;  // tp traffic of one micro-batch
  double by_class[kOpClasses] = {};  // comp_f + comp_b split by OpClass
  double t_f() const { return comp_f + tp_f; }
  double t_b() const { return comp_b + tp_b; }
};

// One micro-batch on pipeline stage `stage`, which holds `layers` layers.
StageCost stage_cost(const Context& c, int stage, int64_t layers) {
  const Layout& l = c.l;
  const double n = static_cast<double>(layers);
  const LayerCost& lc = c.layer;
  StageCost sc;
  sc.comp_f = n * lc.fwd();
  sc.comp_b = n * lc.bwd();
  sc.by_class[kMatmul] = n * (lc.gemm_f + lc.gemm_b);
  sc.by_class[kAttention] = n * (lc.core_f + lc.core_b);
  sc.by_class[kElementwise] = n * (lc.ew_f + lc.ew_b);
  sc.tp_f = n * lc.tp_fwd;
  sc.tp_b = n * lc.tp_bwd;
  sc.tp.add(lc.tp_flow_f, n);
  sc.tp.add(lc.tp_flow_b, n);
  sc.flops = n * (lc.flops_fwd + lc.flops_bwd);
  // Recompute runs the forward again inside the backward (Chen et al. 2016; Korthikanti et
  // al. 2022 sec. 5): full recompute the whole layer (with its tp collectives), selective
  // only the attention core.
  if (l.recompute == Recompute::kFull) {
    const double r = l.recompute_layers < 0 ? n : std::min<double>(l.recompute_layers, n);
    sc.comp_b += r * lc.fwd();
    sc.by_class[kRecompute] += r * lc.fwd();
    sc.tp_b += r * lc.tp_recompute;
    sc.tp.add(lc.tp_flow_r, r);
    sc.flops += r * lc.flops_fwd;
  } else if (l.recompute == Recompute::kSelective && !c.o.flash_attention) {
    sc.comp_b += n * lc.core_f;
    sc.by_class[kRecompute] += n * lc.core_f;
    sc.flops += n * lc.flops_attn_core;
  }
  if (stage == 0) {
    sc.comp_f += c.emb_fwd;
    sc.comp_b += c.emb_bwd;
    sc.by_class[kEmbedding] += c.emb_fwd + c.emb_bwd;
    sc.tp_f += c.emb_tp;
    sc.tp_b += c.emb_tp_b;
    sc.flops += c.emb_flops;
    sc.tp.add(c.emb_flow, 1);
  }
  if (stage == l.pp - 1) {
    sc.comp_f += c.head_fwd;
    sc.comp_b += c.head_bwd;
    sc.by_class[kHead] += c.head_fwd + c.head_bwd;
    sc.tp_f += c.head_tp;
    sc.tp_b += c.head_tp_b;
    sc.tp.add(c.head_flow, 1);
    sc.flops += c.head_flops;
  }
  return sc;
}

}  // namespace

double matmul_time(const Device& d, Precision p, double flops, double bytes) {
  return roofline_time(d, p, flops, bytes, matmul_curve_fraction(d, flops));
}

int64_t axis_stride(const Layout& l, const std::string& axis) {
  const std::string& order = l.order;
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

// Seconds per parameter of AdamW over a shard of `n` parameters: Device::adamw_curve, log-log
// interpolation clamped at its ends.
double adamw_param_seconds(const Device& d, double n) { return interpolate_curve(d.adamw_curve, n, true); }

// The measured share of a level's bandwidth a kind of collective reaches (LinkLevel::
// collective_efficiency; 1 where not measured).
double collective_efficiency(const LinkLevel& level, Collective c) {
  const char* key = c == Collective::kAllReduce       ? "all_reduce"
                    : c == Collective::kAllGather     ? "all_gather"
                    : c == Collective::kReduceScatter ? "reduce_scatter"
                                                      : nullptr;
  if (key == nullptr) return 1.0;
  const auto it = level.collective_efficiency.find(key);
  return it == level.collective_efficiency.end() ? 1.0 : it->second;
}

CollectiveCost collective_cost(const System& sys, Collective c, int64_t n, int64_t stride, double bytes) {
  CollectiveCost r;
  if (n <= 1 || bytes <= 0) return r;
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
    case Collective::kAllToAll: steps = nn - 1; break;  // pairwise exchange: n - 1 rounds
  }
  // Members of the group per unit of each level: k_l = min(n, max(1, U_l / stride)). The group
  // crosses level l when k_l > k_{l-1}. A ring leaves each unit of level l-1 once, so the
  // k_{l-1} members there share one crossing, and every device of the unit (all groups of the
  // axis communicate at once) brings its own per-device bandwidth: the crossing runs at
  // bandwidth_l x k_{l-1}. The slowest crossing sets the time; each step pays the latency of
  // the slowest level used. A level with less bandwidth per device than the one below it (a
  // dragonfly's global links) is where the machine's taper shows.
  double t_bw = 0, alpha = 0, bw_at_max = 0;
  int64_t k_prev = 1;
  for (size_t i = 0; i < sys.levels.size(); ++i) {
    const int64_t U = sys.unit_devices(i);
    const int64_t k = std::min<int64_t>(n, std::max<int64_t>(1, U / stride));
    const bool top = i + 1 == sys.levels.size();
    const int64_t k_here = top ? n : k;
    if (k_here > k_prev) {
      double bw = sys.levels[i].bandwidth * (c == Collective::kSendRecv ? 1.0 : static_cast<double>(k_prev)) *
                  collective_efficiency(sys.levels[i], c);
      double level_traffic = traffic;
      if (c == Collective::kAllToAll) {
        // An all-to-all sends bytes/n to each peer: what leaves a rank's unit of the level
        // below ((n - k_{l-1})/n of its buffer) crosses level l on the rank's own links; there
        // is no ring to share a crossing.
        level_traffic = (nn - static_cast<double>(k_prev)) / nn * bytes;
        bw = sys.levels[i].bandwidth;
      }
      if (level_traffic / bw >= t_bw) {
        t_bw = level_traffic / bw;
        bw_at_max = bw;
        r.level = &sys.levels[i];
      }
      alpha = std::max(alpha, sys.levels[i].latency);
    }
    k_prev = k_here;
    if (k_prev >= n) break;
  }
  r.latency_s = steps * alpha;
  r.bandwidth_s = t_bw;
  r.seconds = r.latency_s + r.bandwidth_s;
  if (c == Collective::kAllReduce && bw_at_max > 0) {
    // Double binary tree (Sanders, Speck & Traeff 2009; NCCL's all-reduce at scale): a reduce
    // and a broadcast, each ceil(log2 n) hops deep, every rank moving the whole buffer once
    // per phase through the same slowest crossing.
    const double hops = 2 * std::ceil(std::log2(nn));
    const double tree = hops * alpha + 2 * bytes / bw_at_max;
    if (tree < r.seconds) {
      r.tree = true;
      r.latency_s = hops * alpha;
      r.bandwidth_s = 2 * bytes / bw_at_max;
      r.seconds = tree;
    }
  }
  return r;
}

std::vector<double> collective_level_bytes(const System& sys, Collective c, int64_t n, int64_t stride, double bytes) {
  std::vector<double> out(sys.levels.size(), 0.0);
  if (n <= 1 || bytes <= 0) return out;
  const CollectiveCost cost = collective_cost(sys, c, n, stride, bytes);
  const double nn = static_cast<double>(n);
  int64_t k_prev = 1;
  for (size_t i = 0; i < sys.levels.size(); ++i) {
    const int64_t U = sys.unit_devices(i);
    const bool top = i + 1 == sys.levels.size();
    const int64_t k_here = top ? n : std::min<int64_t>(n, std::max<int64_t>(1, U / stride));
    if (k_here > k_prev) {
      const double kp = static_cast<double>(k_prev);
      switch (c) {
        case Collective::kAllReduce:
          out[i] = (cost.tree ? 2.0 : 2 * (nn - 1) / nn) * bytes / kp;
          break;
        case Collective::kReduceScatter:
        case Collective::kAllGather: out[i] = (nn - 1) / nn * bytes / kp; break;
        case Collective::kSendRecv: out[i] = bytes; break;
        case Collective::kAllToAll: out[i] = (nn - kp) / nn * bytes; break;
      }
    }
    k_prev = k_here;
    if (k_prev >= n) break;
  }
  return out;
}

double collective_time(const System& sys, Collective c, int64_t n, int64_t stride, double bytes) {
  return collective_cost(sys, c, n, stride, bytes).seconds;
}

double pipeline_time(PipeSchedule s, int p, int64_t m, int v, double t_max, double t_sum, double t_p2p,
                     bool p2p_overlap) {
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
      // Without overlap (the published Megatron-LM runs) every chunk's transfers wait as
      // 1F1B's do (Narayanan et al. 2021 sec. 2.2.2: the communication grows with v).
      return md * t_max + (t_sum - t_max) / V + 2 * (P * V - 1) * t_p2p +
             (p2p_overlap ? 0.0 : 2 * V * (md - 1) * t_p2p);
  }
  return 0;
}

Prediction predict(const ModelShape& m, const System& sys, const Layout& l, const Options& o) {
  m.validate();
  check_layout(layout_candidate(m, l, o.global_batch, o.precision));
  axis_stride(l, "tp");  // validates the order
  // ZeRO++: a preset's knobs come from the system's levels (plan/zeropp.h).
  const Layout r = resolve_zeropp(l, sys);
  if (std::string e = zeropp_error(r); !e.empty()) throw_input("layout {}: {}", r.describe(), e);
  // Compression (plan/compression.h): codecs the system cannot run, or that ZeRO++ conflicts with.
  if (std::string e = compression_system_error(r.compression, sys); !e.empty()) throw_input("layout {}: {}", r.describe(), e);
  if (std::string e = compression_layout_error(r.compression, r); !e.empty()) throw_input("layout {}: {}", r.describe(), e);
  return predict_unchecked(m, sys, r, o);
}

namespace {

// A description's collective name (model/description.h) as the planner prices it.
Collective collective_of(const std::string& op) {
  if (op == "all_reduce") return Collective::kAllReduce;
  if (op == "all_gather") return Collective::kAllGather;
  if (op == "reduce_scatter") return Collective::kReduceScatter;
  WEFT_CHECK(false, "a model description names collective '{}' (all_reduce, all_gather, reduce_scatter)", op);
  return Collective::kAllReduce;
}

// One pass of the front or the back (model/description.h's EndsWork): its kernels' seconds and
// FLOPs, its tensor-parallel collectives' seconds and traffic (the layout's tp codec unless
// exact; at the compute precision's bytes unless fp32).
struct PassCost {
  double seconds = 0, flops = 0, tp = 0;
};
PassCost pass_cost(const Context& c, const EndPass& pass, Flow& flow) {
  const Device& d = c.sys.device;
  PassCost r;
  for (const Kernel& k : pass.kernels) {
    if (k.k > 0) {
      const GemmShape g{k.m, k.n, k.k, k.batch, static_cast<GemmTrans>(k.trans)};
      r.seconds += k.times * gemm_time(d, c.o.product_precision(), g, c.e);
      r.flops += k.times * g.flops();
    } else {
      r.seconds += k.times * elementwise_time(d, k.elems * (k.fp32 ? 4.0 : c.e), k.function, k.functions);
      r.flops += k.times * k.flops;
    }
  }
  if (c.l.tp <= 1) return r;
  const int64_t stride = axis_stride(c.l, "tp");
  for (const EndCollective& x : pass.tp) {
    const double e = x.fp32 ? 4.0 : c.tp_e;
    const PricedCall call = price_call(c.sys, x.exact ? CodecSpec{} : c.l.compression.tp, collective_of(x.op), c.l.tp,
                                       stride, x.elems * e, e);
    r.tp += call.seconds();
    flow.add(call, 1);
  }
  return r;
}

// The front's (stage 0) and the back's (the last stage) costs of one micro-batch into c, as the
// family lists what they run (ModelDescription::ends_work of the whole model).
void ends_cost(Context& c) {
  const std::unique_ptr<ModelDescription> desc =
      c.m.family->describe(part_spec(c.m.config(), c.m.seq, c.l, StageSpec{}));
  const EndsWork w = desc->ends_work();
  c.positions_per_sample = desc->mean_positions() / static_cast<double>(c.l.micro_batch);
  const PassCost ff = pass_cost(c, w.front_forward, c.emb_flow), fb = pass_cost(c, w.front_backward, c.emb_flow);
  const PassCost bf = pass_cost(c, w.back_forward, c.head_flow), bb = pass_cost(c, w.back_backward, c.head_flow);
  c.emb_fwd = ff.seconds;
  c.emb_bwd = fb.seconds;
  c.emb_flops = ff.flops + fb.flops;
  c.emb_tp = ff.tp;
  c.emb_tp_b = fb.tp;
  c.head_fwd = bf.seconds;
  c.head_bwd = bb.seconds;
  c.head_flops = bf.flops + bb.flops;
  c.head_tp = bf.tp;
  c.head_tp_b = bb.tp;
}

// Point-to-point between stages: the activations of one micro-batch, one send per
// micro-batch per direction. Each tp rank sends its shard under sp; without sp, with the
// scatter-gather (Narayanan et al. 2021 sec. 4.1; Megatron-LM and weft), its 1/t slice of
// the replicated activations, all-gathered over tp by the receiver, else all of them.
// The send carries the policy's pp codec, the receiver's all-gather (over tp) its tp codec.
// Sets c.p2p and c.p2p_flow.
void p2p_cost(Context& c) {
  const Layout& l = c.l;
  if (l.pp <= 1) return;
  const double t = l.tp, rep = l.sequence_parallel ? t : 1.0;
  const double NHe = static_cast<double>(c.m.seq) * static_cast<double>(l.micro_batch) * static_cast<double>(c.m.hidden) * c.e;
  const int64_t pp_stride = axis_stride(l, "pp");
  const bool scatter = c.o.pp_scatter_gather && l.tp > 1 && !l.sequence_parallel;
  const PricedCall send =
      price_call(c.sys, l.compression.pp, Collective::kSendRecv, l.pp, pp_stride, NHe / (scatter ? t : rep), c.e);
  double p2p = send.seconds();
  c.p2p_send.add(send, 1);
  if (scatter) {
    // The message as stored (weft's GPT sends its 16-bit residual stream as stored, as Megatron-LM).
    const PricedCall gather = price_call(c.sys, l.compression.tp, Collective::kAllGather, l.tp,
                                         axis_stride(l, "tp"), NHe, c.e);
    p2p += gather.seconds();
    c.p2p_gather.add(gather, 1);
  }
  c.p2p = p2p;
}

// Data-parallel communication of one step (Rajbhandari et al. 2020 sec. 7: ZeRO 1/2 move the
// same 2 Psi as an all-reduce, ZeRO 3 1.5x that, per micro-batch when gradients accumulate),
// with weft's calls from the communication model (dp_step_comm): ZeRO 0/1 reduce once per
// step (the last micro-batch), ZeRO 2 reduce-scatters every micro-batch, ZeRO 3 gathers
// fewer than twice per micro-batch (what its buffers still hold is not gathered again).
// HSDP (Layout::dp_replicate > 1; PyTorch FSDP's HYBRID_SHARD, Zhao et al. 2023 sec. 3.2.2,
// and Hybrid-STOP, Wang et al. 2024): every collective above runs inside the dp_shard group
// (dp_shard consecutive dp ranks, stride the dp stride), and in the step's last micro-batch
// each reduction's result is all-reduced across the dp_replicate group (stride dp stride x
// dp_shard, so it crosses the outer links): the whole gradient under ZeRO 0, the rank's
// 1/dp_shard of it under ZeRO 1-3. It follows the last reduction it depends on, so it is
// priced on the last micro-batch's window.
struct DpCost {
  double exposed = 0;
  Flow grads, params;  // the gradient reductions' and the parameter gathers' traffic per step
  std::vector<ExplainTerm> terms;
  std::vector<double> level_bytes;  // with explain: per device per step, index: the system's levels
};

// "node 2.53 GB, group 2.5 GB": bytes per device on each level of `calls` such collectives.
std::string level_text(const System& sys, const std::vector<double>& per_call, double calls) {
  std::string s;
  for (size_t i = 0; i < per_call.size(); ++i) {
    if (per_call[i] > 0) s += fmt::format("{}{} {:.3g} GB", s.empty() ? "" : ", ", sys.levels[i].name, calls * per_call[i] / 1e9);
  }
  return s.empty() ? "no link" : s;
}

// ZeRO 2 and 3 keep a whole gradient buffer per micro-batch beside the shard's accumulator, on
// any dp (1 included): each micro-batch zeroes it (write g bytes a parameter), reduce-scatters
// it (read and write: 2 g; a copy on one rank) and adds its share into the accumulator (read 2,
// write 1: 3 g); ZeRO 3 also copies every gathered parameter into its buffer (read and write
// e, `gathers` times a micro-batch). Memory-bound on the device, not hidden by the links.
// weft buckets them by parameter group (a layer, the embedding, the final norm): each group's
// traffic is one memory-bound pass over that group's buffers (on a CPU, within its caches when
// the group is small).
double zero_buffer_time(const Context& c, double psi, double md, double g, double gathers) {
  if (c.l.zero < 2) return 0.0;
  const Device& d = c.sys.device;
  const double groups = static_cast<double>(c.m.layers) + 2, per = psi / groups;
  double t = md * groups * memory_time(d, 6 * g * per);
  if (c.l.zero == 3) t += md * gathers * memory_time(d, 2 * c.e * psi);
  return t;
}

// ZeRO 2/3's local buffers (zero_buffer_time) into r: on the step, and its line under explain.
void add_zero_buffers(const Context& c, double psi, double md, DpCost& r) {
  const Layout& l = c.l;
  if (l.zero < 2) return;
  const double g = (c.o.precision == Precision::kFp32 || c.o.fp32_grad_accumulation) ? 4 : 2;
  const double gathers = l.zero == 3 ? dp_step_comm(3, static_cast<int>(c.m.layers) + 2, DataParallelConfig{}.prefetch,
                                                    c.tied_head)
                                           .all_gather
                                     : 0.0;
  const double buffers = zero_buffer_time(c, psi, md, g, gathers);
  r.exposed += buffers;
  if (c.o.explain && buffers > 0) {
    r.terms.push_back({"dp", fmt::format("ZeRO-{} gradient and parameter buffers (local copies)", l.zero), "", buffers,
                       fmt::format("{:g} micro-batches: zero, reduce-scatter, accumulate a {:.3g} GB gradient{}", md,
                                   psi * g / 1e9, l.zero == 3 ? ", copy the gathered parameters" : "")});
  }
}

DpCost dp_cost(const Context& c, double psi, double md, const StageCost& slow) {
  const Layout& l = c.l;
  const Options& o = c.o;
  DpCost r;
  add_zero_buffers(c, psi, md, r);
  if (l.dp <= 1) return r;
  if (o.explain) r.level_bytes.assign(c.sys.levels.size(), 0.0);
  const int64_t dp_stride = axis_stride(l, "dp");
  const int64_t ds = l.dp_shard(), dr = l.dp_replicate;  // HSDP: ZeRO's group and its replicas
  const double g = (o.precision == Precision::kFp32 || o.fp32_grad_accumulation) ? 4 : 2;
  const double window = o.overlap_dp ? slow.t_b() : 0.0;  // the last micro-batch's backward
  // What of `comm` seconds compute can hide behind `hide` seconds: all of it up to the window
  // on a GPU; on a CPU rank ([defaults] comm_overlap < 1) MPI's copies and sums take the
  // rank's own cores, so at least (1 - comm_overlap) of it stays on the step.
  const double keep = 1.0 - c.sys.defaults.comm_overlap;
  auto exposed = [keep](double comm, double hide) { return std::max({0.0, comm - hide, keep * comm}); };
  // One kind of collective of the step: its cost, and under explain its bytes per level and
  // its line (`calls` per step, `exposed` seconds of the step).
  // A compressed one (plan/compression.h) has its link cost on the wire bytes and its codec
  // seconds apart: the link may hide behind compute, the codec shares the device and counts whole.
  struct Call {
    Collective kind;
    int64_t n, stride;
    double bytes;         // on the wire
    CollectiveCost cost;  // of the link, on `bytes`
    double raw = 0, codec_s = 0;
    std::string codec = "off";
  };
  auto call = [&](Collective kind, int64_t n, int64_t stride, double bytes, const CodecSpec& codec = CodecSpec{},
                  double elem = 4) {
    const PricedCall k = price_call(c.sys, codec, kind, n, stride, bytes, elem);
    return Call{kind, n, stride, k.wire_bytes, k.link, k.raw_bytes, k.codec_s, codec.off() ? "off" : codec.name()};
  };
  auto term = [&](const std::string& name, const Call& k, double calls, double exposed, const std::string& what = "") {
    if (!o.explain) return;  // the search prices tens of thousands of layouts: no strings there
    const std::vector<double> lb = collective_level_bytes(c.sys, k.kind, k.n, k.stride, k.bytes);
    for (size_t i = 0; i < lb.size(); ++i) r.level_bytes[i] += calls * lb[i];
    const std::string wire = k.codec == "off" ? what : fmt::format(" ({} of {:.3g} GB raw)", k.codec, k.raw / 1e9);
    r.terms.push_back({"dp", name, k.cost.level_name(), exposed,
                       fmt::format("{:g} x {:.3g} GB{} over {} ranks ({}; {:.3g} s each, {:.3g} s latency); per device per "
                                   "step: {}",
                                   calls, k.bytes / 1e9, wire, k.n, k.kind == Collective::kAllToAll ? "all-to-all"
                                                                     : k.cost.tree ? "tree" : "ring",
                                   k.cost.seconds, k.cost.latency_s, level_text(c.sys, lb, calls))});
    if (k.codec_s > 0) {
      r.terms.push_back({"dp", fmt::format("codec {} of the {} (encode + decode)", k.codec, name), "", calls * k.codec_s,
                         fmt::format("{:g} x {:.3g} s, counted whole (it shares the device)", calls, k.codec_s)});
    }
  };
  auto flow = [](Flow& f, const Call& k, double calls) { f.add(k.raw, k.bytes, k.codec_s, calls); };
  const CodecSpec& grads_codec = l.compression.dp;
  const CodecSpec& params_codec = l.compression.params;
  // HSDP: the replicas' all-reduce of what the dp_shard group reduced (the whole gradient for
  // ZeRO 0, the rank's 1/dp_shard otherwise), once per step; 0 s without replicas.
  const Call rep =
      call(Collective::kAllReduce, dr, dp_stride * ds, l.zero == 0 ? psi * g : psi * g / static_cast<double>(ds));
  const std::string rep_name = fmt::format("HSDP all-reduce, dp_replicate {}, {} of the gradient", dr,
                                           l.zero == 0 ? std::string("all") : fmt::format("1/{}", ds));
  if (l.zero == 0) {
    const Call ar = call(Collective::kAllReduce, ds, dp_stride, psi * g, grads_codec, g);
    const double link = exposed(ar.cost.seconds + rep.cost.seconds, window);
    r.exposed += link + ar.codec_s;
    const double share = link > 0 ? link / (ar.cost.seconds + rep.cost.seconds) : 0;
    term(dr > 1 ? "gradient all-reduce inside dp_shard" : "gradient all-reduce", ar, 1, share * ar.cost.seconds);
    flow(r.grads, ar, 1);
    if (dr > 1) {
      term(rep_name, rep, 1, share * rep.cost.seconds);
      flow(r.grads, rep, 1);
    }
  } else if (l.zero <= 2) {
    const Call rs = call(Collective::kReduceScatter, ds, dp_stride, psi * g, grads_codec, g);
    const Call ag = call(Collective::kAllGather, ds, dp_stride, psi * c.e, params_codec, c.e);
    // ZeRO 2: every micro-batch's reduce-scatter against its own backward; the last one's
    // followed by the replicas' all-reduce.
    const double reductions = l.zero == 2 ? md : 1.0;
    const double last = exposed(rs.cost.seconds + rep.cost.seconds, window);
    const double rs_exposed = (reductions - 1) * exposed(rs.cost.seconds, window) + last;
    r.exposed += rs_exposed + ag.cost.seconds + (reductions * rs.codec_s + ag.codec_s);
    const double last_share = last > 0 ? last / (rs.cost.seconds + rep.cost.seconds) : 0;
    term("gradient reduce-scatter", rs, reductions, rs_exposed - last_share * rep.cost.seconds);
    if (dr > 1) term(rep_name, rep, 1, last_share * rep.cost.seconds);
    term("parameter all-gather", ag, 1, ag.cost.seconds);
    flow(r.grads, rs, reductions);
    if (dr > 1) flow(r.grads, rep, 1);
    flow(r.params, ag, 1);
  } else if (!l.zeropp_on()) {
    // Every micro-batch gathers the parameters (forward, and again in the backward what the
    // buffers no longer hold) and reduce-scatters its gradients; prefetching hides them
    // behind that micro-batch (the last one's with the replicas' all-reduce).
    const DpStepComm k = dp_step_comm(3, static_cast<int>(c.m.layers) + 2, DataParallelConfig{}.prefetch,
                                      c.tied_head);
    const Call ag = call(Collective::kAllGather, ds, dp_stride, psi * c.e, params_codec, c.e);
    const Call rs = call(Collective::kReduceScatter, ds, dp_stride, psi * g, grads_codec, g);
    const double per_mb = k.all_gather * ag.cost.seconds + k.reduce_scatter * rs.cost.seconds;
    const double hide = o.overlap_dp ? slow.t_f() + slow.t_b() : 0.0;
    const double link = (md - 1) * exposed(per_mb, hide) + exposed(per_mb + rep.cost.seconds, hide);
    r.exposed += link + md * (k.all_gather * ag.codec_s + k.reduce_scatter * rs.codec_s);
    const double busy = md * per_mb + rep.cost.seconds;
    const double share = busy > 0 ? link / busy : 0;
    term("parameter all-gathers (ZeRO-3)", ag, md * k.all_gather, share * md * k.all_gather * ag.cost.seconds);
    term("gradient reduce-scatters (ZeRO-3)", rs, md * k.reduce_scatter, share * md * k.reduce_scatter * rs.cost.seconds);
    if (dr > 1) term(rep_name, rep, 1, share * rep.cost.seconds);
    flow(r.params, ag, md * k.all_gather);
    flow(r.grads, rs, md * k.reduce_scatter);
    if (dr > 1) flow(r.grads, rep, 1);
  } else {
    // ZeRO++ (Wang et al. 2023; comm_model.h zeropp_step_comm for the counts, docs/planner.md):
    // - qwZ: the gathers over the whole dp group carry int8 + one fp32 scale per block of G:
    //   Psi (1 + 4/G) bytes, (1/2 + 2/G) of a 16-bit gather; each rank quantizes its own
    //   Psi/dp (read e, write 1 byte per element) and dequantizes what it gathers (read 1,
    //   write e), memory-bound.
    // - hpZ: only each group's first gather (the first micro-batch's forward) runs over the
    //   whole dp group; the others run inside the alpha group, 16-bit, at the level that holds
    //   alpha dp ranks.
    // - qgZ: the reduce-scatter becomes one all-to-all per hierarchy level, each carrying int4
    //   (0.5 byte + a 4-byte scale per block) of what is left; each hop quantizes its input
    //   (read g or 4, write 0.5 per element) and dequantizes, sums in fp32 (read 0.5 per element
    //   received, write 4 per element kept), memory-bound.
    // The collectives hide behind their micro-batch's compute as plain ZeRO-3's do; the
    // quantization kernels share the device with it and are counted whole.
    const Device& d = c.sys.device;
    // HSDP: all of it inside the dp_shard group, the replicas' all-reduce in the last micro-batch.
    const ZeroPPStepComm z = zeropp_step_comm(static_cast<int>(c.m.layers) + 2, DataParallelConfig{}.prefetch,
                                              static_cast<int64_t>(md), ds, {l.qwz, l.hpz, l.qgz, l.hierarchy},
                                              c.tied_head);
    const double G = l.quant_block;
    const double per_mb = (z.primary_gathers + z.secondary_gathers) / md;
    const Call ag_p = call(Collective::kAllGather, ds, dp_stride, z.quantized ? psi * (1 + 4 / G) : psi * c.e);
    const Call ag_s = call(Collective::kAllGather, z.hpz, dp_stride, psi * c.e);
    std::vector<Call> hops;
    double reduce = 0, quant_g = 0;
    if (z.gradient_hops.empty()) {
      hops.push_back(call(Collective::kReduceScatter, ds, dp_stride, psi * g));
      reduce = hops.back().cost.seconds;
    } else {
      double in_bytes = g;
      for (const GradientHop& h : z.gradient_hops) {
        const double x = psi * h.elements;
        hops.push_back(call(Collective::kAllToAll, h.peers, dp_stride * h.stride, x * (0.5 + 4 / G)));
        reduce += hops.back().cost.seconds;
        quant_g += memory_time(d, x * (in_bytes + 0.5)) + memory_time(d, x * 0.5 + x / static_cast<double>(h.peers) * 4);
        in_bytes = 4;  // later hops requantize the fp32 partial sums
      }
    }
    const double own = psi / static_cast<double>(ds);  // this rank's shard
    const double quant_w = z.quantized ? memory_time(d, own * (c.e + 1)) + memory_time(d, psi * (1 + c.e)) : 0.0;
    const double first = z.hpz > 1 ? ag_p.cost.seconds + (per_mb - 1) * ag_s.cost.seconds + reduce
                                   : per_mb * ag_p.cost.seconds + reduce;
    const double later = z.hpz > 1 ? per_mb * ag_s.cost.seconds + reduce : first;
    const double hide = o.overlap_dp ? slow.t_f() + slow.t_b() : 0.0;
    const double R = rep.cost.seconds;  // HSDP: after the last micro-batch's reductions
    const double comm = first + (md - 1) * later + R;
    const double comm_exposed = md <= 1 ? exposed(first + R, hide)
                                        : exposed(first, hide) + (md - 2) * exposed(later, hide) + exposed(later + R, hide);
    const double quant = z.primary_gathers * quant_w + md * quant_g;
    r.exposed += comm_exposed + quant;
    if (o.explain) {
      const double share = comm > 0 ? comm_exposed / comm : 0;
      std::string levels;
      for (const DpLevel& dl : dp_levels(c.sys, l)) {
        levels += fmt::format("{}{}: {}", levels.empty() ? "" : "; ", dl.name,
                              dl.dropped.empty() ? fmt::format("{} dp ranks", dl.dp_ranks)
                                                 : fmt::format("{} dp ranks, dropped ({})", dl.dp_ranks, dl.dropped));
      }
      r.terms.push_back({"dp", fmt::format("ZeRO++ {}: dp hierarchy", zeropp_name(l.zeropp)), "", 0.0,
                         fmt::format("{}; whole {} group {} above; {}", levels, dr > 1 ? "dp_shard" : "dp", ds,
                                     l.describe())});
      term(z.quantized ? "forward all-gathers, int8 + scales (qwZ)" : "forward all-gathers over dp (ZeRO-3)", ag_p,
           z.primary_gathers, share * z.primary_gathers * ag_p.cost.seconds,
           z.quantized ? fmt::format(" (int8, G {:g})", G) : "");
      if (z.secondary_gathers > 0) {
        term(fmt::format("hpZ all-gathers inside {} dp ranks", z.hpz), ag_s, z.secondary_gathers,
             share * z.secondary_gathers * ag_s.cost.seconds, " (16-bit)");
      }
      if (z.gradient_hops.empty()) {
        term("gradient reduce-scatters (ZeRO-3)", hops[0], md, share * md * hops[0].cost.seconds);
      } else {
        for (size_t i = 0; i < hops.size(); ++i) {
          term(fmt::format("qgZ hop {} all-to-all over {} dp ranks", i + 1, z.gradient_hops[i].peers), hops[i], md,
               share * md * hops[i].cost.seconds, " (int4)");
        }
      }
      if (dr > 1) term(rep_name, rep, 1, share * R);
      if (z.quantized) {
        r.terms.push_back({"dp", "qwZ quantize + dequantize", "", z.primary_gathers * quant_w,
                           fmt::format("{:g} gathers: quantize {:.3g} GB own shard, dequantize {:.3g} GB gathered, at {:.3g} TB/s",
                                       z.primary_gathers, own * (c.e + 1) / 1e9, psi * (1 + c.e) / 1e9,
                                       d.memory_bandwidth / 1e12)});
      }
      if (!z.gradient_hops.empty()) {
        r.terms.push_back({"dp", "qgZ quantize + dequantize-sum", "", md * quant_g,
                           fmt::format("{} hops x {:g} micro-batches, fp32 sums, at {:.3g} TB/s", hops.size(), md,
                                       d.memory_bandwidth / 1e12)});
      }
    }
  }
  return r;
}

// Terms of `weft plan --explain` that the step's totals do not already itemise.
void explain_compute_and_tp(const Context& c, Prediction& p, const StageCost& slow, double md) {
  for (int k = 0; k < kOpClasses; ++k) {
    if (slow.by_class[k] > 0) {
      const ModelCapabilities& caps = c.m.family->capabilities();
      const char* name = k == kEmbedding ? caps.front_ops : k == kHead ? caps.back_ops : kOpClassName[k];
      p.explain.push_back({"compute", name, "", md * slow.by_class[k],
                           fmt::format("{:.4g} ms per micro-batch x {:g}", 1e3 * slow.by_class[k], md)});
    }
  }
  if (c.l.tp > 1) {
    const double N = static_cast<double>(c.m.seq) * static_cast<double>(c.l.micro_batch);
    const CodecSpec& codec = c.l.compression.tp;
    const PricedCall one = price_call(c.sys, codec, c.l.sequence_parallel ? Collective::kAllGather : Collective::kAllReduce,
                                      c.l.tp, axis_stride(c.l, "tp"), N * c.m.hidden * c.tp_e, c.tp_e);
    const double codec_s = md * slow.tp.codec_s;
    p.explain.push_back({"tp", c.l.sequence_parallel ? "all-gathers + reduce-scatters" : "all-reduces", one.link.level_name(),
                         p.time.tp_comm - codec_s,
                         fmt::format("{:.3g} MB each{} over tp {}: {:.3g} ms ({:.3g} ms latency); {:.4g} ms per micro-batch",
                                     one.wire_bytes / 1e6,
                                     codec.off() ? std::string() : fmt::format(" ({} of {:.3g} MB raw)", codec.name(), one.raw_bytes / 1e6),
                                     c.l.tp, 1e3 * one.link.seconds, 1e3 * one.link.latency_s, 1e3 * (slow.tp_f + slow.tp_b))});
    if (codec_s > 0) {
      std::string source;
      codec_speed(c.sys, codec, &source);
      p.explain.push_back({"tp", fmt::format("codec {} (encode + decode)", codec.name()), "", codec_s,
                           fmt::format("{:.4g} ms per micro-batch x {:g}; speed {}", 1e3 * slow.tp.codec_s, md, source)});
    }
  }
}

// Waiting for the slowest rank (plan/scale_model.h). With a measured sync_jitter curve: every
// synchronisation of the slowest stage's chain after an equal share of its busy time: its
// tensor-parallel collectives (their group: tp), its pipeline receives (a pair of ranks), and the
// step's closing collectives over the world (the data-parallel reduction, the loss and the norm):
// after the last segment where the chain's synchronisations link the whole world (dp 1), else
// after the whole step (the replicas meet once a step). Without a curve: busy x jitter x
// E[max of the world's devices].
struct Stragglers {
  double seconds = 0;
  std::string detail;  // under explain
};
Stragglers stragglers(const Context& c, const StageCost& slow, double md, double busy) {
  const Layout& l = c.l;
  const SoftwareDefaults& s = c.sys.defaults;
  const int64_t world = l.world();
  Stragglers r;
  if (s.sync_jitter.empty()) {
    r.seconds = straggler_time(busy, s.jitter, world);
    if (c.o.explain) {
      r.detail = fmt::format("jitter {:g} x E[max of {} normal draws] = {:.3g} x busy {:.4g} s", s.jitter, world,
                             expected_max_normal(world), busy);
    }
    return r;
  }
  const double k_tp = l.tp > 1 ? md * slow.tp.calls : 0.0;
  const double k_pp = l.pp > 1 ? md * l.virtual_stages * (l.pp > 2 || l.virtual_stages > 1 ? 2.0 : 1.0) : 0.0;
  const double segment = busy / (k_tp + k_pp + 1);
  const double last = l.dp > 1 ? busy : segment;
  const double w_tp = sync_wait(s.sync_jitter, segment, l.tp), w_pp = sync_wait(s.sync_jitter, segment, 2);
  const double w_end = sync_wait(s.sync_jitter, last, world);
  r.seconds = k_tp * w_tp + k_pp * w_pp + w_end;
  if (c.o.explain) {
    auto cv = [&](double seg) { return interpolate_curve(s.sync_jitter, seg, false); };
    r.detail = fmt::format(
        "measured sync_jitter: {:g} tp collectives x {:.3g} ms + {:g} pipeline receives x {:.3g} ms (segments of {:.3g} ms, "
        "cv {:.3g}) + the step's close over {} ranks {:.3g} ms (after {:.4g} s, cv {:.3g})",
        k_tp, 1e3 * w_tp, k_pp, 1e3 * w_pp, 1e3 * segment, cv(segment), world, 1e3 * w_end, last, cv(last));
  }
  return r;
}

// Per kind of traffic, bytes raw and on the wire and the codec's seconds on the critical path,
// per device per step: tp for the slowest stage (its micro-batches, plus the scatter-gather
// all-gathers of its transfers), pp the busiest stage's sends (2 per micro-batch and chunk in
// the middle of the pipeline: activations forward, their gradients back), dp and params the
// step's collectives of dp_cost.
TrafficReport traffic_report(const Context& c, const StageCost& slow, const DpCost& dp, double md, double path_share) {
  const Layout& l = c.l;
  const double sends = md * l.virtual_stages * (l.pp > 2 || l.virtual_stages > 1 ? 2.0 : 1.0);
  Flow tp, pp;
  tp.add(slow.tp, md);
  if (l.pp > 1) {
    tp.add(c.p2p_gather.raw, c.p2p_gather.wire, 0.0, sends);
    tp.codec_s += path_share * c.p2p_gather.codec_s;
    pp.add(c.p2p_send.raw, c.p2p_send.wire, 0.0, sends);
    pp.codec_s = path_share * c.p2p_send.codec_s;
  }
  TrafficReport r;
  r.tp = traffic(l.compression.tp, tp);
  r.pp = traffic(l.compression.pp, pp);
  r.dp = traffic(l.compression.dp, dp.grads);
  r.params = traffic(l.compression.params, dp.params);
  return r;
}

}  // namespace

Prediction predict_unchecked(const ModelShape& m, const System& sys, const Layout& l, const Options& o) {
  Context c{.m = m, .sys = sys, .l = l, .o = o};
  // The model's variant, read once for the whole prediction (model/config.h's BlockOptions).
  c.qkv_width = 3 * m.hidden;
  c.fc_width = m.ffn;
  c.tied_head = m.family->capabilities().tied_head;
  if (m.family->capabilities().transformer_blocks && m.heads > 0 && m.hidden % m.heads == 0) {
    const ModelConfig mc = m.config();
    c.qkv_width = mc.qkv_width();
    c.qkv_local = static_cast<double>(mc.qkv_width_local(static_cast<int>(l.tp)));
    c.kv_sum = static_cast<double>(kv_replica_sum_elems(mc, static_cast<int>(l.tp)));
    c.fc_width = mc.fc_width();
    c.norm_weights = mc.block.norm == NormKind::kLayerNorm && mc.block.bias ? 2 : 1;
    c.mlp_function = mlp_name(mc.block.mlp);
    c.tied_head = mc.tied_head();
  }
  c.e = elem_bytes(o.precision);
  c.tp_e = o.tp_comm == "weft" ? static_cast<double>(dtype_bytes(residual_stream_dtype(m.family->capabilities(), o.precision), 1))
                                : c.e;
  const Device& d = sys.device;
  const double t = l.tp;
  // A family whose layers are not the shared transformer block (graph networks) lists all of
  // its work as its front and back (ModelDescription::ends_work): no block is priced.
  if (m.family->capabilities().transformer_blocks) c.layer = layer_cost(c);
  ends_cost(c);
  p2p_cost(c);

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
  for (int st = 0; st < l.pp; ++st) {
    const StageCost sc = stage_cost(c, st, layers[static_cast<size_t>(st)]);
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

  // The pipeline: the schedule's fill/drain (scaled by the software's bubble_factor) and the
  // transfers on its critical path.
  const double ideal = pipeline_time(l.schedule, l.pp, mb, l.virtual_stages, max_t, sum_t, 0.0) - md * max_t;
  const double with_p2p =
      pipeline_time(l.schedule, l.pp, mb, l.virtual_stages, max_t, sum_t, c.p2p, o.pp_p2p_overlap) - md * max_t;
  const double fill = std::max(0.0, ideal) * sys.defaults.bubble_factor;
  const double p2p_path = std::max(0.0, with_p2p - ideal);
  p.time.compute = md * (slow.comp_f + slow.comp_b);
  p.time.tp_comm = md * (slow.tp_f + slow.tp_b);
  p.time.pp_bubble = fill + p2p_path;
  // The codecs' share of the transfers on the critical path (inside p2p_path).
  const double path_share = c.p2p > 0 ? p2p_path / c.p2p : 0.0;

  const int stage_big = stage_params_per_rank(m, l, 0) >= stage_params_per_rank(m, l, l.pp - 1) ? 0 : l.pp - 1;
  const double psi = stage_params_per_rank(m, l, stage_big);
  DpCost dp = dp_cost(c, psi, md, slow);
  p.time.dp_exposed = dp.exposed;
  p.traffic = traffic_report(c, slow, dp, md, path_share);
  // Optimizer: AdamW over this rank's shard, memory-bound. Mixed precision reads the fp32
  // gradient, master weight, m, v (16 bytes) and writes master, m, v and the 16-bit copy (14);
  // fp32 reads 16 and writes 12.
  const double shard = psi / (l.zero >= 1 ? static_cast<double>(l.dp_shard()) : 1.0);  // HSDP: ZeRO's group
  // A calibrated device's measured AdamW and gradient-norm seconds per parameter replace the
  // traffic estimate (on a CPU the norm's double sum is a chain of dependent additions, slower
  // than the bandwidth; weft sums each rank's own range of the reduced gradient).
  // It also zeroes the rank's gradient accumulators once a step (a memset, memory-bound).
  p.time.optimizer = d.adamw_curve.empty()
                         ? shard * (o.precision == Precision::kFp32 ? 28.0 : 30.0) / d.memory_bandwidth
                         : shard * adamw_param_seconds(d, shard) + psi / static_cast<double>(l.dp_shard()) * d.norm_param_seconds +
                               memory_time(d, psi * (o.precision == Precision::kFp32 || o.fp32_grad_accumulation ? 4.0 : 2.0));
  // Scale effects (plan/scale_model.h): the slowest of the world's devices, and the per-step
  // work no parallelism shrinks.
  const int64_t world = l.world();
  const Stragglers wait = stragglers(c, slow, md, p.time.compute + p.time.tp_comm);
  p.time.stragglers = wait.seconds;
  const double world_ar = collective_time(sys, Collective::kAllReduce, world, 1, 8.0);
  p.time.overhead = sys.defaults.step_overhead + sys.defaults.world_allreduces * world_ar;
  p.time.total = p.time.compute + p.time.tp_comm + p.time.pp_bubble + p.time.dp_exposed + p.time.optimizer +
                 p.time.stragglers + p.time.overhead;
  p.step_time_s = p.time.total;

  // Positions trained per step: a micro-batch's mean (graphs: the data's mean atoms) per sample.
  const double tokens = static_cast<double>(o.global_batch) * c.positions_per_sample;
  p.tokens_per_s = tokens / p.step_time_s;
  p.model_flops = m.model_flops_per_token() * tokens;
  p.hardware_flops = hw_flops * md * static_cast<double>(l.dp) * t;
  const double peak_all = d.peak_flops(o.precision) * static_cast<double>(world);
  p.mfu = p.model_flops / (p.step_time_s * peak_all);
  p.hfu = p.hardware_flops / (p.step_time_s * peak_all);
  p.memory = worst_stage_memory(m, l, o.memory());
  p.fits = p.memory.total <= d.memory_bytes;
  if (o.explain) {
    explain_compute_and_tp(c, p, slow, md);
    if (l.pp > 1) {
      p.explain.push_back({"pp", "fill + drain (bubble)", "", fill,
                           fmt::format("{} stages, {} micro-batches, {} schedule; ideal {:.4g} s x bubble_factor {:g}", l.pp,
                                       mb, schedule_name(l.schedule), ideal, sys.defaults.bubble_factor)});
      const double codec_path = path_share * (c.p2p_send.codec_s + c.p2p_gather.codec_s);
      p.explain.push_back({"pp", "point-to-point on the critical path", "", p2p_path - codec_path,
                           fmt::format("{:.4g} ms per transfer ({:.3g} MB on the wire{})", 1e3 * c.p2p,
                                       (c.p2p_send.wire + c.p2p_gather.wire) / 1e6,
                                       l.compression.pp.off() ? std::string()
                                                              : fmt::format(", {} of {:.3g} MB raw", l.compression.pp.name(),
                                                                            (c.p2p_send.raw + c.p2p_gather.raw) / 1e6))});
      if (codec_path > 0) {
        p.explain.push_back({"pp", "codecs of the transfers on the critical path (encode + decode)", "", codec_path,
                             fmt::format("{:.4g} ms per transfer x {:.4g} transfers on the path", 1e3 * (c.p2p_send.codec_s + c.p2p_gather.codec_s),
                                         path_share)});
      }
    }
    for (auto& term : dp.terms) p.explain.push_back(std::move(term));
    for (size_t i = 0; i < dp.level_bytes.size(); ++i) p.dp_level_bytes.emplace_back(sys.levels[i].name, dp.level_bytes[i]);
    p.explain.push_back({"optimizer", "AdamW update", "", p.time.optimizer,
                         fmt::format("{:.4g} M parameters per rank, memory-bound", shard / 1e6)});
    p.explain.push_back({"stragglers", "waiting for the slowest device", "", p.time.stragglers, wait.detail});
    p.explain.push_back({"overhead", "fixed per step", "", sys.defaults.step_overhead, "[defaults] step_overhead"});
    p.explain.push_back({"overhead", "world all-reduces (loss, norm)", "", sys.defaults.world_allreduces * world_ar,
                         fmt::format("{} x {:.3g} ms over {} ranks", sys.defaults.world_allreduces, 1e3 * world_ar, world)});
  }
  return p;
}

}  // namespace weft::plan
