// The CPU backend's LayerNorm backward on 16-bit tensors (issue 32). The typed default stages
// its whole dout and input (N C elements each: the largest staging of a GPT block's backward);
// this reads each row in place into per-thread fp32 scratch, runs the fp32 kernel's row
// (cpu_math.h) over the same rows per thread, and rounds dinp's row once. The weight and bias
// gradients sum the threads' partial sums in the fp32 kernel's order: bitwise the typed default
// on the fp32 kernel. Operands may mix f32, bf16 and f16.
#pragma once
#include <cstdint>

#include "backend/cpu/rows_16.h"
#include "core/view.h"

namespace weft::cpu {

class LayerNorm16 {
 public:
  // As Backend::layernorm_backward: dinp (N,C) +=, dw (C) +=, db (C) +=.
  void backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean, CView rstd, int64_t N,
                int64_t C);

 private:
  ThreadScratch scratch_;
};

}  // namespace weft::cpu
