// GPT-2 on one GPU, everything on the device (see gpt_cuda.h). The fp32 path repeats
// model/gpt.cc's sequence of ops (tp = 1, no sequence parallelism, no recompute) on the
// Backend interface; the bf16 path is llm.c's train_gpt2.cu layout of the same math.
#include "model/cuda/gpt_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "core/error.h"
#include "core/log.h"

namespace weft::cuda {

namespace {

// Hands out 256-byte-aligned pieces of one device allocation; with a null base it only
// counts (the first pass sizes the allocation, the second assigns the pointers).
class Carver {
 public:
  explicit Carver(uint8_t* base) : base_(base) {}
  template <typename T>
  T* take(int64_t n) {
    const size_t off = used_;
    used_ += (static_cast<size_t>(n) * sizeof(T) + 255) / 256 * 256;
    return base_ ? reinterpret_cast<T*>(base_ + off) : nullptr;
  }
  size_t used() const { return used_; }

 private:
  uint8_t* base_;
  size_t used_ = 0;
};

// Element offsets of one layer's tensors in the flat buffer.
struct LayerOff {
  int64_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

// One layer's activations kept for backward, storage type A (float or bf16). The fp32 path
// keeps the (B,NH,T,T) probabilities (att), the bf16 path the flash kernels' lse (B,NH,T).
template <typename A>
struct LayerActs {
  A* ln1;                  // (N,C)
  float *ln1_mean, *ln1_rstd;  // (N)
  A* qkv;                  // (N,3C)
  float* att;              // fp32: (B,NH,T,T) probabilities
  float* lse;              // bf16: (B,NH,T) log-sum-exp of the scaled scores
  A* atty;                 // (N,C) attention output before c_proj
  A* res2;                 // (N,C) residual after attention
  A* ln2;                  // (N,C)
  float *ln2_mean, *ln2_rstd;
  A* fch;                  // (N,F) c_fc output, pre-GELU
  A* fch_gelu;             // (N,F)
  A* res3;                 // (N,C) residual after the MLP: the next layer's input
};

// Activations of one micro-batch and the scratch of its backward, storage type A.
template <typename A>
struct Acts {
  A* encoded = nullptr;  // (N,C) token + position embeddings
  std::vector<LayerActs<A>> layers;
  A* lnf = nullptr;      // (N,C)
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;
  // workspace
  A* logits = nullptr;   // (N,Vp): logits, then dlogits in place
  float* losses = nullptr;  // (N)
  A* dres = nullptr;     // (N,C) gradient of the residual stream
  A* dC = nullptr;       // (N,C)
  A* d3C = nullptr;      // (N,3C)
  A* dF = nullptr;       // (N,F)
  A* tmp = nullptr;      // (N,C) bf16 forward: projection outputs before the fused residual add

  // Assigns (or, with null bases, counts) the pieces. act: the stash; ws: the workspace.
  void carve(Carver& act, Carver& ws, int64_t B, int64_t T, const ModelConfig& c, bool flash) {
    const int64_t N = B * T, C = c.n_embd, F = c.ffn, NH = c.n_head, Vp = c.padded_vocab;
    encoded = act.take<A>(N * C);
    layers.resize(static_cast<size_t>(c.n_layer));
    for (auto& a : layers) {
      a.ln1 = act.take<A>(N * C);
      a.ln1_mean = act.take<float>(N);
      a.ln1_rstd = act.take<float>(N);
      a.qkv = act.take<A>(N * 3 * C);
      a.att = flash ? nullptr : act.take<float>(B * NH * T * T);
      a.lse = flash ? act.take<float>(B * NH * T) : nullptr;
      a.atty = act.take<A>(N * C);
      a.res2 = act.take<A>(N * C);
      a.ln2 = act.take<A>(N * C);
      a.ln2_mean = act.take<float>(N);
      a.ln2_rstd = act.take<float>(N);
      a.fch = act.take<A>(N * F);
      a.fch_gelu = act.take<A>(N * F);
      a.res3 = act.take<A>(N * C);
    }
    lnf = act.take<A>(N * C);
    lnf_mean = act.take<float>(N);
    lnf_rstd = act.take<float>(N);
    logits = ws.take<A>(N * Vp);
    losses = ws.take<float>(N);
    dres = ws.take<A>(N * C);
    dC = ws.take<A>(N * C);
    d3C = ws.take<A>(N * 3 * C);
    dF = ws.take<A>(N * F);
    tmp = flash ? ws.take<A>(N * C) : nullptr;
  }
};

struct GraphKey {
  int64_t B, T;
  float dloss;
  bool backward;
  auto tie() const { return std::tie(B, T, dloss, backward); }
  bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
};

}  // namespace

struct GptCuda::Impl {
  DeviceBuffer<float> master{0, MemCategory::kParams};  // fp32 master weights (the fp32 path computes with them)
  DeviceBuffer<bf16> p16{0, MemCategory::kParams};      // bf16 compute copy (bf16 path)
  DeviceBuffer<float> grads{0, MemCategory::kGrads};
  DeviceBuffer<float> m{0, MemCategory::kOptimizer}, v{0, MemCategory::kOptimizer};
  DeviceBuffer<int32_t> tokens{0, MemCategory::kWorkspace}, targets{0, MemCategory::kWorkspace};
  DeviceBuffer<uint8_t> act_mem{0, MemCategory::kActivations};
  DeviceBuffer<uint8_t> ws_mem{0, MemCategory::kWorkspace};
  Acts<float> a32;
  Acts<bf16> a16;
  int64_t B = 0, T = 0;  // reserved capacity

  int64_t wte = 0, wpe = 0, lnfw = 0, lnfb = 0;
  std::vector<LayerOff> lo;
  struct Range {
    int64_t begin, end;
    bool decay;
  };
  std::vector<Range> ranges;  // consecutive tensors with the same decay setting, merged

  bool use_graphs = false;
  bool graphs_broken = false;
  std::map<GraphKey, gpu::GraphExec> graphs;
  std::map<GraphKey, int> eager_runs;  // runs of each shape before its graph is recorded
  std::vector<float> host_losses;

  void drop_graphs() {
    for (auto& [k, g] : graphs) gpu::graph_destroy(g);
    graphs.clear();
    eager_runs.clear();
  }
};

GptCuda::GptCuda(const ModelConfig& cfg, Precision precision, uint64_t seed, int device)
    : layout_(cfg), prec_(precision), im_(std::make_unique<Impl>()) {
  cfg.validate();
  if (prec_ == Precision::kFp16) {
    throw_input("the CUDA model has no fp16 storage kernels: use --precision bf16 (or fp32)");
  }
  if (cfg.n_layer < 1) throw_input("the CUDA model needs at least one layer (n_layer = {})", cfg.n_layer);
  if (prec_ == Precision::kBf16 && !CudaBackend::flash_attention_supports(cfg.n_embd, cfg.n_head)) {
    throw_input("bf16 flash attention supports head sizes 64 and 128; {} has C = {}, NH = {} (head size {})", cfg.name,
                cfg.n_embd, cfg.n_head, cfg.n_embd / cfg.n_head);
  }
  if (cfg.n_embd % 8 != 0 || cfg.ffn % 8 != 0 || cfg.padded_vocab % 8 != 0) {
    throw_input("the CUDA model needs C = {}, ffn = {} and padded vocab = {} to be multiples of 8 (16-byte rows)",
                cfg.n_embd, cfg.ffn, cfg.padded_vocab);
  }
  be_ = make_cuda_backend(device);
  Impl& I = *im_;
  I.use_graphs = prec_ == Precision::kBf16;

  // Offsets of every tensor, and the AdamW decay ranges (as src/optim/optim.cc merges them).
  I.lo.resize(static_cast<size_t>(cfg.n_layer));
  for (const ParamTensor& t : layout_.tensors()) {
    LayerOff* l = t.layer >= 0 ? &I.lo[static_cast<size_t>(t.layer)] : nullptr;
    switch (t.kind) {
      case ParamKind::kWte: I.wte = t.offset; break;
      case ParamKind::kWpe: I.wpe = t.offset; break;
      case ParamKind::kLn1W: l->ln1w = t.offset; break;
      case ParamKind::kLn1B: l->ln1b = t.offset; break;
      case ParamKind::kQkvW: l->qkvw = t.offset; break;
      case ParamKind::kQkvB: l->qkvb = t.offset; break;
      case ParamKind::kAttnProjW: l->attprojw = t.offset; break;
      case ParamKind::kAttnProjB: l->attprojb = t.offset; break;
      case ParamKind::kLn2W: l->ln2w = t.offset; break;
      case ParamKind::kLn2B: l->ln2b = t.offset; break;
      case ParamKind::kFcW: l->fcw = t.offset; break;
      case ParamKind::kFcB: l->fcb = t.offset; break;
      case ParamKind::kFcProjW: l->fcprojw = t.offset; break;
      case ParamKind::kFcProjB: l->fcprojb = t.offset; break;
      case ParamKind::kLnfW: I.lnfw = t.offset; break;
      case ParamKind::kLnfB: I.lnfb = t.offset; break;
    }
    const int64_t b = t.offset, e = t.offset + t.numel;
    if (!I.ranges.empty() && I.ranges.back().decay == t.weight_decay && I.ranges.back().end == b) {
      I.ranges.back().end = e;
    } else {
      I.ranges.push_back({b, e, t.weight_decay});
    }
  }

  const int64_t n = layout_.total();
  I.master.resize(static_cast<size_t>(n));
  if (prec_ == Precision::kBf16) I.p16.resize(static_cast<size_t>(n));
  I.grads.resize(static_cast<size_t>(n), true);
  I.m.resize(static_cast<size_t>(n), true);
  I.v.resize(static_cast<size_t>(n), true);
  std::vector<float> host(static_cast<size_t>(n));
  init_params(layout_, seed, host.data());
  load_params(host.data());
}

GptCuda::~GptCuda() {
  if (!im_ || !be_) return;
  try {
    be_->synchronize();
  } catch (const std::exception& e) {
    log_warn("GptCuda: {}", e.what());
  }
  im_->drop_graphs();
}

void GptCuda::reserve(int64_t B, int64_t T) {
  const ModelConfig& c = config();
  if (B <= 0 || T <= 0) throw_input("batch {} and sequence length {} must be positive", B, T);
  if (T > c.n_ctx) throw_input("sequence length {} is longer than the model's context {} ({})", T, c.n_ctx, c.name);
  Impl& I = *im_;
  if (B == I.B && T == I.T) return;
  be_->synchronize();
  I.drop_graphs();
  const bool flash = prec_ == Precision::kBf16;
  Carver count_act(nullptr), count_ws(nullptr);
  if (flash) {
    I.a16.carve(count_act, count_ws, B, T, c, true);
  } else {
    I.a32.carve(count_act, count_ws, B, T, c, false);
  }
  I.act_mem.resize(0);
  I.ws_mem.resize(0);
  I.act_mem.resize(count_act.used());
  I.ws_mem.resize(count_ws.used());
  Carver act(I.act_mem.data()), ws(I.ws_mem.data());
  if (flash) {
    I.a16.carve(act, ws, B, T, c, true);
  } else {
    I.a32.carve(act, ws, B, T, c, false);
  }
  I.tokens.resize(static_cast<size_t>(B * T));
  I.targets.resize(static_cast<size_t>(B * T));
  I.host_losses.resize(static_cast<size_t>(B * T));
  I.B = B;
  I.T = T;
  log_debug("GptCuda {} {}: B {} T {}: activations {:.1f} MiB, workspace {:.1f} MiB", c.name, precision_name(prec_),
            B, T, I.act_mem.bytes() / 1048576.0, I.ws_mem.bytes() / 1048576.0);
}

void GptCuda::load_params(const float* host) {
  Impl& I = *im_;
  be_->synchronize();
  to_device(I.master, host, static_cast<size_t>(num_params()), be_->stream());
  if (prec_ == Precision::kBf16) be_->to_bf16(I.p16.data(), I.master.data(), num_params());
  be_->synchronize();
}

void GptCuda::download_params(float* host) {
  from_device(host, im_->master, static_cast<size_t>(num_params()), be_->stream());
}

void GptCuda::download_grads(float* host) {
  from_device(host, im_->grads, static_cast<size_t>(num_params()), be_->stream());
}

void GptCuda::zero_grads() {
  gpu::memset_async(im_->grads.data(), 0, im_->grads.bytes(), be_->stream());
}

double GptCuda::grad_norm_sq() { return be_->sum_squares(im_->grads.data(), num_params()); }

void GptCuda::adamw_step(float lr, int64_t t, float grad_scale, float beta1, float beta2, float eps,
                         float weight_decay) {
  Impl& I = *im_;
  for (const Impl::Range& r : I.ranges) {
    be_->adamw_bf16(I.master.data() + r.begin, prec_ == Precision::kBf16 ? I.p16.data() + r.begin : nullptr,
                    I.grads.data() + r.begin, I.m.data() + r.begin, I.v.data() + r.begin, r.end - r.begin, lr, beta1,
                    beta2, eps, r.decay ? weight_decay : 0.0f, t, grad_scale);
  }
}

void GptCuda::set_use_graphs(bool on) {
  be_->synchronize();
  im_->drop_graphs();
  im_->use_graphs = on;
  im_->graphs_broken = false;
}

bool GptCuda::graph_active() const { return im_->use_graphs && !im_->graphs_broken && !im_->graphs.empty(); }

int64_t GptCuda::param_bytes() const { return static_cast<int64_t>(im_->master.bytes() + im_->p16.bytes()); }
int64_t GptCuda::grad_bytes() const { return static_cast<int64_t>(im_->grads.bytes()); }
int64_t GptCuda::optimizer_bytes() const { return static_cast<int64_t>(im_->m.bytes() + im_->v.bytes()); }
int64_t GptCuda::activation_bytes() const { return static_cast<int64_t>(im_->act_mem.bytes()); }

// ------------------------------------------------------------------------------------------
// a step

void GptCuda::upload_tokens(const int32_t* in, const int32_t* tg, int64_t n) {
  const int32_t V = config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    if (in[i] < 0 || in[i] >= V) throw_input("input token {} at position {} is outside the vocabulary [0, {})", in[i], i, V);
    if (tg[i] < 0 || tg[i] >= V) throw_input("target token {} at position {} is outside the vocabulary [0, {})", tg[i], i, V);
  }
  // Synchronous copies on the compute stream: the previous step's work that reads these
  // buffers is ordered before them.
  to_device(im_->tokens, in, static_cast<size_t>(n), be_->stream());
  to_device(im_->targets, tg, static_cast<size_t>(n), be_->stream());
}

float GptCuda::read_mean_loss(int64_t n) {
  Impl& I = *im_;
  const float* losses = prec_ == Precision::kBf16 ? I.a16.losses : I.a32.losses;
  gpu::copy_d2h(I.host_losses.data(), losses, static_cast<size_t>(n) * sizeof(float), be_->stream());
  double s = 0.0;  // in order, in double, as the CPU model's head sums them
  for (int64_t i = 0; i < n; ++i) s += I.host_losses[static_cast<size_t>(i)];
  return static_cast<float>(s / static_cast<double>(n));
}

float GptCuda::forward_backward(const int32_t* host_inputs, const int32_t* host_targets, int64_t B, int64_t T,
                                float loss_scale) {
  reserve(std::max(B, im_->B), std::max(T, im_->T));
  upload_tokens(host_inputs, host_targets, B * T);
  run_step(B, T, loss_scale, true);
  return read_mean_loss(B * T);
}

float GptCuda::forward_loss(const int32_t* host_inputs, const int32_t* host_targets, int64_t B, int64_t T) {
  reserve(std::max(B, im_->B), std::max(T, im_->T));
  upload_tokens(host_inputs, host_targets, B * T);
  run_step(B, T, 0.0f, false);
  return read_mean_loss(B * T);
}

void GptCuda::run_step(int64_t B, int64_t T, float dloss, bool backward) {
  Impl& I = *im_;
  auto eager = [&] {
    if (prec_ == Precision::kBf16) {
      forward_bf16(B, T);
      head_loss(B, T, backward ? dloss : 0.0f);
      if (backward) backward_bf16(B, T, dloss);
    } else {
      forward_fp32(B, T);
      head_loss(B, T, backward ? dloss : 0.0f);
      if (backward) backward_fp32(B, T, dloss);
    }
  };
  if (!I.use_graphs || I.graphs_broken) {
    eager();
    return;
  }
  const GraphKey key{B, T, dloss, backward};
  if (auto it = I.graphs.find(key); it != I.graphs.end()) {
    gpu::graph_launch(it->second, be_->stream());
    return;
  }
  // The first run of a shape is eager: it grows the backend's scratch and fills cuBLASLt's
  // algorithm cache, neither of which may happen during a capture.
  if (I.eager_runs[key]++ == 0) {
    eager();
    return;
  }
  be_->synchronize();
  gpu::capture_begin(be_->stream());
  std::string why;
  try {
    eager();
  } catch (const std::exception& e) {
    why = e.what();
  }
  gpu::GraphExec g = gpu::capture_end(be_->stream(), why.empty() ? &why : nullptr);
  if (g == nullptr || !why.empty()) {
    gpu::graph_destroy(g);
    log_warn("GptCuda: recording a CUDA graph failed ({}); running without graphs", why);
    I.graphs_broken = true;
    eager();
    return;
  }
  I.graphs.emplace(key, g);
  gpu::graph_launch(g, be_->stream());
}

// --- bf16: llm.c's layout. LayerNorm 1 of layer l+1 (and the final one) is fused with the
// residual add at the end of layer l; projection outputs go through `tmp` into that add.

void GptCuda::forward_bf16(int64_t B, int64_t T) {
  CudaBackend& be = *be_;
  Impl& I = *im_;
  Acts<bf16>& A = I.a16;
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.n_embd, F = c.ffn, NH = c.n_head;
  const int L = c.n_layer;
  const float eps = c.ln_eps;
  const bf16* w = I.p16.data();
  be.embedding_forward_bf16(A.encoded, I.tokens.data(), w + I.wte, w + I.wpe, B, T, C);
  {
    LayerActs<bf16>& a = A.layers[0];
    be.layernorm_forward_bf16(a.ln1, a.ln1_mean, a.ln1_rstd, A.encoded, w + I.lo[0].ln1w, w + I.lo[0].ln1b, N, C, eps);
  }
  for (int l = 0; l < L; ++l) {
    const LayerOff& o = I.lo[static_cast<size_t>(l)];
    LayerActs<bf16>& a = A.layers[static_cast<size_t>(l)];
    const bf16* x = l == 0 ? A.encoded : A.layers[static_cast<size_t>(l - 1)].res3;
    // qkv (N,3C) = ln1 @ Wqkv + b
    be.matmul_forward_bf16(a.qkv, nullptr, a.ln1, w + o.qkvw, w + o.qkvb, N, C, 3 * C, Epilogue::kBias);
    // atty (N,C), lse (B,NH,T)
    be.attention_forward_bf16(a.atty, a.lse, a.qkv, B, T, C, NH);
    // res2 = x + (atty @ Wproj + b); ln2 = LN(res2)
    be.matmul_forward_bf16(A.tmp, nullptr, a.atty, w + o.attprojw, w + o.attprojb, N, C, C, Epilogue::kBias);
    be.residual_layernorm_forward_bf16(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, A.tmp, w + o.ln2w, w + o.ln2b, N, C,
                                       eps);
    // fch = ln2 @ Wfc + b (kept for backward), fch_gelu = gelu(fch)
    be.matmul_forward_bf16(a.fch_gelu, a.fch, a.ln2, w + o.fcw, w + o.fcb, N, C, F, Epilogue::kGeluBias);
    // res3 = res2 + (fch_gelu @ Wfcproj + b); the next LayerNorm (layer l+1's first, or the final one)
    be.matmul_forward_bf16(A.tmp, nullptr, a.fch_gelu, w + o.fcprojw, w + o.fcprojb, N, F, C, Epilogue::kBias);
    if (l + 1 < L) {
      LayerActs<bf16>& nx = A.layers[static_cast<size_t>(l + 1)];
      const LayerOff& on = I.lo[static_cast<size_t>(l + 1)];
      be.residual_layernorm_forward_bf16(a.res3, nx.ln1, nx.ln1_mean, nx.ln1_rstd, a.res2, A.tmp, w + on.ln1w,
                                         w + on.ln1b, N, C, eps);
    } else {
      be.residual_layernorm_forward_bf16(a.res3, A.lnf, A.lnf_mean, A.lnf_rstd, a.res2, A.tmp, w + I.lnfw,
                                         w + I.lnfb, N, C, eps);
    }
  }
}

void GptCuda::head_loss(int64_t B, int64_t T, float dloss) {
  CudaBackend& be = *be_;
  Impl& I = *im_;
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.n_embd, V = c.vocab_size, Vp = c.padded_vocab;
  float* g = I.grads.data();
  if (prec_ == Precision::kBf16) {
    Acts<bf16>& A = I.a16;
    const bf16* wte = I.p16.data() + I.wte;
    // logits (N,Vp) = lnf @ wte^T; the padding rows of wte are zero, and outside the softmax.
    be.gemm_bf16(false, true, N, Vp, C, 1.0f, A.lnf, C, wte, C, 0.0f, A.logits, Vp);
    // losses (N); with dloss: dlogits in place (0 on the padding columns)
    be.softmax_cross_entropy_bf16(A.logits, A.losses, I.targets.data(), N, V, Vp, dloss);
    if (dloss == 0.0f) return;
    // dwte (Vp,C) += dlogits^T lnf (fp32); dlnf (N,C) = dlogits wte -> dC
    be.gemm_bf16(true, false, Vp, C, N, 1.0f, A.logits, Vp, A.lnf, C, 1.0f, g + I.wte, C);
    be.gemm_bf16(false, false, N, C, Vp, 1.0f, A.logits, Vp, wte, C, 0.0f, A.dC, C);
  } else {
    Acts<float>& A = I.a32;
    const float* wte = I.master.data() + I.wte;
    be.gemm(false, true, N, Vp, C, 1.0f, A.lnf, C, wte, C, 0.0f, A.logits, Vp);
    be.softmax_cross_entropy(A.logits, A.losses, I.targets.data(), N, V, Vp, dloss);
    if (dloss == 0.0f) return;
    be.gemm(true, false, Vp, C, N, 1.0f, A.logits, Vp, A.lnf, C, 1.0f, g + I.wte, C);
    be.gemm(false, false, N, C, Vp, 1.0f, A.logits, Vp, wte, C, 0.0f, A.dC, C);
  }
}

void GptCuda::backward_bf16(int64_t B, int64_t T, float /*dloss*/) {
  CudaBackend& be = *be_;
  Impl& I = *im_;
  Acts<bf16>& A = I.a16;
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.n_embd, F = c.ffn, NH = c.n_head;
  const int L = c.n_layer;
  const bf16* w = I.p16.data();
  float* g = I.grads.data();
  // dres (N,C) = d(res3 of the last layer) through the final LayerNorm; dlnf is in dC.
  gpu::memset_async(A.dres, 0, static_cast<size_t>(N * C) * sizeof(bf16), be.stream());
  be.layernorm_backward_bf16(A.dres, g + I.lnfw, g + I.lnfb, A.dC, A.layers.back().res3, w + I.lnfw, A.lnf_mean,
                             A.lnf_rstd, N, C);
  for (int l = L - 1; l >= 0; --l) {
    const LayerOff& o = I.lo[static_cast<size_t>(l)];
    LayerActs<bf16>& a = A.layers[static_cast<size_t>(l)];
    const bf16* x = l == 0 ? A.encoded : A.layers[static_cast<size_t>(l - 1)].res3;
    // MLP: dF = (dres @ Wfcproj^T) * gelu'(fch) (the DGELU epilogue); dWfcproj, dbfcproj
    be.matmul_backward_bf16(A.dF, g + o.fcprojw, g + o.fcprojb, A.dres, a.fch_gelu, w + o.fcprojw, N, F, C, a.fch);
    be.matmul_backward_bf16(A.dC, g + o.fcw, g + o.fcb, A.dF, a.ln2, w + o.fcw, N, C, F);
    // dres += LN2 backward: now d(res2)
    be.layernorm_backward_bf16(A.dres, g + o.ln2w, g + o.ln2b, A.dC, a.res2, w + o.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
    // attention
    be.matmul_backward_bf16(A.dC, g + o.attprojw, g + o.attprojb, A.dres, a.atty, w + o.attprojw, N, C, C);
    be.attention_backward_bf16(A.d3C, A.dC, a.qkv, a.atty, a.lse, B, T, C, NH);
    be.matmul_backward_bf16(A.dC, g + o.qkvw, g + o.qkvb, A.d3C, a.ln1, w + o.qkvw, N, C, 3 * C);
    // dres += LN1 backward: now d(x), the layer's input
    be.layernorm_backward_bf16(A.dres, g + o.ln1w, g + o.ln1b, A.dC, x, w + o.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
  }
  be.embedding_backward_bf16(g + I.wte, g + I.wpe, A.dres, I.tokens.data(), B, T, C);
}

// --- fp32: model/gpt.cc's ops one for one (P_ = 1)

void GptCuda::forward_fp32(int64_t B, int64_t T) {
  CudaBackend& be = *be_;
  Impl& I = *im_;
  Acts<float>& A = I.a32;
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.n_embd, F = c.ffn, NH = c.n_head;
  const int L = c.n_layer;
  const float eps = c.ln_eps;
  const float* w = I.master.data();
  be.embedding_forward(A.encoded, I.tokens.data(), w + I.wte, w + I.wpe, B, T, C);
  for (int l = 0; l < L; ++l) {
    const LayerOff& o = I.lo[static_cast<size_t>(l)];
    LayerActs<float>& a = A.layers[static_cast<size_t>(l)];
    const float* x = l == 0 ? A.encoded : A.layers[static_cast<size_t>(l - 1)].res3;
    be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w + o.ln1w, w + o.ln1b, N, C, eps);
    be.matmul_forward(a.qkv, a.ln1, w + o.qkvw, w + o.qkvb, N, C, 3 * C, false);
    be.attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    be.add_bias(a.res2, x, w + o.attprojb, N, C);
    be.matmul_forward(a.res2, a.atty, w + o.attprojw, nullptr, N, C, C, true);
    be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w + o.ln2w, w + o.ln2b, N, C, eps);
    be.matmul_forward(a.fch, a.ln2, w + o.fcw, w + o.fcb, N, C, F, false);
    be.gelu_forward(a.fch_gelu, a.fch, N * F);
    be.add_bias(a.res3, a.res2, w + o.fcprojb, N, C);
    be.matmul_forward(a.res3, a.fch_gelu, w + o.fcprojw, nullptr, N, F, C, true);
  }
  be.layernorm_forward(A.lnf, A.lnf_mean, A.lnf_rstd, A.layers.back().res3, w + I.lnfw, w + I.lnfb, N, C, eps);
}

void GptCuda::backward_fp32(int64_t B, int64_t T, float /*dloss*/) {
  CudaBackend& be = *be_;
  Impl& I = *im_;
  Acts<float>& A = I.a32;
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.n_embd, F = c.ffn, NH = c.n_head;
  const int L = c.n_layer;
  const float* w = I.master.data();
  float* g = I.grads.data();
  gpu::memset_async(A.dres, 0, static_cast<size_t>(N * C) * sizeof(float), be.stream());
  be.layernorm_backward(A.dres, g + I.lnfw, g + I.lnfb, A.dC, A.layers.back().res3, w + I.lnfw, A.lnf_mean,
                        A.lnf_rstd, N, C);
  for (int l = L - 1; l >= 0; --l) {
    const LayerOff& o = I.lo[static_cast<size_t>(l)];
    LayerActs<float>& a = A.layers[static_cast<size_t>(l)];
    const float* x = l == 0 ? A.encoded : A.layers[static_cast<size_t>(l - 1)].res3;
    be.matmul_backward(A.dF, g + o.fcprojw, g + o.fcprojb, A.dres, a.fch_gelu, w + o.fcprojw, N, F, C);
    be.gelu_backward(A.dF, a.fch, A.dF, N * F);
    be.matmul_backward(A.dC, g + o.fcw, g + o.fcb, A.dF, a.ln2, w + o.fcw, N, C, F);
    be.layernorm_backward(A.dres, g + o.ln2w, g + o.ln2b, A.dC, a.res2, w + o.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
    be.matmul_backward(A.dC, g + o.attprojw, g + o.attprojb, A.dres, a.atty, w + o.attprojw, N, C, C);
    be.attention_backward(A.d3C, A.dC, a.qkv, a.att, B, T, C, NH);
    be.matmul_backward(A.dC, g + o.qkvw, g + o.qkvb, A.d3C, a.ln1, w + o.qkvw, N, C, 3 * C);
    be.layernorm_backward(A.dres, g + o.ln1w, g + o.ln1b, A.dC, x, w + o.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
  }
  be.embedding_backward(g + I.wte, g + I.wpe, A.dres, I.tokens.data(), B, T, C);
}

// ------------------------------------------------------------------------------------------

double measure_bf16_gemm_flops(CudaBackend& be, int64_t n, int reps) {
  WEFT_CHECK(n > 0 && reps > 0, "measure_bf16_gemm_flops: n = {}, reps = {}", n, reps);
  const size_t nn = static_cast<size_t>(n * n);
  // Values in [-1, 1) (not zeros: the power draw, hence the clock, depends on the data).
  std::vector<bf16> host(nn);
  uint32_t s = 12345u;
  for (size_t i = 0; i < nn; ++i) {
    s = s * 1664525u + 1013904223u;
    host[i] = to_bf16(static_cast<float>(s >> 8) / 8388608.0f - 1.0f);
  }
  DeviceBuffer<bf16> a(nn, MemCategory::kWorkspace), b(nn, MemCategory::kWorkspace), c(nn, MemCategory::kWorkspace);
  to_device(a, host.data(), nn, be.stream());
  to_device(b, host.data(), nn, be.stream());
  gpu::Event e0 = gpu::event_create(true), e1 = gpu::event_create(true);
  double best = 0.0;
  for (int r = 0; r < reps + 3; ++r) {
    gpu::event_record(e0, be.stream());
    be.gemm_bf16(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    gpu::event_record(e1, be.stream());
    be.synchronize();
    const double ms = gpu::event_elapsed_ms(e0, e1);
    if (r >= 3 && ms > 0.0) best = std::max(best, 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3));
  }
  gpu::event_destroy(e0);
  gpu::event_destroy(e1);
  return best;
}

}  // namespace weft::cuda
