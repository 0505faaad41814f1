// Where the model finds its parameters and puts its gradients. The model is written once for
// one device; data parallelism and ZeRO are implemented around it as ParamStores that may
// gather parameters just before a group is used, hand out transient gradient buffers, and
// start reducing a group's gradients as soon as its backward is done.
//
// The flat buffer is cut into groups, each a contiguous element range (ParamLayout::group_range):
//   group 0        embeddings: wte, wpe (wte is also the output head)
//   group 1 .. L   the layers
//   group L + 1    the final LayerNorm
// Order of calls in one micro-batch:
//   forward:  acquire(0) [held to the end of backward], acquire(l)/release(l) for each layer,
//             acquire(L+1), head (group 0)
//   backward: grads(0) for the head, grads(L+1) ... ready(L+1), then for l = L .. 1:
//             acquire(l), grads(l), release(l), ready(l); finally the embedding backward into
//             grads(0), ready(0), release(0) and release(L+1).
#pragma once
#include <cstdint>

#include "core/view.h"

namespace weft {

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  // Parameters of group g, laid out as in the flat buffer from the group's first element, in
  // the store's storage dtype (fp32; 16-bit working parameters in a bf16/fp16 run). Valid
  // until release(g).
  virtual CView acquire(int g) = 0;
  virtual void release(int g) = 0;
  // The dtype acquire() hands out.
  virtual DType param_dtype() const { return DType::kF32; }
  // Gradient accumulator of group g for the current micro-batch (same layout as acquire).
  // The model adds into it; the store decides whether it starts at zero or carries the
  // previous micro-batches' sum.
  virtual float* grads(int g) = 0;
  // Group g's gradient contribution of this micro-batch is complete.
  virtual void ready(int g) = 0;
  // The output head has added its (dense) part of the tied embedding's gradient.
  virtual void head_done() {}
  // The embedding lookup's gradient: the store may take it over (returns true), e.g. to
  // exchange the few (token, gradient row) pairs instead of reducing the whole (dense) wte
  // gradient at the very end of the backward. Otherwise the model adds it to grads(0).
  // tokens (B,T), dres (B,T,C); vocabulary rows [v0, v0 + vrows) are this rank's.
  virtual bool embedding_backward(const int32_t* tokens, CView dres, int64_t B, int64_t T, int64_t v0,
                                  int64_t vrows) {
    return false;
  }
};

}  // namespace weft
