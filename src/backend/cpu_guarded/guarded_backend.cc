// cpu-guarded (guarded_backend.h): every call checks its device pointers, opens the buffers
// they fall in, runs the CPU backend and closes them again.
#include "backend/cpu_guarded/guarded_backend.h"

#include <array>
#include <functional>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <span>
#include <type_traits>

#include "backend/cpu_guarded/fence.h"
#include "core/error.h"
#include "core/log.h"

namespace weft {
namespace {

using guarded::Region;

// A device range a call uses: bytes 0 for an op's pointer (its extent is the op's business:
// only the buffer it starts in is opened, so running past that buffer faults).
struct Arg {
  const void* p;
  size_t bytes;
};

template <typename T>
Arg as_arg(T x) {
  if constexpr (std::is_pointer_v<T>) {
    return {x, 0};
  } else if constexpr (std::is_same_v<T, View> || std::is_same_v<T, CView>) {
    return {x.data, 0};
  } else {
    return {nullptr, 0};
  }
}

class GuardedBackend final : public Backend {
 public:
  explicit GuardedBackend(const GuardedOptions& o) : cpu_(make_cpu_backend()), host_access_(o.host_access) {
    if (o.install_handler) guarded::install_fault_handler(o.backtrace);
  }
  ~GuardedBackend() override {
    release_staging();
    if (!regions_.empty()) log_warn("cpu-guarded: {} device buffers still allocated at destruction", regions_.size());
    for (auto& [data, r] : regions_) guarded::unmap_region(r);
  }

  std::string name() const override { return "cpu-guarded"; }

  // --- the device contract ---
  void copy_to_device(void* dst, size_t dst_offset, const void* src, size_t bytes) override {
    check_host(src, "copy_to_device", "source");
    Opened o(*this, "copy_to_device", {{static_cast<char*>(dst) + dst_offset, bytes}});
    cpu_->copy_to_device(dst, dst_offset, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t src_offset, size_t bytes) override {
    check_host(dst, "copy_to_host", "destination");
    Opened o(*this, "copy_to_host", {{static_cast<const char*>(src) + src_offset, bytes}});
    cpu_->copy_to_host(dst, src, src_offset, bytes);
  }
  void copy_device(void* dst, size_t dst_offset, const void* src, size_t src_offset, size_t bytes) override {
    Opened o(*this, "copy_device",
             {{static_cast<char*>(dst) + dst_offset, bytes}, {static_cast<const char*>(src) + src_offset, bytes}});
    cpu_->copy_device(dst, dst_offset, src, src_offset, bytes);
  }
  void fill(void* dst, DType dt, int64_t first, int64_t count, float value) override {
    Opened o(*this, "fill", {{static_cast<char*>(dst) + dtype_bytes(dt, first), dtype_bytes(dt, count)}});
    cpu_->fill(dst, dt, first, count, value);
  }
  void synchronize() override { cpu_->synchronize(); }
  // The CPU backend's products (settings, kernels): the same bits as cpu in every mode.
  void set_products(const ProductSettings& s) override {
    cpu_->set_products(s);
    products_ = s;
  }
  std::string product_kernel() const override { return cpu_->product_kernel(); }
  bool is_device_memory(const void* p) const override { return find(p, 1) != nullptr; }
  bool begin_host_access(void* p, size_t bytes) override {
    Region* r = lookup("begin_host_access", 1, {p, bytes});
    if (host_access_) guarded::open_region(*r);
    return host_access_;
  }
  void end_host_access(void* p, size_t bytes) override {
    guarded::close_region(*lookup("end_host_access", 1, {p, bytes}));
  }

  // --- ops: the CPU backend's, on opened buffers ---
  void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc) override {
    run<&Backend::gemm_f32>("gemm", ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  void matmul_forward_f32(float* out, const float* inp, const float* w, const float* bias, int64_t N, int64_t IN,
                      int64_t OUT, bool accumulate) override {
    run<&Backend::matmul_forward_f32>("matmul_forward", out, inp, w, bias, N, IN, OUT, accumulate);
  }
  void matmul_backward_f32(float* dinp, float* dw, float* dbias, const float* dout, const float* inp, const float* w,
                       int64_t N, int64_t IN, int64_t OUT) override {
    run<&Backend::matmul_backward_f32>("matmul_backward", dinp, dw, dbias, dout, inp, w, N, IN, OUT);
  }
  void embedding_forward_f32(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                         int64_t T, int64_t C, int64_t v0, int64_t vrows) override {
    run<&Backend::embedding_forward_f32>("embedding_forward", out, tokens, wte, wpe, B, T, C, v0, vrows);
  }
  void embedding_backward_f32(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                          int64_t T, int64_t C, int64_t v0, int64_t vrows) override {
    run<&Backend::embedding_backward_f32>("embedding_backward", dwte, dwpe, dout, tokens, B, T, C, v0, vrows);
  }
  void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override {
    run<&Backend::layernorm_forward_f32>("layernorm_forward", out, mean, rstd, inp, w, b, N, C, eps);
  }
  void layernorm_backward_f32(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) override {
    run<&Backend::layernorm_backward_f32>("layernorm_backward", dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void add_bias_f32(float* out, const float* inp, const float* bias, int64_t N, int64_t C) override {
    run<&Backend::add_bias_f32>("add_bias", out, inp, bias, N, C);
  }
  void add_f32(float* out, const float* a, const float* b, int64_t n) override {
    run<&Backend::add_f32>("add", out, a, b, n);
  }
  void gelu_forward_f32(float* out, const float* inp, int64_t n) override {
    run<&Backend::gelu_forward_f32>("gelu_forward", out, inp, n);
  }
  void gelu_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override {
    run<&Backend::gelu_backward_f32>("gelu_backward", dinp, inp, dout, n);
  }
  void attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) override {
    run<&Backend::attention_forward_f32>("attention_forward", out, att, qkv, B, T, C, NH);
  }
  void attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                          int64_t C, int64_t NH) override {
    run<&Backend::attention_backward_f32>("attention_backward", dqkv, dout, qkv, att, B, T, C, NH);
  }
  void bidir_attention_forward_f32(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                               int64_t NH) override {
    run<&Backend::bidir_attention_forward_f32>("bidir_attention_forward", out, att, qkv, B, T, C, NH);
  }
  void bidir_attention_backward_f32(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                                int64_t T, int64_t C, int64_t NH) override {
    run<&Backend::bidir_attention_backward_f32>("bidir_attention_backward", dqkv, dout, qkv, att, B, T, C, NH);
  }
  // The CPU backend's typed self-attention and LayerNorm backward, which read 16-bit operands in
  // place (no staging).
  void attention_forward(View out, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) override {
    run<&Backend::attention_forward>(
        "attention_forward", out, att, qkv, B, T, C, NH);
  }
  void attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                          int64_t NH) override {
    run<&Backend::attention_backward>("attention_backward", dqkv, dout, qkv, att, B, T, C, NH);
  }
  void bidir_attention_forward(View out, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) override {
    run<&Backend::bidir_attention_forward>("bidir_attention_forward", out, att, qkv, B, T, C, NH);
  }
  void bidir_attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                                int64_t NH) override {
    run<&Backend::bidir_attention_backward>("bidir_attention_backward", dqkv, dout, qkv, att, B, T, C, NH);
  }
  void layernorm_backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean, CView rstd,
                          int64_t N, int64_t C) override {
    run<&Backend::layernorm_backward>("layernorm_backward", dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void gather_rows_f32(float* out, const float* x, const int32_t* idx, int64_t M, int64_t C) override {
    run<&Backend::gather_rows_f32>("gather_rows", out, x, idx, M, C);
  }
  void segment_reduce_f32(float* out, int32_t* arg, const float* x, const int32_t* perm, const int32_t* offsets,
                          int64_t S, int64_t C, SegmentOp op, bool accumulate) override {
    run<&Backend::segment_reduce_f32>("segment_reduce", out, arg, x, perm, offsets, S, C, op, accumulate);
  }
  void segment_broadcast_f32(float* dx, const float* dout, const int32_t* perm, const int32_t* offsets, int64_t S,
                             int64_t C, bool mean, bool accumulate) override {
    run<&Backend::segment_broadcast_f32>("segment_broadcast", dx, dout, perm, offsets, S, C, mean, accumulate);
  }
  void segment_arg_backward_f32(float* dx, const float* dout, const int32_t* arg, int64_t S, int64_t C) override {
    run<&Backend::segment_arg_backward_f32>("segment_arg_backward", dx, dout, arg, S, C);
  }
  void activation_forward_f32(float* out, const float* inp, int64_t n, Activation a) override {
    run<&Backend::activation_forward_f32>("activation_forward", out, inp, n, a);
  }
  void activation_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n, Activation a,
                               bool accumulate) override {
    run<&Backend::activation_backward_f32>("activation_backward", dinp, inp, dout, n, a, accumulate);
  }
  void mul_f32(float* out, const float* a, const float* b, int64_t n, bool accumulate) override {
    run<&Backend::mul_f32>("mul", out, a, b, n, accumulate);
  }
  void scale_rows_f32(float* out, const float* x, const float* s, int64_t N, int64_t C, bool accumulate) override {
    run<&Backend::scale_rows_f32>("scale_rows", out, x, s, N, C, accumulate);
  }
  void rmsnorm_forward_f32(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                           float eps) override {
    run<&Backend::rmsnorm_forward_f32>("rmsnorm_forward", out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward_f32(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, int64_t N, int64_t C) override {
    run<&Backend::rmsnorm_backward_f32>("rmsnorm_backward", dinp, dw, dout, inp, w, rstd, N, C);
  }
  void attention_forward_alibi_f32(float* out, float* att, const float* qkv, const float* slopes, int64_t B, int64_t T,
                                   int64_t C, int64_t NH) override {
    run<&Backend::attention_forward_alibi_f32>("attention_forward_alibi", out, att, qkv, slopes, B, T, C, NH);
  }
  void gelu_erf_forward_f32(float* out, const float* inp, int64_t n) override {
    run<&Backend::gelu_erf_forward_f32>("gelu_erf_forward", out, inp, n);
  }
  void gelu_erf_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) override {
    run<&Backend::gelu_erf_backward_f32>("gelu_erf_backward", dinp, inp, dout, n);
  }
  void rope_f32(float* x, const float* cos, const float* sin, int64_t N, int64_t T, int64_t ld, int64_t heads,
                int64_t hd, int64_t rot, bool inverse) override {
    run<&Backend::rope_f32>("rope", x, cos, sin, N, T, ld, heads, hd, rot, inverse);
  }
  void swiglu_forward_f32(float* out, const float* pre, int64_t N, int64_t F) override {
    run<&Backend::swiglu_forward_f32>("swiglu_forward", out, pre, N, F);
  }
  void swiglu_backward_f32(float* dpre, const float* pre, const float* dout, int64_t N, int64_t F) override {
    run<&Backend::swiglu_backward_f32>("swiglu_backward", dpre, pre, dout, N, F);
  }
  void expand_kv_f32(float* qkv, const float* qkvc, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override {
    run<&Backend::expand_kv_f32>("expand_kv", qkv, qkvc, N, heads, kv_heads, hd);
  }
  void reduce_kv_f32(float* dqkvc, const float* dqkv, int64_t N, int64_t heads, int64_t kv_heads, int64_t hd) override {
    run<&Backend::reduce_kv_f32>("reduce_kv", dqkvc, dqkv, N, heads, kv_heads, hd);
  }
  void segment_std_f32(float* out, const float* x, const float* mean, const int32_t* perm, const int32_t* offsets,
                       int64_t S, int64_t C, float var_floor) override {
    run<&Backend::segment_std_f32>("segment_std", out, x, mean, perm, offsets, S, C, var_floor);
  }
  void segment_std_backward_f32(float* dx, const float* dout, const float* x, const float* mean, const float* std,
                                const int32_t* perm, const int32_t* offsets, int64_t S, int64_t C) override {
    run<&Backend::segment_std_backward_f32>("segment_std_backward", dx, dout, x, mean, std, perm, offsets, S, C);
  }
  void batchnorm_inference_f32(float* out, const float* x, const float* mean, const float* var, const float* w,
                               const float* b, int64_t N, int64_t C, float eps) override {
    run<&Backend::batchnorm_inference_f32>("batchnorm_inference", out, x, mean, var, w, b, N, C, eps);
  }
  void batchnorm_forward_f32(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                             int64_t N, int64_t C, float eps) override {
    run<&Backend::batchnorm_forward_f32>("batchnorm_forward", out, mean, rstd, x, w, b, N, C, eps);
  }
  void batchnorm_backward_f32(float* dx, float* dw, float* db, const float* dout, const float* x, const float* w,
                              const float* mean, const float* rstd, int64_t N, int64_t C) override {
    run<&Backend::batchnorm_backward_f32>("batchnorm_backward", dx, dw, db, dout, x, w, mean, rstd, N, C);
  }
  void query_attention_forward_f32(float* out, float* att, const float* q, const float* kv, int64_t N, int64_t S,
                               int64_t C, int64_t NH) override {
    run<&Backend::query_attention_forward_f32>("query_attention_forward", out, att, q, kv, N, S, C, NH);
  }
  void query_attention_backward_f32(float* dq, float* dkv, const float* dout, const float* q, const float* kv,
                                const float* att, int64_t N, int64_t S, int64_t C, int64_t NH) override {
    run<&Backend::query_attention_backward_f32>("query_attention_backward", dq, dkv, dout, q, kv, att, N, S, C, NH);
  }
  void weighted_mse_f32(float* row_loss, float* grad, const float* pred, const float* target, const float* w, int64_t R,
                    int64_t K, float dloss) override {
    run<&Backend::weighted_mse_f32>("weighted_mse", row_loss, grad, pred, target, w, R, K, dloss);
  }
  void softmax_cross_entropy_f32(float* logits, float* losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                             float dloss) override {
    run<&Backend::softmax_cross_entropy_f32>("softmax_cross_entropy", logits, losses, targets, N, V, Vp, dloss);
  }
  void ce_row_max_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, float* max) override {
    run<&Backend::ce_row_max_f32>("ce_row_max", logits, N, ld, cols, max);
  }
  void ce_row_sumexp_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const float* max,
                     float* sum) override {
    run<&Backend::ce_row_sumexp_f32>("ce_row_sumexp", logits, N, ld, cols, max, sum);
  }
  void ce_target_logit_f32(const float* logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                       float* tl) override {
    run<&Backend::ce_target_logit_f32>("ce_target_logit", logits, N, ld, cols, targets, v0, tl);
  }
  void ce_loss_f32(float* losses, const float* max, const float* sum, const float* tl, int64_t n) override {
    run<&Backend::ce_loss_f32>("ce_loss", losses, max, sum, tl, n);
  }
  void ce_grad_f32(float* logits, int64_t N, int64_t ld, int64_t cols, const float* max, const float* sum,
               const int32_t* targets, int64_t v0, float dloss) override {
    run<&Backend::ce_grad_f32>("ce_grad", logits, N, ld, cols, max, sum, targets, v0, dloss);
  }
  void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
             float weight_decay, int64_t t, float grad_scale) override {
    run<&Backend::adamw>("adamw", p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
  }
  double sum_squares(const float* x, int64_t n) override { return run<&Backend::sum_squares>("sum_squares", x, n); }
  void scale(float* x, float s, int64_t n) override { run<&Backend::scale>("scale", x, s, n); }
  void round_to(float* x, int64_t n, Precision p) override { run<&Backend::round_to>("round_to", x, n, p); }

 protected:
  void* device_alloc_impl(size_t bytes, MemCategory c) override {
    Region r = guarded::map_region(bytes, c);
    regions_.emplace(r.data, r);
    return reinterpret_cast<void*>(r.data);
  }
  void device_free_impl(void* p, size_t bytes) noexcept override {
    auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
    if (it == regions_.end() || it->second.bytes != bytes) {
      log_line(LogLevel::kError, fmt::format("cpu-guarded: device_free of {} ({} bytes): not an allocation of this "
                                             "backend of that size", p, bytes));
      std::abort();
    }
    guarded::unmap_region(it->second);
    regions_.erase(it);
  }

 private:
  // Opens the buffers of a call's device ranges for its duration (nested opens count).
  class Opened {
   public:
    Opened(GuardedBackend& g, const char* call, std::span<const Arg> args) {
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].p) open_[n_++] = g.lookup(call, i + 1, args[i]);
      }
      for (int i = 0; i < n_; ++i) guarded::open_region(*open_[i]);
      guarded::set_current_call(call);
    }
    Opened(GuardedBackend& g, const char* call, std::initializer_list<Arg> args)
        : Opened(g, call, std::span<const Arg>(args.begin(), args.size())) {}
    ~Opened() {
      guarded::set_current_call(nullptr);
      for (int i = 0; i < n_; ++i) guarded::close_region(*open_[i]);
    }
    Opened(const Opened&) = delete;
    Opened& operator=(const Opened&) = delete;

   private:
    std::array<Region*, 16> open_{};
    int n_ = 0;
  };

  template <auto Fn, typename... A>
  std::invoke_result_t<decltype(Fn), Backend*, A...> run(const char* call, A... args) {
    static_assert(sizeof...(A) <= 16);
    const std::array<Arg, sizeof...(A)> ptrs{as_arg(args)...};
    Opened o(*this, call, std::span<const Arg>(ptrs));
    return (cpu_.get()->*Fn)(args...);
  }

  // The live region holding [p, p + n) (p may be its end when n is 0), or nullptr.
  Region* find(const void* p, size_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    auto it = regions_.upper_bound(a);
    if (it == regions_.begin()) return nullptr;
    --it;
    return it->second.contains(a, n) ? &it->second : nullptr;
  }
  Region* lookup(const char* call, size_t index, Arg a) const {
    Region* r = find(a.p, a.bytes);
    if (!r) {
      throw_runtime("cpu-guarded: {}: argument {} ({} + {} bytes) is not inside a device buffer of this backend "
                    "(host memory, a freed buffer, another backend's, or a range past the end)",
                    call, index, a.p, a.bytes);
    }
    return r;
  }
  void check_host(const void* p, const char* call, const char* what) const {
    if (find(p, 0)) throw_runtime("cpu-guarded: {}: the {} {} is device memory (use copy_device)", call, what, p);
  }

  std::unique_ptr<Backend> cpu_;
  bool host_access_;
  mutable std::map<uintptr_t, Region> regions_;  // by data start (mutable: find hands out regions to open)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_guarded_backend(const GuardedOptions& options) {
  return std::make_unique<GuardedBackend>(options);
}

}  // namespace weft
