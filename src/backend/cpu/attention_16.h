// The CPU backend's self-attention on 16-bit tensors (issue 32: the CPU kernels read their
// storage type and compute in fp32). The typed defaults (typed_defaults.cc) would widen a whole
// sample's operands, its (NH, T, T) probabilities included, into the staging arena; these read
// each (sample, head)'s q, k, v (and dout, probabilities) rows in place into per-thread fp32
// scratch and round what they write row by row. Each step is the fp32 kernel's own (the same
// products on the same values, cpu_math.h's rows), so the results are bitwise those of the
// typed defaults on the fp32 kernels. Operands may mix f32, bf16 and f16 (a tensor-parallel dout
// is f32).
#pragma once
#include <cstdint>

#include "backend/cpu/attention_products.h"
#include "backend/cpu/rows_16.h"
#include "core/view.h"

namespace weft::cpu {

class Attention16 {
 public:
  // As Backend::attention_forward (causal) / bidir_attention_forward: out (B,T,C), att
  // (B,NH,T,T) probabilities, qkv (B,T,3C).
  void forward(View out, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH, bool causal);
  // As Backend::attention_backward / bidir_attention_backward: dqkv (B,T,3C) written.
  void backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C, int64_t NH,
                bool causal);
  // The library of its fp32 products (attention_products.h).
  void set_gemm(AttentionGemm g) { gemm_ = g; }

 private:
  ThreadScratch scratch_;
  AttentionGemm gemm_ = AttentionGemm::kOpenblas;
};

}  // namespace weft::cpu
